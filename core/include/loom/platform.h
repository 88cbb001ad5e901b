/* The operating system behind one thin layer: only src/platform/ calls the OS
 * for shared objects, file mapping, threads, clocks, paths and environment. */
#ifndef LOOM_PLATFORM_H
#define LOOM_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#include <loom/status.h>

/* ---- shared objects */
typedef struct loom_dl loom_dl;
/* RTLD_NOW | RTLD_LOCAL; on failure the loader's text goes into err. */
loom_status loom_dl_open(const char *path, loom_dl **out, loom_err *err);
void *loom_dl_sym(loom_dl *dl, const char *name);
void loom_dl_close(loom_dl *dl);
/* The platform's shared-object suffix: ".so", ".dll", ".dylib". */
const char *loom_dl_suffix(void);

/* ---- files */
typedef struct loom_map {
    const uint8_t *data;
    uint64_t size;
    void *impl; /* platform handle */
} loom_map;
/* Maps a whole file read-only. An empty file maps to data == NULL, size 0. */
loom_status loom_map_file(const char *path, loom_map *map, loom_err *err);
void loom_unmap(loom_map *map);

/* How a mapping was kept resident (weights the page cache must not evict). */
typedef enum loom_pin_kind {
    LOOM_PIN_NONE = 0,  /* neither could be done; err says why */
    LOOM_PIN_MLOCK = 1, /* the file's pages locked in place */
    LOOM_PIN_HUGE_COPY =
        2 /* copied into anonymous (huge) pages, same address */
} loom_pin_kind;
/* Pins a mapped file: mlock where the limits allow, else a copy into
 * anonymous transparent huge pages moved onto the mapping's own addresses
 * (pointers into it stay valid). */
loom_pin_kind loom_map_pin(loom_map *map, loom_err *err);
/* The copy loom_map_pin falls back on: the mapping's bytes moved into
 * anonymous memory at the same addresses (read-only, huge pages asked for). */
loom_status loom_map_to_anon(loom_map *map, loom_err *err);
/* n bytes of zeroed anonymous memory for weights a family keeps resident,
 * 2 MiB-aligned with transparent huge pages asked for where the OS has
 * them (fewer page faults to fill it, fewer TLB misses to stream it); NULL
 * when there is none. Freed with loom_resident_free(p, n). */
void *loom_resident_alloc(size_t n);
void loom_resident_free(void *p, size_t n);
/* The pin kind's name, for logs and `loom bench` ("mlock", ...). */
static inline const char *loom_pin_name(loom_pin_kind kind)
{
    return kind == LOOM_PIN_MLOCK       ? "mlock"
           : kind == LOOM_PIN_HUGE_COPY ? "huge-page copy"
                                        : "none";
}
/* Physical memory in bytes (0 when unknown). */
uint64_t loom_mem_total(void);

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
loom_status loom_read_file(const char *path, char **data, size_t *size,
                           loom_err *err);
int loom_file_exists(const char *path);
int loom_dir_exists(const char *path);
/* 1 if the file can be read by its group or others (POSIX mode bits). */
int loom_file_is_shared(const char *path);
/* Calls fn for each entry name (not "." or "..") of a directory, sorted. */
loom_status loom_dir_list(const char *dir,
                          void (*fn)(void *ctx, const char *name), void *ctx,
                          loom_err *err);
/* Directory of the running executable (no trailing separator). */
loom_status loom_exe_dir(char *buf, size_t size, loom_err *err);
/* The home directory ($HOME, or %USERPROFILE% on Windows). NULL if none. */
const char *loom_home_dir(void);
char loom_path_sep(void);      /* '/' or '\\' */
char loom_path_list_sep(void); /* ':' or ';' */
/* Makes a temporary directory (for tests and tools) into buf. */
loom_status loom_mkdtemp(char *buf, size_t size, loom_err *err);

/* ---- environment */
const char *loom_getenv(const char *name);

/* ---- time */
uint64_t loom_now_ns(void);  /* monotonic */
double loom_wall_time(void); /* seconds since the epoch */
void loom_sleep_ms(uint32_t ms);

/* ---- threads */
typedef struct loom_thread loom_thread;
typedef struct loom_mutex loom_mutex;
typedef struct loom_cond loom_cond;
loom_status loom_thread_start(loom_thread **t, void (*fn)(void *), void *arg,
                              loom_err *err);
void loom_thread_join(loom_thread *t);
loom_mutex *loom_mutex_new(void);
void loom_mutex_free(loom_mutex *m);
void loom_mutex_lock(loom_mutex *m);
void loom_mutex_unlock(loom_mutex *m);
loom_cond *loom_cond_new(void);
void loom_cond_free(loom_cond *c);
void loom_cond_wait(loom_cond *c, loom_mutex *m);
/* Returns 0 when signalled, 1 on timeout. */
int loom_cond_timedwait(loom_cond *c, loom_mutex *m, uint32_t ms);
void loom_cond_signal(loom_cond *c);
void loom_cond_broadcast(loom_cond *c);
int loom_cpu_count(void);
/* Asks the OS for this process's permission to use AMX tile data (Linux:
 * arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which it must give
 * before any thread runs a tile instruction; the grant is process-wide and
 * asking again is harmless. LOOM_ERR_UNSUPPORTED, naming the cause, where
 * the OS has no such request or refuses it (the CPUID check is the
 * caller's). */
