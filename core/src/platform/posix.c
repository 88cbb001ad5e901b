/* The POSIX half of the platform layer: every OS call the core makes. */
#define _GNU_SOURCE
#include <loom/platform.h>

#include "names.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- dl */

struct loom_dl {
    void *handle;
};

loom_status loom_dl_open(const char *path, loom_dl **out, loom_err *err)
{
    /* RTLD_LOCAL keeps one plugin's symbols from resolving another's. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return loom_err_set(err, LOOM_ERR_IO, "%s", why ? why : path);
    }
    loom_dl *dl = malloc(sizeof *dl);
    if (!dl) {
        dlclose(h);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    dl->handle = h;
    *out = dl;
    return LOOM_OK;
}

void *loom_dl_sym(loom_dl *dl, const char *name)
{
    return dl ? dlsym(dl->handle, name) : NULL;
}

void loom_dl_close(loom_dl *dl)
{
    if (!dl)
        return;
    dlclose(dl->handle);
    free(dl);
}

const char *loom_dl_suffix(void)
{
#if defined(__APPLE__)
    return ".dylib";
#else
    return ".so";
#endif
}

/* ---------------------------------------------------------------- files */

loom_status loom_map_file(const char *path, loom_map *map, loom_err *err)
{
    memset(map, 0, sizeof *map);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return loom_err_set(err,
                            errno == ENOENT ? LOOM_ERR_NOT_FOUND : LOOM_ERR_IO,
                            "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return loom_err_set(err, LOOM_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return LOOM_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return loom_err_set(err, LOOM_ERR_IO, "%s: mmap: %s", path,
                            strerror(e));
    map->data = p;
    map->size = (uint64_t)st.st_size;
    return LOOM_OK;
}

#define HUGE_ALIGN ((uintptr_t)2 << 20)

/* Anonymous read-write memory of n bytes at the same offset within a 2 MiB
 * page as `like`, so that huge pages survive a move onto `like`. */
static void *map_like(const void *like, size_t n)
{
    size_t span = n + HUGE_ALIGN;
    uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t off = (uintptr_t)like & (HUGE_ALIGN - 1);
    uintptr_t a = ((uintptr_t)p + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
    uint8_t *q =
        (uint8_t *)(a + off >= (uintptr_t)p + HUGE_ALIGN ? a + off - HUGE_ALIGN
                                                         : a + off);
    if (q > p)
        munmap(p, (size_t)(q - p));
    if (q + n < p + span)
        munmap(q + n, (size_t)(p + span - (q + n)));
    return q;
}

void *loom_resident_alloc(size_t n)
{
    if (n == 0)
        return NULL;
    void *p = map_like(NULL, n);
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

void loom_resident_free(void *p, size_t n)
{
    if (p)
        munmap(p, n);
}

loom_status loom_map_to_anon(loom_map *map, loom_err *err)
{
    void *base = (void *)map->data;
    size_t n = (size_t)map->size;
#if defined(__linux__) && defined(MREMAP_FIXED)
    void *copy = map_like(base, n);
    if (!copy)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "no memory for a %zu-byte copy of the mapping", n);
#ifdef MADV_HUGEPAGE
    madvise(copy, n, MADV_HUGEPAGE);
#endif
    memcpy(copy, base, n);
    if (mprotect(copy, n, PROT_READ) == 0 &&
        mremap(copy, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, base) == base)
        return LOOM_OK;
    int e = errno;
    munmap(copy, n);
    return loom_err_set(err, LOOM_ERR_IO, "moving a copy of the mapping: %s",
                        strerror(e));
#else
    (void)base;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "no mremap here: a %zu-byte mapping stays as it is", n);
#endif
}

loom_pin_kind loom_map_pin(loom_map *map, loom_err *err)
{
    if (!map || !map->data)
        return LOOM_PIN_NONE;
    if (mlock(map->data, (size_t)map->size) == 0)
        return LOOM_PIN_MLOCK;
    int e_lock = errno;
    loom_err cerr;
    if (loom_map_to_anon(map, &cerr) == LOOM_OK)
        return LOOM_PIN_HUGE_COPY;
    loom_err_set(err, LOOM_ERR_IO,
                 "mlock of %llu bytes: %s (raise the memlock limit); %s",
                 (unsigned long long)map->size, strerror(e_lock), cerr.msg);
    return LOOM_PIN_NONE;
}

uint64_t loom_mem_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

void loom_unmap(loom_map *map)
{
    if (map && map->data)
        munmap((void *)map->data, (size_t)map->size);
    if (map)
        memset(map, 0, sizeof *map);
}

loom_status loom_read_file(const char *path, char **data, size_t *size,
                           loom_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return loom_err_set(err,
                            errno == ENOENT ? LOOM_ERR_NOT_FOUND : LOOM_ERR_IO,
                            "%s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory",
                                    path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return loom_err_set(err, LOOM_ERR_IO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (size)
        *size = n;
    return LOOM_OK;
}

int loom_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int loom_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int loom_file_is_shared(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    return (st.st_mode & (S_IRWXG | S_IRWXO)) != 0;
}

loom_status loom_dir_list(const char *dir,
                          void (*fn)(void *ctx, const char *name), void *ctx,
                          loom_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return loom_err_set(err,
                            errno == ENOENT ? LOOM_ERR_NOT_FOUND : LOOM_ERR_IO,
                            "%s: %s", dir, strerror(errno));
    loom__names names = {0};
    loom_status rc = LOOM_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        rc = loom__names_add(&names, e->d_name, dir, err);
        if (rc != LOOM_OK)
            break;
    }
    closedir(d);
    if (rc == LOOM_OK)
        loom__names_each(&names, fn, ctx);
    loom__names_free(&names);
    return rc;
}

loom_status loom_exe_dir(char *buf, size_t size, loom_err *err)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1)
        return loom_err_set(err, LOOM_ERR_IO,
                            "cannot find the executable's path");
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return LOOM_OK;
}

