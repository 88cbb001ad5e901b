# The Windows build of the test suites (included from tests/CMakeLists.txt when
# WIN32): POSIX shims for the suites' own fixtures, and the CLI tests that run
# loom.exe directly instead of through a POSIX shell. docs/windows.md.
add_compile_options(-include ${CMAKE_CURRENT_LIST_DIR}/posix_compat.h)

set(LOOM_WIN_FIXTURES ${CMAKE_CURRENT_SOURCE_DIR}/fixtures)

# `loom serve` answering on 127.0.0.1 and stopping on Ctrl-Break.
add_executable(test_serve_ctrl_break ${CMAKE_CURRENT_LIST_DIR}/test_serve_ctrl_break.c)
target_link_libraries(test_serve_ctrl_break PRIVATE loomcore)
target_compile_definitions(test_serve_ctrl_break PRIVATE
  LOOM_FIXTURES="${LOOM_WIN_FIXTURES}" LOOM_EXE="$<TARGET_FILE:loom>")
add_test(NAME win_serve_completion COMMAND test_serve_ctrl_break --no-break)
# Under Wine the console events need a console, which Wine makes when a
# terminal is on stdin (script(1) gives one; with-console.sh).
find_program(LOOM_SCRIPT script)
if(CMAKE_CROSSCOMPILING_EMULATOR AND LOOM_SCRIPT)
  set(with_console ${CMAKE_CURRENT_LIST_DIR}/with-console.sh
    ${CMAKE_CROSSCOMPILING_EMULATOR} $<TARGET_FILE:test_serve_ctrl_break>)
  add_test(NAME win_serve_ctrl_break COMMAND ${with_console})
  add_test(NAME win_serve_ctrl_c COMMAND ${with_console} --ctrl-c)
else()
  add_test(NAME win_serve_ctrl_break COMMAND test_serve_ctrl_break)
  add_test(NAME win_serve_ctrl_c COMMAND test_serve_ctrl_break --ctrl-c)
endif()
set_tests_properties(win_serve_completion win_serve_ctrl_break win_serve_ctrl_c
  PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# CLI tests: loom.exe run directly (through Wine when cross-built), its exit
# status and output checked by tests/win32/expect.cmake (no shell).
# loom_cli_test(NAME RC REGEX ARGS...): RC 0, N or nonzero.
function(loom_cli_test name rc regex)
  string(REPLACE ";" "@@" args "${ARGN}")
  set(run $<TARGET_FILE:loom>)
  if(CMAKE_CROSSCOMPILING_EMULATOR)
    set(run "${CMAKE_CROSSCOMPILING_EMULATOR}@@${run}")
  endif()
  add_test(NAME wcli_${name} COMMAND ${CMAKE_COMMAND} "-DCMD=${run}@@${args}"
    -DRC=${rc} "-DREGEX=${regex}" -P ${CMAKE_CURRENT_LIST_DIR}/expect.cmake)
  set_tests_properties(wcli_${name} PROPERTIES TIMEOUT 300)
endfunction()
set(tp ${CMAKE_BINARY_DIR}/test-plugins)
set(fx ${LOOM_WIN_FIXTURES})
set(qwen3 ${fx}/tokenizers/qwen3)
loom_cli_test(plugins_json 0 "\"name\": \"qwen35\"" plugins --json)
loom_cli_test(plugins_drafter 0 "\"name\": \"dflash\",[^}]*drafter" plugins --json)
loom_cli_test(plugins_nemotron 0 "\"name\": \"nemotron\"" plugins --json)
loom_cli_test(plugins_good 0 "\ntp-good " plugins --plugin-path ${tp})
loom_cli_test(refusal_noentry 0 "libtp_noentry.dll: no entry symbol 'loom_plugin_entry'"
  plugins --plugin-path ${tp})
# tp_badabi declares the next major ABI than the SDK's (as test_registry)
file(STRINGS ${PROJECT_SOURCE_DIR}/sdk/include/loom/plugin.h abi_line
  REGEX "^#define LOOM_ABI_MAJOR [0-9]+")
string(REGEX REPLACE "[^0-9]*([0-9]+)$" "\\1" abi_major "${abi_line}")
math(EXPR abi_next "${abi_major} + 1")
loom_cli_test(refusal_badabi 0 "libtp_badabi.dll: incompatible ABI ${abi_next}.0"
  plugins --plugin-path ${tp})
loom_cli_test(refusal_smallstruct 0 "libtp_smallstruct.dll: tp-small: descriptor struct_size 16"
  plugins --plugin-path ${tp})
loom_cli_test(refusal_missinglib 0 "libtp_missinglib.dll: it needs libtp_dep.dll"
  plugins --plugin-path ${tp})
loom_cli_test(inspect_qwen35 0 "plugin +qwen35" inspect ${fx}/models/qwen35-tiny)
loom_cli_test(inspect_nemotron 0 "\"plugin\": \"nemotron\""
  inspect --json ${fx}/models/nemotron-h-tiny)
loom_cli_test(inspect_drafter 0 "block_size +4" inspect ${fx}/drafters/dflash-tiny)
loom_cli_test(inspect_missing nonzero "no-such-model" inspect ${fx}/no-such-model)
loom_cli_test(family_unknown nonzero "nosuch"
  inspect ${fx}/models/qwen35-tiny --family nosuch)
loom_cli_test(unknown_command 2 "" nosuchcommand)
loom_cli_test(plugins_help 0 "usage: loom plugins" plugins --help)
loom_cli_test(tokenize 0 "^\\[9707, 11, 1879, 0\\]" tokenize ${qwen3} "Hello, world!")
loom_cli_test(tokenize_special 0 "^\\[151645\\]" tokenize ${qwen3} "<|im_end|>")
loom_cli_test(detokenize 0 "^Hello, world!<\\|im_end\\|>"
  detokenize ${qwen3} 9707,11,1879,0,151645)
loom_cli_test(detokenize_skip_special 0 "^Hello\n" detokenize ${qwen3} 9707,151645 --skip-special)
loom_cli_test(detokenize_bad_ids nonzero "" detokenize ${qwen3} 1,x)
loom_cli_test(tokenize_bad_model nonzero "" tokenize ${fx}/none hi)

# A model under a non-ASCII directory name: UTF-8 from the command line
# (the manifest's code page) through the wide-character file API.
set(utf8_dir "${CMAKE_BINARY_DIR}/test-tmp/utf8-modèle-模型")
file(COPY ${fx}/models/qwen35-tiny DESTINATION "${utf8_dir}")
loom_cli_test(inspect_utf8_path 0 "plugin +qwen35" inspect "${utf8_dir}/qwen35-tiny")
loom_cli_test(tokenize_utf8_path 0 "^\\[" tokenize "${utf8_dir}/qwen35-tiny" "In the beginning")
