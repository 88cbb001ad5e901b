# Toolchain file: cross-compiles loom for 64-bit Windows with Debian's
# mingw-w64 (x86_64-w64-mingw32). Dependencies come from LOOM_WINDOWS_DEPS, a
# prefix made by tools/build-windows-deps.sh (docs/windows.md).
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(LOOM_MINGW_TRIPLE x86_64-w64-mingw32 CACHE STRING "mingw-w64 target triple")
set(CMAKE_C_COMPILER ${LOOM_MINGW_TRIPLE}-gcc)
set(CMAKE_RC_COMPILER ${LOOM_MINGW_TRIPLE}-windres)
set(CMAKE_AR ${LOOM_MINGW_TRIPLE}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB ${LOOM_MINGW_TRIPLE}-ranlib CACHE FILEPATH "")

# Libraries and headers from the target's sysroot and the dependency prefix
# only; programs (pkg-config, wine) from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/${LOOM_MINGW_TRIPLE} ${LOOM_WINDOWS_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the dependency prefix's .pc files, never the host's.
if(LOOM_WINDOWS_DEPS)
  set(ENV{PKG_CONFIG_LIBDIR} "${LOOM_WINDOWS_DEPS}/lib/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "")
endif()

# ctest runs the Windows programs through Wine when it is there.
find_program(LOOM_WINE NAMES wine64 wine PATHS /usr/lib/wine NO_CMAKE_FIND_ROOT_PATH)
if(LOOM_WINE)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LOOM_WINE})
endif()