const char *loom_home_dir(void)
{
    const char *h = getenv("HOME");
    return h && *h ? h : NULL;
}

char loom_path_sep(void)
{
    return '/';
}

char loom_path_list_sep(void)
{
    return ':';
}

loom_status loom_mkdtemp(char *buf, size_t size, loom_err *err)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if ((size_t)snprintf(buf, size, "%s/loom-XXXXXX", tmp) >= size)
        return loom_err_set(err, LOOM_ERR_RANGE, "temporary path too long");
    if (!mkdtemp(buf))
        return loom_err_set(err, LOOM_ERR_IO, "mkdtemp %s: %s", buf,
                            strerror(errno));
    return LOOM_OK;
}

const char *loom_getenv(const char *name)
{
    return getenv(name);
}

/* ---------------------------------------------------------------- time */

uint64_t loom_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double loom_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void loom_sleep_ms(uint32_t ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---------------------------------------------------------------- threads */

struct loom_thread {
    pthread_t tid;
    void (*fn)(void *);
    void *arg;
};

struct loom_mutex {
    pthread_mutex_t m;
};

struct loom_cond {
    pthread_cond_t c;
};

static void *thread_main(void *p)
{
    loom_thread *t = p;
    t->fn(t->arg);
    return NULL;
}

loom_status loom_thread_start(loom_thread **out, void (*fn)(void *), void *arg,
                              loom_err *err)
{
    loom_thread *t = malloc(sizeof *t);
    if (!t)
        return loom_err_set(err, LOOM_ERR_NOMEM, "thread: out of memory");
    t->fn = fn;
    t->arg = arg;
    int rc = pthread_create(&t->tid, NULL, thread_main, t);
    if (rc != 0) {
        free(t);
        return loom_err_set(err, LOOM_ERR_IO, "pthread_create: %s",
                            strerror(rc));
    }
    *out = t;
    return LOOM_OK;
}

void loom_thread_join(loom_thread *t)
{
    if (!t)
        return;
    pthread_join(t->tid, NULL);
    free(t);
}

loom_mutex *loom_mutex_new(void)
{
    loom_mutex *m = malloc(sizeof *m);
    if (m)
        pthread_mutex_init(&m->m, NULL);
    return m;
}

void loom_mutex_free(loom_mutex *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->m);
    free(m);
}

void loom_mutex_lock(loom_mutex *m)
{
    pthread_mutex_lock(&m->m);
}

void loom_mutex_unlock(loom_mutex *m)
{
    pthread_mutex_unlock(&m->m);
}

loom_cond *loom_cond_new(void)
{
    loom_cond *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&c->c, &a);
    pthread_condattr_destroy(&a);
    return c;
}

void loom_cond_free(loom_cond *c)
{
    if (!c)
        return;
    pthread_cond_destroy(&c->c);
    free(c);
}

void loom_cond_wait(loom_cond *c, loom_mutex *m)
{
    pthread_cond_wait(&c->c, &m->m);
}