loom_status loom_cpu_amx_enable(loom_err *err);

/* The local time now written by strftime FORMAT into buf; 0, or -1 when
 * it does not fit. */
int loom_local_time_format(const char *format, char *buf, size_t size);
/* 1 when standard stream fd (0, 1, 2) is a terminal. */
int loom_is_terminal(int fd);

/* ---- append-only files (request logs) */
typedef struct loom_file loom_file;
/* Opens path for appending, creating it (mode 0600) when absent. */
loom_status loom_append_open(const char *path, loom_file **out, loom_err *err);
/* Appends buf with a single write on an append-mode handle, so lines written
 * by concurrent threads or processes never interleave. */
loom_status loom_append_write(loom_file *f, const void *buf, size_t n,
                              loom_err *err);
void loom_file_close(loom_file *f);

/* ---- signals (long-running commands such as `loom serve`) */
enum loom_signal {
    LOOM_SIGNAL_NONE = 0,  /* timed out */
    LOOM_SIGNAL_STOP = 1,  /* SIGINT, SIGTERM, console Ctrl-C / close */
    LOOM_SIGNAL_RELOAD = 2 /* SIGHUP */
};
/* Routes stop/reload signals to loom_signals_wait and ignores SIGPIPE. Call
 * before starting any thread, so every thread inherits the blocked mask. */
loom_status loom_signals_block(loom_err *err);
/* Waits up to ms for one of those signals; returns an enum loom_signal. */
int loom_signals_wait(uint32_t ms);

/* ---- sockets (loopback clients in tests, peer checks in the server) */
typedef intptr_t loom_socket;
/* A blocking TCP connection to host:port (numeric or resolvable name). */
loom_status loom_tcp_connect(const char *host, int port, loom_socket *out,
                             loom_err *err);
/* A listening TCP socket bound to host:port (port 0: any free one, reported
 * in *bound_port), with address reuse on, for servers. */
loom_status loom_tcp_listen(const char *host, int port, loom_socket *out,
                            int *bound_port, loom_err *err);
/* Sends all n bytes; returns 0, or -1 when the connection failed. */
int loom_socket_send_all(loom_socket s, const void *buf, size_t n);
/* Receives up to n bytes, waiting at most timeout_ms. Returns the count,
 * 0 at end of stream, -1 on error, -2 on timeout. */
long loom_socket_recv(loom_socket s, void *buf, size_t n, uint32_t timeout_ms);
void loom_socket_close(loom_socket s);
/* Ends both directions of a connection without closing the descriptor, so
 * that the thread reading it sees the end and closes it itself. */
void loom_socket_shutdown(loom_socket s);
/* Ends the sending direction only (the peer reads to its end). */
void loom_socket_shutdown_send(loom_socket s);
/* Closes with a reset (RST) instead of an orderly end. */
void loom_socket_reset(loom_socket s);
/* Accepts a connection from a listening socket without blocking: 1 with
 * *out (and its peer address in ADDR, *addr_len bytes), 0 when none is
 * waiting, -1 on error. */
int loom_socket_accept(loom_socket listener, loom_socket *out, void *addr,
                       size_t *addr_len);
/* Makes accept on LISTENER return at once when none is waiting. */
int loom_socket_set_nonblocking(loom_socket s);
/* Copies up to n waiting bytes without consuming them or blocking: the
 * count, 0 at end of stream, -1 on error, -2 when nothing is waiting. */
long loom_socket_peek(loom_socket s, void *buf, size_t n);
/* Readiness for reading is reported only once N bytes wait (where the OS
 * supports it; elsewhere a no-op). */
void loom_socket_set_rcvlowat(loom_socket s, int n);
/* The number of bytes waiting to be read (without reading them), or -1. */
long loom_socket_pending(loom_socket s);
/* Asks for a receive buffer of N bytes (the OS may cap it). */
void loom_socket_set_rcvbuf(loom_socket s, int n);
/* Waits up to timeout_ms for any of N sockets to be readable (or at end or
 * failed); ready[i] is set to 1 for those. The count ready, or -1. */
int loom_socket_poll(const loom_socket *s, size_t n, unsigned char *ready,
                     uint32_t timeout_ms);
/* 1 when the peer of a connected socket has reset it or the socket failed
 * (checked without consuming data or blocking), else 0: a peer that shut
 * only its sending half still reads. */
int loom_socket_peer_gone(loom_socket s);

/* ---- process */
/* Resident set size of this process in bytes, 0 if unknown. */
uint64_t loom_rss_bytes(void);

#endif
