# find_package(Loom 2.0): the installed SDK (Loom::sdk: the ABI header and
# the CPU helpers) and loom_add_plugin(). The version is the plugin ABI's.
include(${CMAKE_CURRENT_LIST_DIR}/LoomTargets.cmake)
if(NOT DEFINED LOOM_PLUGIN_OUTPUT_DIR)
  set(LOOM_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR}/plugins)
endif()
# nvcc compiles CUDA_SOURCES against the installed headers
get_target_property(LOOM_SDK_INCLUDE_DIR Loom::sdk_headers INTERFACE_INCLUDE_DIRECTORIES)
include(${CMAKE_CURRENT_LIST_DIR}/LoomPlugin.cmake)
