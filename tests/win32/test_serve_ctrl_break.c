/* `loom serve` on Windows as a user runs it: it answers a completion on
 * 127.0.0.1, then stops cleanly, exit 0, on a console Ctrl-Break (the
 * Windows counterpart of SIGTERM), or with --ctrl-c on a console Ctrl-C
 * (SIGINT's), or with --no-break is terminated. Exit 0 pass, 1 fail, 77
 * skip: under Wine when it cannot deliver the event (no console; Wine 8's
 * wineserver delivers CTRL_C_EVENT only), never on Windows itself. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/platform.h>

/* Wine's version ("8.0"), or NULL on Windows itself */
static const char *wine_version(void)
{
    HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
    FARPROC f = ntdll ? GetProcAddress(ntdll, "wine_get_version") : NULL;
    if (!f)
        return NULL;
    const char *(*get)(void);
    memcpy(&get, &f, sizeof get);
    return get();
}

/* Ctrl-C reaches us too (loom serve shares our group): we keep running */
static BOOL WINAPI ignore_ctrl(DWORD type)
{
    return type == CTRL_C_EVENT;
}

/* --ctrl-c: runs this program again (--ctrl-c-group), where the test runs,
 * so that its Ctrl-C reaches that program and loom serve alone. Windows
 * delivers CTRL_C_EVENT only to group 0, every process on the console:
 * there the program gets a console of its own (no window). Wine delivers
 * it to a group too (and only with a terminal makes a console): there the
 * program leads a new group. */
static int run_as_group_leader(void)
{
    wchar_t self[MAX_PATH], cmd[MAX_PATH + 32];
    if (!GetModuleFileNameW(NULL, self, MAX_PATH))
        return 1;
    swprintf(cmd, MAX_PATH + 32, L"\"%ls\" --ctrl-c-group", self);
    STARTUPINFOW si;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = GetStdHandle(STD_OUTPUT_HANDLE);
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    DWORD flags = wine_version() ? CREATE_NEW_PROCESS_GROUP : CREATE_NO_WINDOW;
    PROCESS_INFORMATION pi;
    if (!CreateProcessW(NULL, cmd, NULL, NULL, TRUE, flags, NULL, NULL, &si,
                        &pi)) {
        fprintf(stderr, "FAIL: CreateProcess %ls\n", cmd);
        return 1;
    }
    DWORD code = 1;
    WaitForSingleObject(pi.hProcess, INFINITE);
    GetExitCodeProcess(pi.hProcess, &code);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    return (int)code;
}

/* The group the event goes to (run_as_group_leader says why). */
static DWORD ctrl_target(int ctrl_c, DWORD serve_pid)
{
    if (!ctrl_c)
        return serve_pid;
    return wine_version() ? GetCurrentProcessId() : 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "FAIL: %s\n", what);
    return 1;
}

/* Reads the child's stdout until the "listening on" line; its port or 0. */
static int read_port(HANDLE out, HANDLE proc)
{
    char buf[4096];
    size_t n = 0;
    uint64_t t0 = loom_now_ns();
    while (loom_now_ns() - t0 < 120ull * 1000000000ull) {
        DWORD avail = 0;
        if (!PeekNamedPipe(out, NULL, 0, NULL, &avail, NULL))
            return 0;
        if (avail == 0) {
            if (WaitForSingleObject(proc, 50) == WAIT_OBJECT_0)
                return 0;
            continue;
        }
        DWORD got = 0;
        DWORD want = (DWORD)(sizeof buf - 1 - n);
        if (want == 0 || !ReadFile(out, buf + n, want, &got, NULL))
            return 0;
        n += got;
        buf[n] = '\0';
        const char *at = strstr(buf, "listening on http://127.0.0.1:");
        if (at && strchr(at, '\n'))
            return atoi(at + strlen("listening on http://127.0.0.1:"));
    }
    return 0;
}

