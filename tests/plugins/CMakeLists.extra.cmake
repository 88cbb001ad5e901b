# tp_missinglib links libtp_dep, which is built outside any loader path and
# without an rpath, so loading the plugin fails on the missing dependency.
add_library(tp_dep SHARED ${CMAKE_CURRENT_SOURCE_DIR}/dep/tp_dep.c)
# (a Windows DLL is a RUNTIME output; kept out of the exe's directory too)
set_target_properties(tp_dep PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-deps-hidden
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/test-deps-hidden)
target_link_libraries(tp_missinglib PRIVATE tp_dep)
set_target_properties(tp_missinglib PROPERTIES SKIP_BUILD_RPATH TRUE)
