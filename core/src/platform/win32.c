/* The Windows half of the platform layer (mingw-w64 / MSVC): every OS call
 * the core makes, behind the same header as posix.c. */
#define WIN32_LEAN_AND_MEAN
#include <loom/platform.h>

#include <windows.h>

#include <direct.h>
#include <io.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

loom_status loom_dl_open(const char *path, loom_dl **out, loom_err *err)
{
    wchar_t *w = widen(path);
    if (!w)
        return loom_err_set(err, LOOM_ERR_INVALID, "%s: bad path", path);
    /* look for the plugin's own dependencies beside it */
    HMODULE h = LoadLibraryExW(w, NULL,
                               LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR |
                                   LOAD_LIBRARY_SEARCH_DEFAULT_DIRS);
    free(w);
    if (!h) {
        char why[512];
        last_error_text(why, sizeof why);
        return loom_err_set(err, LOOM_ERR_IO, "%s: %s", path, why);
    }
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
    if (f == INVALID_HANDLE_VALUE) {
        DWORD e = GetLastError();
        last_error_text(why, sizeof why);
        return loom_err_set(err,
                            e == ERROR_FILE_NOT_FOUND ||
                                    e == ERROR_PATH_NOT_FOUND
                                ? LOOM_ERR_NOT_FOUND
                                : LOOM_ERR_IO,
                            "%s: %s", path, why);
    }
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
    loom_map m;
    loom_status rc = loom_map_file(path, &m, err);
    if (rc != LOOM_OK)
        return rc;
    char *buf = malloc((size_t)m.size + 1);
    if (!buf) {
        loom_unmap(&m);
        return loom_err_set(err, LOOM_ERR_NOMEM, "%s: out of memory", path);
    }
    if (m.size)
        memcpy(buf, m.data, (size_t)m.size);
    buf[m.size] = '\0';
    if (size)
        *size = (size_t)m.size;
    *data = buf;
    loom_unmap(&m);
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
    /* Windows guards files with ACLs, not mode bits; a file in the user's
     * profile is private by default. */
    (void)path;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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
    char **names = NULL;
    size_t n = 0, cap = 0;
    loom_status rc = LOOM_OK;
    do {
        char name[1024];
        narrow(fd.cFileName, name, sizeof name);
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                rc = loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
                break;
            }
            names = nn;
            cap = nc;
        }
        names[n] = _strdup(name);
        if (!names[n]) {
            rc = loom_err_set(err, LOOM_ERR_NOMEM, "out of memory");
            break;
        }
        n++;
    } while (FindNextFileW(h, &fd));
    FindClose(h);
    if (rc == LOOM_OK) {
        if (n)
            qsort(names, n, sizeof *names, cmp_names);
        for (size_t i = 0; i < n; i++)
            fn(ctx, names[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
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
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (uint64_t)((double)c.QuadPart * 1e9 / (double)f.QuadPart);
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

int loom_cpu_count(void)
{
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwNumberOfProcessors > 0 ? (int)si.dwNumberOfProcessors : 1;
}
