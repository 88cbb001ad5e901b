/* The Windows half of the platform layer (mingw-w64 / MSVC): every OS call
 * the core makes, behind the same header as posix.c. */
#define WIN32_LEAN_AND_MEAN
#include <loom/platform.h>

#include "names.h"

#include <windows.h>
#include <winsock2.h>
#include <ws2tcpip.h>
#define PSAPI_VERSION 2
#include <psapi.h>

#include <direct.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- text */

/* UTF-8 -> UTF-16 for the wide API; NULL on failure (caller frees). */
static wchar_t *widen(const char *s)
{
    int n = MultiByteToWideChar(CP_UTF8, 0, s, -1, NULL, 0);
    if (n <= 0)
        return NULL;
    wchar_t *w = malloc((size_t)n * sizeof *w);
    if (w && MultiByteToWideChar(CP_UTF8, 0, s, -1, w, n) <= 0) {
        free(w);
        return NULL;
    }
    return w;
}

static void narrow(const wchar_t *w, char *buf, size_t size)
{
    if (WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)size, NULL, NULL) <= 0)
        buf[0] = '\0';
}

/* The absolute wide form of a UTF-8 path (caller frees), NULL on failure:
 * LoadLibraryEx searches a DLL's own directory only for absolute paths. */
static wchar_t *full_path(const char *s)
{
    wchar_t *w = widen(s);
    if (!w)
        return NULL;
    DWORD n = GetFullPathNameW(w, 0, NULL, NULL);
    wchar_t *f = n ? malloc((size_t)n * sizeof *f) : NULL;
    if (f && GetFullPathNameW(w, n, f, NULL) >= n) {
        free(f);
        f = NULL;
    }
    free(w);
    return f;
}

/* egress: turns GetLastError() into text for a loom_err message */
static void last_error_text(char *buf, size_t size)
{
    DWORD e = GetLastError();
    wchar_t wbuf[512];
    if (!FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM |
                            FORMAT_MESSAGE_IGNORE_INSERTS,
                        NULL, e, 0, wbuf, 512, NULL)) {
        snprintf(buf, size, "Windows error %lu", (unsigned long)e);
        return;
    }
    narrow(wbuf, buf, size);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
}

/* ---------------------------------------------------------------- dl */

struct loom_dl {
    HMODULE handle;
};

/* The first DLL that the file w imports and that is neither beside it nor
 * in the system's DLL directories, into out ("" when none or unreadable):
 * LoadLibrary says only "module not found", dlerror names the library. */
static void missing_import(const wchar_t *w, char *out, size_t size)
{
    out[0] = '\0';
    HMODULE img = LoadLibraryExW(w, NULL, DONT_RESOLVE_DLL_REFERENCES);
    if (!img)
        return;
    const uint8_t *base = (const uint8_t *)img;
    const IMAGE_DOS_HEADER *dos = (const IMAGE_DOS_HEADER *)base;
    const IMAGE_NT_HEADERS *nt =
        (const IMAGE_NT_HEADERS *)(base + dos->e_lfanew);
    const IMAGE_DATA_DIRECTORY *dir =
        &nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
    const IMAGE_IMPORT_DESCRIPTOR *imp =
        dir->Size
            ? (const IMAGE_IMPORT_DESCRIPTOR *)(base + dir->VirtualAddress)
            : NULL;
    /* the plugin's directory, with a trailing separator */
    wchar_t here[MAX_PATH * 4];
    size_t hn = wcslen(w);
    while (hn && w[hn - 1] != L'\\' && w[hn - 1] != L'/')
        hn--;
    if (hn >= sizeof here / sizeof *here)
        hn = 0;
    memcpy(here, w, hn * sizeof *here);
    for (; imp && imp->Name; imp++) {
        const char *name = (const char *)(base + imp->Name);
        wchar_t *wn = widen(name);
        if (!wn)
            continue;
        int found = 0;
        if (hn + wcslen(wn) < sizeof here / sizeof *here) {
            wcscpy(here + hn, wn);
            DWORD a = GetFileAttributesW(here);
            found = a != INVALID_FILE_ATTRIBUTES;
        }
        if (!found) {
            HMODULE dep = LoadLibraryExW(wn, NULL,
                                         LOAD_LIBRARY_AS_DATAFILE |
                                             LOAD_LIBRARY_SEARCH_DEFAULT_DIRS);
            found = dep != NULL;
            if (dep)
                FreeLibrary(dep);
        }
        free(wn);
        if (!found) {
            snprintf(out, size, "%s", name);
            break;
        }
    }
    FreeLibrary(img);
}

