# Runner of vramtrace_add_memory_test (VramtraceCheck.cmake), as `cmake -P`: vramtrace run, then
# vramtrace check. Lists arrive joined with "@@".
foreach(v VT_COMMAND VT_CHECK_ARGS VT_RUN_ARGS)
  string(REPLACE "@@" ";" ${v} "${${v}}")
endforeach()

file(REMOVE ${VT_TRACE})
execute_process(COMMAND ${VT_VRAMTRACE} run -o ${VT_TRACE} ${VT_RUN_ARGS} -- ${VT_COMMAND} RESULT_VARIABLE run_rc)
if(NOT run_rc EQUAL 0)
  message(FATAL_ERROR "vramtrace_add_memory_test: the program under `vramtrace run` failed (exit ${run_rc})")
endif()
if(NOT EXISTS ${VT_TRACE})
  message(FATAL_ERROR "vramtrace_add_memory_test: no trace at ${VT_TRACE}: the program made no GPU allocation "
                      "through libvramtrace.so")
endif()

# The report of the previous run of this test: check keeps an existing -o file.
file(REMOVE ${VT_JUNIT})
set(budget_args)
if(VT_BUDGET)
  set(budget_args --budget ${VT_BUDGET})
endif()
execute_process(COMMAND ${VT_VRAMTRACE} check ${VT_TRACE} ${budget_args} ${VT_CHECK_ARGS} --format junit -o ${VT_JUNIT}
                RESULT_VARIABLE check_rc)
if(check_rc EQUAL 1)
  message(FATAL_ERROR "vramtrace_add_memory_test: budget exceeded (report: ${VT_JUNIT})")
elseif(NOT check_rc EQUAL 0)
  message(FATAL_ERROR "vramtrace_add_memory_test: vramtrace check could not judge the run (exit ${check_rc})")
endif()
