# The Windows build of the test suites (included from tests/CMakeLists.txt when
# WIN32): POSIX shims for the suites' own fixtures, and the CLI tests that run
# loom.exe directly instead of through a POSIX shell. docs/windows.md.
add_compile_options(-include ${CMAKE_CURRENT_LIST_DIR}/posix_compat.h)