int loom_cond_timedwait(loom_cond *c, loom_mutex *m, uint32_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&c->c, &m->m, &ts) == ETIMEDOUT;
}

void loom_cond_signal(loom_cond *c)
{
    pthread_cond_signal(&c->c);
}

void loom_cond_broadcast(loom_cond *c)
{
    pthread_cond_broadcast(&c->c);
}

int loom_local_time_format(const char *format, char *buf, size_t size)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm))
        return -1;
    /* an empty result is a valid one for an empty format */
    if (size == 0 || (strftime(buf, size, format, &tm) == 0 && format[0]))
        return -1;
    return 0;
}

int loom_is_terminal(int fd)
{
    return isatty(fd) == 1;
}

int loom_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Linux 5.16+ keeps AMX tile data (XSAVE feature 18, 8 KiB a thread) off
 * until a process asks: a tile instruction before that faults (SIGILL). The
 * constants are the kernel's uapi values, spelled here because older libc
 * headers lack them. */
#define LOOM_ARCH_REQ_XCOMP_PERM 0x1023
#define LOOM_XFEATURE_XTILEDATA  18

loom_status loom_cpu_amx_enable(loom_err *err)
{
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, LOOM_ARCH_REQ_XCOMP_PERM,
                LOOM_XFEATURE_XTILEDATA) == 0)
        return LOOM_OK;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %s",
                        strerror(errno));
#else
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "AMX tile data: no permission request on this OS");
#endif
}

/* ---------------------------------------------------------------- append */

struct loom_file {
    int fd;
};

loom_status loom_append_open(const char *path, loom_file **out, loom_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, strerror(errno));
    loom_file *f = malloc(sizeof *f);
    if (!f) {
        close(fd);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = fd;
    *out = f;
    return LOOM_OK;
}

loom_status loom_append_write(loom_file *f, const void *buf, size_t n,
                              loom_err *err)
{
    /* One write() on an O_APPEND descriptor: the kernel positions and copies
     * it under the inode lock, so concurrent lines cannot interleave. A short
     * write (disk full) is reported rather than completed by a second call,
     * which could land after another thread's line. */
    ssize_t w;
    do {
        w = write(f->fd, buf, n);
    } while (w < 0 && errno == EINTR);
    if (w < 0)
        return loom_err_set(err, LOOM_ERR_IO, "append: %s", strerror(errno));
    if ((size_t)w != n)
        return loom_err_set(err, LOOM_ERR_IO,
                            "append: short write (%zd of %zu)", w, n);
    return LOOM_OK;
}

void loom_file_close(loom_file *f)
{
    if (!f)
        return;
    close(f->fd);
    free(f);
}

/* ---------------------------------------------------------------- signals */

static void signal_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

loom_status loom_signals_block(loom_err *err)
{
    sigset_t set;
    signal_set(&set);
    int rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (rc != 0)
        return loom_err_set(err, LOOM_ERR_IO, "pthread_sigmask: %s",
                            strerror(rc));
    /* A peer that hangs up mid-response must fail the write, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    return LOOM_OK;
}

int loom_signals_wait(uint32_t ms)
{
    sigset_t set;
    signal_set(&set);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(&set, NULL, &ts);
    if (sig == SIGHUP)
        return LOOM_SIGNAL_RELOAD;
    if (sig == SIGINT || sig == SIGTERM)
        return LOOM_SIGNAL_STOP;
    return LOOM_SIGNAL_NONE;
}

/* ---------------------------------------------------------------- sockets */

/* Linux spellings; elsewhere the plain call (SIGPIPE is ignored by servers
 * through loom_signals_block). */
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif
#ifndef SOCK_CLOEXEC
#define SOCK_CLOEXEC 0
#endif
#ifndef POLLRDHUP
#define POLLRDHUP 0
#endif

/* The stream addresses of host:port (passive: to bind), for the caller to
 * free with freeaddrinfo. */
static loom_status resolve(const char *host, int port, int passive,
                           struct addrinfo **res, loom_err *err)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, res);
    if (rc != 0)
        return loom_err_set(err, LOOM_ERR_IO, "%s:%d: %s", host, port,
                            gai_strerror(rc));
    return LOOM_OK;
}

loom_status loom_tcp_connect(const char *host, int port, loom_socket *out,
                             loom_err *err)
{
    struct addrinfo *res = NULL;
    loom_status st = resolve(host, port, 0, &res, err);
    if (st != LOOM_OK)
        return st;
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        last = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return loom_err_set(err, LOOM_ERR_IO, "%s:%d: %s", host, port,
                            strerror(last));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    *out = fd;
    return LOOM_OK;
}

