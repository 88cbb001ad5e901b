# loom_add_plugin(NAME SOURCES ...): a plugin as a MODULE library named
# loom-NAME, compiled against the SDK header only, placed where loom finds it.
function(loom_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  if(NOT P_SOURCES)
    message(WARNING "plugin ${name} has no sources; skipped")
    return()
  endif()
  add_library(loom-${name} MODULE ${P_SOURCES})
  target_link_libraries(loom-${name} PRIVATE loom::sdk ${P_LIBS})
  set_target_properties(loom-${name} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY "${LOOM_PLUGIN_OUTPUT_DIR}")
  # Relative, so `cmake --install --prefix P` puts it under P; loom searches
  # the configured prefix's copy of this directory (LOOM_INSTALL_PLUGIN_DIR).
  if(DEFINED LOOM_INSTALL_PLUGIN_DIR)
    install(TARGETS loom-${name} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/loom/plugins)
  endif()
endfunction()
