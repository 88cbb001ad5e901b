# Runs one command and checks its exit status and output, with no shell:
#   cmake -DCMD="prog@@arg@@arg" -DRC=0|nonzero|N [-DREGEX=re] -P expect.cmake
# ("@@" separates the arguments; REGEX must match stdout+stderr.)
string(REPLACE "@@" ";" cmd "${CMD}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
set(all "${out}${err}")
if(RC STREQUAL "nonzero")
  if(rc EQUAL 0)
    message(FATAL_ERROR "exit 0, wanted non-zero; output:\n${all}")
  endif()
elseif(NOT rc EQUAL RC)
  message(FATAL_ERROR "exit ${rc}, wanted ${RC}; output:\n${all}")
endif()
if(DEFINED REGEX AND NOT all MATCHES "${REGEX}")
  message(FATAL_ERROR "output lacks /${REGEX}/:\n${all}")
endif()
message(STATUS "ok: exit ${rc}, output matches /${REGEX}/")
