/* The few POSIX calls the Check suites make for their own fixtures (setenv,
 * unsetenv, mkdir with a mode), spelled with the Windows CRT; force-included
 * into the test programs of the Windows build only (tests/win32/windows.cmake).
 */
#ifndef LOOM_TEST_POSIX_COMPAT_H
#define LOOM_TEST_POSIX_COMPAT_H

#include <direct.h>
#include <io.h>
#include <stdlib.h>
#include <sys/stat.h>

/* The CRT cannot hold an empty variable: setting "" removes it, which is
 * what the suites mean by an empty value (it counts as unset). */
static inline int setenv(const char *name, const char *value, int overwrite)
{
    if (!overwrite && getenv(name))
        return 0;
    return _putenv_s(name, value) == 0 ? 0 : -1;
}

static inline int unsetenv(const char *name)
{
    return _putenv_s(name, "") == 0 ? 0 : -1;
}

/* NTFS has no mode bits; the mode is dropped. */
#define mkdir(path, mode) ((void)(mode), _mkdir(path))

#endif
