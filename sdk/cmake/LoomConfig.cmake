# find_package(Loom): the installed SDK (header, CPU helpers) and loom_add_plugin().
include(${CMAKE_CURRENT_LIST_DIR}/LoomTargets.cmake)
if(NOT TARGET loom::sdk AND TARGET loom::loom_sdk)
  add_library(loom::sdk ALIAS loom::loom_sdk)
endif()
set(LOOM_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
# nvcc compiles CUDA_SOURCES against the installed headers
get_target_property(LOOM_SDK_INCLUDE_DIR loom::loom_sdk_headers INTERFACE_INCLUDE_DIRECTORIES)
include(${CMAKE_CURRENT_LIST_DIR}/LoomPlugin.cmake)