#define LOOM_LISTEN_BACKLOG 1024

loom_status loom_tcp_listen(const char *host, int port, loom_socket *out,
                            int *bound_port, loom_err *err)
{
    struct addrinfo *res = NULL;
    loom_status st = resolve(host, port, 1, &res, err);
    if (st != LOOM_OK)
        return st;
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        /* a restarted server must not wait out TIME_WAIT on its port */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        /* a burst of connections waits in the backlog instead of having
         * its SYNs dropped (and retried a second later) */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, LOOM_LISTEN_BACKLOG) == 0)
            break;
        last = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return loom_err_set(err, LOOM_ERR_IO, "listen on %s:%d: %s", host, port,
                            strerror(last));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    if (bound_port)
        *bound_port = bound;
    *out = fd;
    return LOOM_OK;
}

int loom_socket_send_all(loom_socket s, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = send((int)s, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

long loom_socket_recv(loom_socket s, void *buf, size_t n, uint32_t timeout_ms)
{
    struct pollfd pfd = {(int)s, POLLIN, 0};
    int rc;
    do {
        rc = poll(&pfd, 1, (int)timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return -2;
    if (rc < 0)
        return -1;
    ssize_t r;
    do {
        r = recv((int)s, buf, n, 0);
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -1 : (long)r;
}

void loom_socket_close(loom_socket s)
{
    close((int)s);
}

void loom_socket_shutdown(loom_socket s)
{
    shutdown((int)s, SHUT_RDWR);
}

void loom_socket_shutdown_send(loom_socket s)
{
    shutdown((int)s, SHUT_WR);
}

int loom_socket_accept(loom_socket listener, loom_socket *out, void *addr,
                       size_t *addr_len)
{
    socklen_t len = (socklen_t)*addr_len;
    int fd = accept((int)listener, (struct sockaddr *)addr, &len);
    if (fd < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                       errno == ECONNABORTED
                   ? 0
                   : -1;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    *out = fd;
    *addr_len = len;
    return 1;
}

int loom_socket_set_nonblocking(loom_socket s)
{
    int fl = fcntl((int)s, F_GETFL);
    return fl < 0 || fcntl((int)s, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

long loom_socket_peek(loom_socket s, void *buf, size_t n)
{
    ssize_t r = recv((int)s, buf, n, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2
                                                                         : -1;
    return (long)r;
}

void loom_socket_set_rcvlowat(loom_socket s, int n)
{
    setsockopt((int)s, SOL_SOCKET, SO_RCVLOWAT, &n, sizeof n);
}

long loom_socket_pending(loom_socket s)
{
    int n = 0;
    return ioctl((int)s, FIONREAD, &n) == 0 ? (long)n : -1;
}

void loom_socket_set_rcvbuf(loom_socket s, int n)
{
    setsockopt((int)s, SOL_SOCKET, SO_RCVBUF, &n, sizeof n);
}

int loom_socket_poll(const loom_socket *s, size_t n, unsigned char *ready,
                     uint32_t timeout_ms)
{
    struct pollfd stack[64];
    struct pollfd *p = n <= 64 ? stack : malloc(n * sizeof *p);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++)
        p[i] = (struct pollfd){(int)s[i], POLLIN, 0};
    int r = poll(p, (nfds_t)n, (int)timeout_ms);
    for (size_t i = 0; i < n; i++)
        ready[i] = r > 0 && p[i].revents != 0;
    if (p != stack)
        free(p);
    return r < 0 && errno == EINTR ? 0 : r;
}

void loom_socket_reset(loom_socket s)
{
    struct linger l = {1, 0};
    setsockopt((int)s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close((int)s);
}

int loom_socket_peer_gone(loom_socket s)
{
    /* A peer that only shut its sending half (FIN, end of file) still
     * reads its answer: only a reset or an error means it is gone. */
    struct pollfd pfd = {(int)s, POLLIN, 0};
    if (poll(&pfd, 1, 0) <= 0)
        return 0;
    if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL))
        return 1;
    if (pfd.revents & POLLIN) {
        char c;
        ssize_t r = recv((int)s, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
               errno != EINTR;
    }
    return 0;
}

/* ---------------------------------------------------------------- process */

uint64_t loom_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    if (n != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}