loom_status loom_dl_open(const char *path, loom_dl **out, loom_err *err)
{
    wchar_t *w = full_path(path);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", path);
    /* look for the plugin's own dependencies beside it */
    HMODULE h = LoadLibraryExW(w, NULL,
                               LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR |
                                   LOAD_LIBRARY_SEARCH_DEFAULT_DIRS);
    if (!h) {
        DWORD e = GetLastError();
        char why[512], dep[256] = "";
        last_error_text(why, sizeof why);
        if (e == ERROR_MOD_NOT_FOUND && loom_file_exists(path))
            missing_import(w, dep, sizeof dep);
        free(w);
        if (dep[0])
            return loom_err_set(err, LOOM_ERR_IO,
                                "%s: it needs %s, which is neither beside it "
                                "nor in the system's DLL directories",
                                path, dep);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
    free(w);
    loom_dl *dl = malloc(sizeof *dl);
    if (!dl) {
        FreeLibrary(h);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    dl->handle = h;
    *out = dl;
    return LOOM_OK;
}

void *loom_dl_sym(loom_dl *dl, const char *name)
{
    if (!dl)
        return NULL;
    FARPROC p = GetProcAddress(dl->handle, name);
    void *v;
    memcpy(&v, &p, sizeof v);
    return v;
}

void loom_dl_close(loom_dl *dl)
{
    if (!dl)
        return;
    FreeLibrary(dl->handle);
    free(dl);
}

const char *loom_dl_suffix(void)
{
    return ".dll";
}

/* ---------------------------------------------------------------- files */

/* The error of a failed CreateFileW on path: NOT_FOUND when it is absent. */
static loom_status open_failed(const char *path, loom_err *err)
{
    DWORD e = GetLastError();
    char why[512];
    last_error_text(why, sizeof why);
    return loom_err_set(err,
                        e == ERROR_FILE_NOT_FOUND || e == ERROR_PATH_NOT_FOUND
                            ? LOOM_ERR_NOT_FOUND
                            : LOOM_ERR_IO,
                        "%s: %s", path, why);
}

struct win_map {
    HANDLE file, mapping;
};

loom_status loom_map_file(const char *path, loom_map *map, loom_err *err)
{
    memset(map, 0, sizeof *map);
    wchar_t *w = widen(path);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", path);
    HANDLE f = CreateFileW(w, GENERIC_READ, FILE_SHARE_READ, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    free(w);
    char why[512];
    if (f == INVALID_HANDLE_VALUE)
        return open_failed(path, err);
    LARGE_INTEGER size;
    if (!GetFileSizeEx(f, &size)) {
        last_error_text(why, sizeof why);
        CloseHandle(f);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
    if (size.QuadPart == 0) {
        CloseHandle(f);
        return LOOM_OK;
    }
    HANDLE m = CreateFileMappingW(f, NULL, PAGE_READONLY, 0, 0, NULL);
    if (!m) {
        last_error_text(why, sizeof why);
        CloseHandle(f);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
    void *p = MapViewOfFile(m, FILE_MAP_READ, 0, 0, 0);
    if (!p) {
        last_error_text(why, sizeof why);
        CloseHandle(m);
        CloseHandle(f);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
    struct win_map *wm = malloc(sizeof *wm);
    if (!wm) {
        UnmapViewOfFile(p);
        CloseHandle(m);
        CloseHandle(f);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    wm->file = f;
    wm->mapping = m;
    map->data = p;
    map->size = (uint64_t)size.QuadPart;
    map->impl = wm;
    return LOOM_OK;
}

/* Large pages need a privilege a process rarely holds: plain pages. */
void *loom_resident_alloc(size_t n)
{
    if (n == 0)
        return NULL;
    return VirtualAlloc(NULL, n, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

void loom_resident_free(void *p, size_t n)
{
    (void)n;
    if (p)
        VirtualFree(p, 0, MEM_RELEASE);
}

/* Windows locks pages with VirtualLock, within the process's working set:
 * it is grown to hold the mapping first. There is no mremap to move a copy
 * onto the mapping's addresses, so the copy fallback is refused. */
loom_status loom_map_to_anon(loom_map *map, loom_err *err)
{
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "no copy onto a mapping's addresses on Windows: the "
                        "%llu-byte mapping stays as it is",
                        (unsigned long long)(map ? map->size : 0));
}

loom_pin_kind loom_map_pin(loom_map *map, loom_err *err)
{
    if (!map || !map->data)
        return LOOM_PIN_NONE;
    SIZE_T lo = 0, hi = 0;
    HANDLE self = GetCurrentProcess();
    if (GetProcessWorkingSetSize(self, &lo, &hi)) {
        SIZE_T n = (SIZE_T)map->size;
        SetProcessWorkingSetSize(self, lo + n, hi + n);
    }
    if (VirtualLock((LPVOID)map->data, (SIZE_T)map->size))
        return LOOM_PIN_MLOCK;
    loom_err_set(err, LOOM_ERR_IO,
                 "VirtualLock of %llu bytes failed (error %lu)",
                 (unsigned long long)map->size, (unsigned long)GetLastError());
    return LOOM_PIN_NONE;
}

uint64_t loom_mem_total(void)
{
    MEMORYSTATUSEX st;
    st.dwLength = sizeof st;
    return GlobalMemoryStatusEx(&st) ? (uint64_t)st.ullTotalPhys : 0;
}

void loom_unmap(loom_map *map)
{
    if (!map)
        return;
    if (map->data)
        UnmapViewOfFile(map->data);
    struct win_map *wm = map->impl;
    if (wm) {
        CloseHandle(wm->mapping);
        CloseHandle(wm->file);
        free(wm);
    }
    memset(map, 0, sizeof *map);
}

loom_status loom_read_file(const char *path, char **data, size_t *size,
                           loom_err *err)
{
    wchar_t *w = widen(path);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", path);
    /* shared for writing too: a request log is read while the server
     * appends to it, as POSIX allows */
    HANDLE f = CreateFileW(
        w, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
        NULL, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    free(w);
    char why[512];
    if (f == INVALID_HANDLE_VALUE)
        return open_failed(path, err);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (buf && n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            } else {
                buf = nb;
                cap *= 2;
            }
        }
        if (!buf) {
            CloseHandle(f);
            return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
        }
        size_t want = cap - n - 1;
        DWORD got = 0;
        if (!ReadFile(f, buf + n, want > 1u << 30 ? 1u << 30 : (DWORD)want,
                      &got, NULL)) {
            last_error_text(why, sizeof why);
            free(buf);
            CloseHandle(f);
            return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
        }
        if (got == 0)
            break;
        n += got;
    }
    CloseHandle(f);
    buf[n] = '\0';
    *data = buf;
    if (size)
        *size = n;
    return LOOM_OK;
}

static DWORD attributes(const char *path)
{
    wchar_t *w = widen(path);
    if (!w)
        return INVALID_FILE_ATTRIBUTES;
    DWORD a = GetFileAttributesW(w);
    free(w);
    return a;
}

int loom_file_exists(const char *path)
{
    DWORD a = attributes(path);
    return a != INVALID_FILE_ATTRIBUTES && !(a & FILE_ATTRIBUTE_DIRECTORY);
}

int loom_dir_exists(const char *path)
{
    DWORD a = attributes(path);
    return a != INVALID_FILE_ATTRIBUTES && (a & FILE_ATTRIBUTE_DIRECTORY);
}

int loom_file_is_shared(const char *path)
{
    /* NTFS guards files with ACLs, not mode bits, so there is nothing to
     * check: a file under the user's profile is private by default, and the
     * key file's mode check is skipped (docs/windows.md). */
    (void)path;
    return 0;
}

loom_status loom_dir_list(const char *dir,
                          void (*fn)(void *ctx, const char *name), void *ctx,
                          loom_err *err)
{
    char pattern[2048];
    snprintf(pattern, sizeof pattern, "%s\\*", dir);
    wchar_t *w = widen(pattern);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", dir);
    WIN32_FIND_DATAW fd;
    HANDLE h = FindFirstFileW(w, &fd);
    free(w);
    if (h == INVALID_HANDLE_VALUE)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND, "%s: cannot list", dir);
    loom__names names = {0};
    loom_status rc = LOOM_OK;
    do {
        char name[1024];
        narrow(fd.cFileName, name, sizeof name);
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        rc = loom__names_add(&names, name, dir, err);
        if (rc != LOOM_OK)
            break;
    } while (FindNextFileW(h, &fd));
    FindClose(h);
    if (rc == LOOM_OK)
        loom__names_each(&names, fn, ctx);
    loom__names_free(&names);
    return rc;
}

loom_status loom_exe_dir(char *buf, size_t size, loom_err *err)
{
    wchar_t w[MAX_PATH * 4];
    DWORD n = GetModuleFileNameW(NULL, w, (DWORD)(sizeof w / sizeof *w));
    if (n == 0 || n >= sizeof w / sizeof *w)
        return loom_err_set(err, LOOM_ERR_IO,
                            "cannot find the executable's path");
    narrow(w, buf, size);
    char *slash = strrchr(buf, '\\');
    if (slash)
        *slash = '\0';
    return LOOM_OK;
}

const char *loom_home_dir(void)
{
    const char *h = getenv("HOME");
    if (h && *h)
        return h;
    h = getenv("USERPROFILE");
    return h && *h ? h : NULL;
}

char loom_path_sep(void)
{
    return '\\';
}

char loom_path_list_sep(void)
{
    return ';';
}

loom_status loom_mkdtemp(char *buf, size_t size, loom_err *err)
{
    wchar_t tmp[MAX_PATH + 1];
    if (!GetTempPathW(MAX_PATH + 1, tmp))
        return loom_err_set(err, LOOM_ERR_IO, "no temporary directory");
    char base[MAX_PATH * 4];
    narrow(tmp, base, sizeof base);
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(buf, size, "%sloom-%lu-%u", base,
                 (unsigned long)GetCurrentProcessId(),
                 (unsigned)(GetTickCount() + i));
        wchar_t *w = widen(buf);
        if (!w)
            break;
        BOOL ok = CreateDirectoryW(w, NULL);
        free(w);
        if (ok)
            return LOOM_OK;
    }
    return loom_err_set(err, LOOM_ERR_IO, "cannot make a temporary directory");
}

const char *loom_getenv(const char *name)
{
    return getenv(name);
}

/* ---------------------------------------------------------------- time */

uint64_t loom_now_ns(void)
{
    /* whole seconds and the remainder apart, so the product cannot overflow
     * and no tick is lost to rounding */
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    uint64_t hz = (uint64_t)f.QuadPart, t = (uint64_t)c.QuadPart;
    return t / hz * 1000000000ull + t % hz * 1000000000ull / hz;
}

double loom_wall_time(void)
{
    FILETIME ft;
    GetSystemTimeAsFileTime(&ft);
    uint64_t t = ((uint64_t)ft.dwHighDateTime << 32) | ft.dwLowDateTime;
    /* 100 ns ticks since 1601 -> seconds since 1970 */
    return (double)(t - 116444736000000000ull) * 1e-7;
}

void loom_sleep_ms(uint32_t ms)
{
    Sleep(ms);
}

/* ---------------------------------------------------------------- threads */

struct loom_thread {
    HANDLE h;
    void (*fn)(void *);
    void *arg;
};

struct loom_mutex {
    SRWLOCK lock;
};

struct loom_cond {
    CONDITION_VARIABLE cv;
};

static DWORD WINAPI thread_main(LPVOID p)
{
    loom_thread *t = p;
    t->fn(t->arg);
    return 0;
}

loom_status loom_thread_start(loom_thread **out, void (*fn)(void *), void *arg,
                              loom_err *err)
{
    loom_thread *t = malloc(sizeof *t);
    if (!t)
        return loom_err_set(err, LOOM_ERR_NOMEM, "thread: out of memory");
    t->fn = fn;
    t->arg = arg;
    t->h = CreateThread(NULL, 0, thread_main, t, 0, NULL);
    if (!t->h) {
        char why[512];
        last_error_text(why, sizeof why);
        free(t);
        return loom_err_set(err, LOOM_ERR_IO, "CreateThread: %s", why);
    }
    *out = t;
    return LOOM_OK;
}

void loom_thread_join(loom_thread *t)
{
    if (!t)
        return;
    WaitForSingleObject(t->h, INFINITE);
    CloseHandle(t->h);
    free(t);
}

loom_mutex *loom_mutex_new(void)
{
    loom_mutex *m = malloc(sizeof *m);
    if (m)
        InitializeSRWLock(&m->lock);
    return m;
}

void loom_mutex_free(loom_mutex *m)
{
    free(m);
}

void loom_mutex_lock(loom_mutex *m)
{
    AcquireSRWLockExclusive(&m->lock);
}

void loom_mutex_unlock(loom_mutex *m)
{
    ReleaseSRWLockExclusive(&m->lock);
}

loom_cond *loom_cond_new(void)
{
    loom_cond *c = malloc(sizeof *c);
    if (c)
        InitializeConditionVariable(&c->cv);
    return c;
}

void loom_cond_free(loom_cond *c)
{
    free(c);
}

void loom_cond_wait(loom_cond *c, loom_mutex *m)
{
    SleepConditionVariableSRW(&c->cv, &m->lock, INFINITE, 0);
}

int loom_cond_timedwait(loom_cond *c, loom_mutex *m, uint32_t ms)
{
    if (SleepConditionVariableSRW(&c->cv, &m->lock, ms, 0))
        return 0;
    return GetLastError() == ERROR_TIMEOUT;
}

void loom_cond_signal(loom_cond *c)
{
    WakeConditionVariable(&c->cv);
}

void loom_cond_broadcast(loom_cond *c)
{
    WakeAllConditionVariable(&c->cv);
}

int loom_local_time_format(const char *format, char *buf, size_t size)
{
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_s(&tm, &now) != 0)
        return -1;
    if (size == 0 || (strftime(buf, size, format, &tm) == 0 && format[0]))
        return -1;
    return 0;
}

int loom_is_terminal(int fd)
{
    return _isatty(fd) != 0;
}

int loom_cpu_count(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors > 0 ? (int)si.dwNumberOfProcessors : 1;
}

/* Not built or tested with AMX tiles on Windows yet: refused, so the
 * prompt kernels keep to AVX-512 there. */
loom_status loom_cpu_amx_enable(loom_err *err)
{
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "AMX tile data: not enabled on Windows");
}

/* ---------------------------------------------------------------- append */

struct loom_file {
    HANDLE h;
    /* one append at a time through this handle: the handle's file position
     * is shared by its threads, and Wine moves it without a lock */
    SRWLOCK lock;
};

loom_status loom_append_open(const char *path, loom_file **out, loom_err *err)
{
    wchar_t *w = widen(path);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", path);
    /* FILE_APPEND_DATA without FILE_WRITE_DATA: the system puts every write
     * at the end of the file, like O_APPEND, whatever other handles (other
     * processes) wrote meanwhile. */
    HANDLE h =
        CreateFileW(w, FILE_APPEND_DATA | SYNCHRONIZE,
                    FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                    NULL, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
    free(w);
    if (h == INVALID_HANDLE_VALUE) {
        char why[256];
        last_error_text(why, sizeof why);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
    loom_file *f = malloc(sizeof *f);
    if (!f) {
        CloseHandle(h);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    f->h = h;
    InitializeSRWLock(&f->lock);
    *out = f;
    return LOOM_OK;
}

loom_status loom_append_write(loom_file *f, const void *buf, size_t n,
                              loom_err *err)
{
    if (n > 0xffffffffu)
        return loom_err_set(err, LOOM_ERR_RANGE, "append: %llu bytes",
                            (unsigned long long)n);
    /* One WriteFile at the end of the file (offset 0xFFFFFFFF:FFFFFFFF), as
     * POSIX O_APPEND does; a short write is reported, not completed by a
     * second call that could land after another writer's line. */
    OVERLAPPED at_end;
    memset(&at_end, 0, sizeof at_end);
    at_end.Offset = 0xffffffffu;
    at_end.OffsetHigh = 0xffffffffu;
    DWORD w = 0;
    AcquireSRWLockExclusive(&f->lock);
    BOOL ok = WriteFile(f->h, buf, (DWORD)n, &w, &at_end);
    char why[256];
    if (!ok)
        last_error_text(why, sizeof why);
    ReleaseSRWLockExclusive(&f->lock);
    if (!ok)
        return loom_err_set(err, LOOM_ERR_IO, "append: %s", why);
    if (w != n)
        return loom_err_set(err, LOOM_ERR_IO,
                            "append: short write (%lu of %llu)",
                            (unsigned long)w, (unsigned long long)n);
    return LOOM_OK;
}

void loom_file_close(loom_file *f)
{
    if (!f)
        return;
    CloseHandle(f->h);
    free(f);
}

/* ---------------------------------------------------------------- signals */

/* The console control handler has no context pointer, so the event it sets
 * is process-wide by necessity (one console per process). */
static HANDLE stop_event;

static BOOL WINAPI console_handler(DWORD type)
{
    (void)type;
    if (stop_event)
        SetEvent(stop_event);
    return TRUE;
}

loom_status loom_signals_block(loom_err *err)
{
    if (!stop_event)
        stop_event = CreateEventW(NULL, FALSE, FALSE, NULL);
    if (!stop_event || !SetConsoleCtrlHandler(console_handler, TRUE)) {
        char why[256];
        last_error_text(why, sizeof why);
        return loom_err_set(err, LOOM_ERR_IO, "console handler: %s", why);
    }
    return LOOM_OK;
}

int loom_signals_wait(uint32_t ms)
{
    if (!stop_event) {
        Sleep(ms);
        return LOOM_SIGNAL_NONE;
    }
    return WaitForSingleObject(stop_event, ms) == WAIT_OBJECT_0
               ? LOOM_SIGNAL_STOP
               : LOOM_SIGNAL_NONE;
}

/* ---------------------------------------------------------------- sockets */

static BOOL CALLBACK wsa_start(PINIT_ONCE once, PVOID p, PVOID *ctx)
{
    (void)once;
    (void)p;
    (void)ctx;
    WSADATA d;
    return WSAStartup(MAKEWORD(2, 2), &d) == 0;
}

static int wsa_ready(void)
{
    static INIT_ONCE once = INIT_ONCE_STATIC_INIT;
    return InitOnceExecuteOnce(&once, wsa_start, NULL, NULL) ? 0 : -1;
}

static loom_status tcp_open(const char *host, int port, int passive,
                            loom_socket *out, int *bound_port, loom_err *err)
{
    if (wsa_ready() != 0)
        return loom_err_set(err, LOOM_ERR_IO, "WSAStartup failed");
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0)
        return loom_err_set(err, LOOM_ERR_IO, "%s:%d: cannot resolve", host,
                            port);
    SOCKET fd = INVALID_SOCKET;
    int last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd == INVALID_SOCKET) {
            last = WSAGetLastError();
            continue;
        }
        int ok = passive ? bind(fd, ai->ai_addr, (int)ai->ai_addrlen) == 0 &&
                               listen(fd, 1024) == 0 /* as posix.c */
                         : connect(fd, ai->ai_addr, (int)ai->ai_addrlen) == 0;
        if (ok)
            break;
        last = WSAGetLastError();
        closesocket(fd);
        fd = INVALID_SOCKET;
    }
    freeaddrinfo(res);
    if (fd == INVALID_SOCKET) {
        char why[256];
        SetLastError((DWORD)last);
        last_error_text(why, sizeof why);
        return loom_err_set(err, LOOM_ERR_IO, "%s %s:%d: %s",
                            passive ? "listen on" : "connect to", host, port,
                            why);
    }
    if (!passive) {
        /* requests are small writes waiting on answers, as on POSIX */
        BOOL one = TRUE;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, (const char *)&one,
                   sizeof one);
    }
    if (bound_port) {
        struct sockaddr_storage ss;
        int sl = sizeof ss;
        *bound_port = port;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET)
                *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            else if (ss.ss_family == AF_INET6)
                *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    *out = (loom_socket)fd;
    return LOOM_OK;
}

loom_status loom_tcp_connect(const char *host, int port, loom_socket *out,
                             loom_err *err)
{
    return tcp_open(host, port, 0, out, NULL, err);
}

loom_status loom_tcp_listen(const char *host, int port, loom_socket *out,
                            int *bound_port, loom_err *err)
{
    return tcp_open(host, port, 1, out, bound_port, err);
}

int loom_socket_send_all(loom_socket s, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        int chunk = n > 1u << 30 ? 1 << 30 : (int)n;
        int w = send((SOCKET)s, p, chunk, 0);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

long loom_socket_recv(loom_socket s, void *buf, size_t n, uint32_t timeout_ms)
{
    WSAPOLLFD pfd = {(SOCKET)s, POLLRDNORM, 0};
    int rc = WSAPoll(&pfd, 1, (INT)timeout_ms);
    if (rc == 0)
        return -2;
    if (rc < 0)
        return -1;
    int r = recv((SOCKET)s, buf, n > 1u << 30 ? 1 << 30 : (int)n, 0);
    return r < 0 ? -1 : (long)r;
}

void loom_socket_close(loom_socket s)
{
    closesocket((SOCKET)s);
}

void loom_socket_shutdown(loom_socket s)
{
    shutdown((SOCKET)s, SD_BOTH);
}

void loom_socket_shutdown_send(loom_socket s)
{
    shutdown((SOCKET)s, SD_SEND);
}

int loom_socket_accept(loom_socket listener, loom_socket *out, void *addr,
                       size_t *addr_len)
{
    int len = (int)*addr_len;
    SOCKET fd = accept((SOCKET)listener, (struct sockaddr *)addr, &len);
    if (fd == INVALID_SOCKET)
        return WSAGetLastError() == WSAEWOULDBLOCK ? 0 : -1;
    *out = (loom_socket)fd;
    *addr_len = (size_t)len;
    return 1;
}

int loom_socket_set_nonblocking(loom_socket s)
{
    u_long on = 1;
    return ioctlsocket((SOCKET)s, FIONBIO, &on) == 0 ? 0 : -1;
}

long loom_socket_peek(loom_socket s, void *buf, size_t n)
{
    WSAPOLLFD pfd = {(SOCKET)s, POLLRDNORM, 0};
    if (WSAPoll(&pfd, 1, 0) <= 0)
        return -2;
    int r = recv((SOCKET)s, buf, (int)n, MSG_PEEK);
    if (r < 0)
        return WSAGetLastError() == WSAEWOULDBLOCK ? -2 : -1;
    return (long)r;
}

void loom_socket_set_rcvlowat(loom_socket s, int n)
{
    (void)s; /* Winsock has no SO_RCVLOWAT: the gate backs off instead */
    (void)n;
}

long loom_socket_pending(loom_socket s)
{
    u_long n = 0;
    return ioctlsocket((SOCKET)s, FIONREAD, &n) == 0 ? (long)n : -1;
}

void loom_socket_set_rcvbuf(loom_socket s, int n)
{
    setsockopt((SOCKET)s, SOL_SOCKET, SO_RCVBUF, (const char *)&n, sizeof n);
}

int loom_socket_poll(const loom_socket *s, size_t n, unsigned char *ready,
                     uint32_t timeout_ms)
{
    WSAPOLLFD *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++) {
        p[i].fd = (SOCKET)s[i];
        p[i].events = POLLRDNORM;
        p[i].revents = 0;
    }
    int r = WSAPoll(p, (ULONG)n, (INT)timeout_ms);
    for (size_t i = 0; i < n; i++)
        ready[i] = r > 0 && p[i].revents != 0;
    free(p);
    return r;
}

void loom_socket_reset(loom_socket s)
{
    struct linger l = {1, 0};
    setsockopt((SOCKET)s, SOL_SOCKET, SO_LINGER, (const char *)&l, sizeof l);
    closesocket((SOCKET)s);
}

int loom_socket_peer_gone(loom_socket s)
{
    WSAPOLLFD pfd = {(SOCKET)s, POLLRDNORM, 0};
    if (WSAPoll(&pfd, 1, 0) <= 0)
        return 0;
    if (pfd.revents & (POLLERR | POLLNVAL))
        return 1;
    /* WSAPoll says POLLHUP on a FIN alone (poll(2) only once both halves
     * are shut), so a hang-up is looked at like data: 0 is a half-close, and
     * the peer still reads its answer */
    if (pfd.revents & (POLLRDNORM | POLLHUP)) {
        char c;
        int r = recv((SOCKET)s, &c, 1, MSG_PEEK);
        return r < 0 && WSAGetLastError() != WSAEWOULDBLOCK;
    }
    return 0;
}

/* ---------------------------------------------------------------- process */

uint64_t loom_rss_bytes(void)
{
    PROCESS_MEMORY_COUNTERS pmc;
    if (!GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc))
        return 0;
    return (uint64_t)pmc.WorkingSetSize;
}
