# Windows-only build settings (included from the top-level CMakeLists.txt when
# WIN32): static dependencies, static runtime, Winsock. docs/windows.md.

# The dependencies are static libraries (tools/build-windows-deps.sh); their
# headers must not declare dllimport, and their .pc files omit the system
# libraries they need.
set_property(TARGET PkgConfig::PCRE2 APPEND PROPERTY
  INTERFACE_COMPILE_DEFINITIONS PCRE2_STATIC)
set_property(TARGET PkgConfig::UTF8PROC APPEND PROPERTY
  INTERFACE_COMPILE_DEFINITIONS UTF8PROC_STATIC)
set_property(TARGET PkgConfig::MHD APPEND PROPERTY
  INTERFACE_LINK_LIBRARIES ws2_32)

# libgcc and winpthread linked in, so loom.exe, the plugin DLLs and the test
# programs run with nothing beside them but Windows' own DLLs.
if(MINGW)
  add_link_options(-static -static-libgcc)
endif()

# mingw's own C99 printf family (%zu, %lld), not msvcrt's. GCC checks the
# project's format(printf) attributes against msvcrt's dialect, which lacks
# %zu, so format checking stays with the Linux build, which checks them all.
if(MINGW)
  add_compile_definitions(__USE_MINGW_ANSI_STDIO=1)
  add_compile_options(-Wno-format)
endif()

# Every program carries cmake/loom.manifest: UTF-8 as the process code page,
# so argv, getenv and the CRT's file names are UTF-8 like the rest of loom.
find_program(LOOM_WINDRES NAMES ${CMAKE_RC_COMPILER} ${LOOM_MINGW_TRIPLE}-windres windres)
if(LOOM_WINDRES)
  set(manifest ${CMAKE_CURRENT_LIST_DIR}/loom.manifest)
  set(res ${CMAKE_BINARY_DIR}/loom-manifest.res.o)
  file(WRITE ${CMAKE_BINARY_DIR}/loom-manifest.rc "1 24 \"${manifest}\"\n")
  execute_process(COMMAND ${LOOM_WINDRES} -O coff -i ${CMAKE_BINARY_DIR}/loom-manifest.rc
    -o ${res} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "windres could not compile ${manifest}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${manifest})
  add_link_options($<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:${res}>)
endif()

# What core/src/platform/win32.c calls beyond kernel32.
set(LOOM_WIN32_LIBS ws2_32 psapi)