/* POSTs a greedy completion and returns the whole response (malloc'd). */
static char *complete(int port)
{
    loom_socket s;
    loom_err err;
    if (loom_tcp_connect("127.0.0.1", port, &s, &err) != LOOM_OK) {
        fprintf(stderr, "connect: %s\n", err.msg);
        return NULL;
    }
    const char *body = "{\"prompt\": \"In the beginning\", \"max_tokens\": 4, "
                       "\"temperature\": 0}";
    char req[1024];
    snprintf(req, sizeof req,
             "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             "Content-Type: application/json\r\nContent-Length: %u\r\n"
             "Connection: close\r\n\r\n%s",
             (unsigned)strlen(body), body);
    size_t cap = 1 << 16, n = 0;
    char *resp = calloc(1, cap);
    if (!resp || loom_socket_send_all(s, req, strlen(req)) != 0) {
        loom_socket_close(s);
        free(resp);
        return NULL;
    }
    long got;
    while (n + 1 < cap &&
           (got = loom_socket_recv(s, resp + n, cap - n - 1, 60000)) > 0)
        n += (size_t)got;
    resp[n] = '\0';
    loom_socket_close(s);
    return resp;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "--ctrl-c") == 0)
        return run_as_group_leader();
    int send_break = strcmp(mode, "--no-break") != 0;
    int ctrl_c = strcmp(mode, "--ctrl-c-group") == 0;
    if (ctrl_c) {
        /* a new group starts with Ctrl-C ignored, and loom serve would
         * inherit that: turn it back on, and ignore it here by a handler */
        SetConsoleCtrlHandler(NULL, FALSE);
        SetConsoleCtrlHandler(ignore_ctrl, TRUE);
    }
    /* the child must share a console with us to get our event */
    if (send_break && !GetConsoleWindow())
        AllocConsole();
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, TRUE};
    HANDLE rd, wr;
    if (!CreatePipe(&rd, &wr, &sa, 0))
        return fail("CreatePipe");
    SetHandleInformation(rd, HANDLE_FLAG_INHERIT, 0);

    char cmd8[2048];
    snprintf(cmd8, sizeof cmd8,
             "\"%s\" serve \"%s/models/qwen35-tiny\" --host 127.0.0.1 "
             "--port 0 --threads 1",
             LOOM_EXE, LOOM_FIXTURES);
    wchar_t cmd[2048];
    if (!MultiByteToWideChar(CP_UTF8, 0, cmd8, -1, cmd, 2048))
        return fail("command line");
    STARTUPINFOW si;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = GetStdHandle(STD_INPUT_HANDLE);
    si.hStdOutput = wr;
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    PROCESS_INFORMATION pi;
    /* Ctrl-Break: its own process group, so the event goes to it alone.
     * Ctrl-C: ours (see run_as_group_leader), where it is not ignored. */
    DWORD flags = ctrl_c ? 0 : CREATE_NEW_PROCESS_GROUP;
    if (!CreateProcessW(NULL, cmd, NULL, NULL, TRUE, flags, NULL, NULL, &si,
                        &pi))
        return fail("CreateProcess loom serve");
    DWORD event = ctrl_c ? CTRL_C_EVENT : CTRL_BREAK_EVENT;
    const char *event_name = ctrl_c ? "Ctrl-C" : "Ctrl-Break";
    CloseHandle(wr);

    int rc = 0;
    int port = read_port(rd, pi.hProcess);
    if (port <= 0) {
        rc = fail("loom serve did not report a port");
    } else {
        printf("ok: loom serve listening on 127.0.0.1:%d\n", port);
        char *resp = complete(port);
        if (!resp || strncmp(resp, "HTTP/1.1 200", 12) != 0 ||
            !strstr(resp, "\"choices\"") || !strstr(resp, "\"text\"")) {
            fprintf(stderr, "response: %s\n", resp ? resp : "(none)");
            rc = fail("a completion on 127.0.0.1 answered 200 with choices");
        } else {
            printf("ok: a completion on 127.0.0.1 answered 200 with choices\n");
        }
        free(resp);
    }
    if (!send_break) {
        TerminateProcess(pi.hProcess, 0);
        WaitForSingleObject(pi.hProcess, 30000);
    } else if (!GenerateConsoleCtrlEvent(event,
                                         ctrl_target(ctrl_c, pi.dwProcessId))) {
        DWORD e = GetLastError();
        const char *wine = wine_version();
        TerminateProcess(pi.hProcess, 3);
        WaitForSingleObject(pi.hProcess, 30000);
        if (rc == 0 && !wine) {
            fprintf(stderr, "GenerateConsoleCtrlEvent: Windows error %lu\n",
                    (unsigned long)e);
            rc = fail("the console event was sent");
        } else if (rc == 0 && !GetConsoleWindow()) {
            /* a limit of the runner, not of loom: without a terminal Wine
             * makes no console (AllocConsole fails with no display) */
            printf("skipped: Wine %s: no console to send %s through "
                   "(GenerateConsoleCtrlEvent: Windows error %lu); run under "
                   "a terminal\n",
                   wine, event_name, (unsigned long)e);
            rc = 77;
        } else if (rc == 0) {
            /* checked with WINEDEBUG=+server: the CTRL_EVENT ioctl answers
             * NOT_IMPLEMENTED, wineserver's propagate_console_signal maps
             * CTRL_C_EVENT alone (later Wine sends SIGQUIT for Break) */
            printf("skipped: Wine %s delivers no %s: its wineserver answers "
                   "the console's CTRL_EVENT ioctl with STATUS_NOT_IMPLEMENTED "
                   "for any event but CTRL_C_EVENT (GenerateConsoleCtrlEvent: "
                   "Windows error %lu)\n",
                   wine, event_name, (unsigned long)e);
            rc = 77;
        }
    } else if (WaitForSingleObject(pi.hProcess, 30000) != WAIT_OBJECT_0) {
        TerminateProcess(pi.hProcess, 3);
        rc = fail(ctrl_c ? "loom serve still running 30 s after Ctrl-C"
                         : "loom serve still running 30 s after Ctrl-Break");
    } else {
        DWORD code = 1;
        GetExitCodeProcess(pi.hProcess, &code);
        if (code != 0) {
            fprintf(stderr, "exit code %lu\n", (unsigned long)code);
            rc = fail("loom serve exits 0 on the console event");
        } else {
            printf("ok: loom serve stopped with exit code 0 on %s\n",
                   event_name);
        }
    }
    CloseHandle(rd);
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    return rc;
}
