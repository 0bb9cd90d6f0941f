# vramtrace_add_memory_test: a ctest test that runs a program under `vramtrace run` and then
# checks its memory budgets with `vramtrace check` (docs/ci.md). Copy this file (and
# vramtrace_memory_test.cmake beside it) into a project, or include it from a vramtrace checkout.
#
#   include(VramtraceCheck)
#   vramtrace_add_memory_test(
#     NAME train_memory                       # the ctest name
#     COMMAND $<TARGET_FILE:train> --steps 20 # the program and its arguments
#     BUDGET ${CMAKE_CURRENT_SOURCE_DIR}/train.budget   # budget file (key = value lines), optional
#     CHECK_ARGS --no-leaks --max-ooms 0      # more `vramtrace check` options, optional
#     RUN_ARGS --conf expandable_segments:True  # more `vramtrace run` options, optional
#     VRAMTRACE /path/to/vramtrace            # default: the `vramtrace` target, else found on PATH
#     ENVIRONMENT VAR=value ...               # for the program, optional
#     WILL_FAIL                               # the test passes only if a budget is exceeded
#   )
#
# The test fails when the program fails, when no trace is written, or when `vramtrace check`
# exits non-zero (1: a budget exceeded, 2: unusable input). The trace and a JUnit report are left
# in the build tree as <NAME>.vramtrace.jsonl and <NAME>.junit.xml for CI to collect.
# Arguments must not contain the two-character sequence "@@" (used to pass lists to the runner).
set(_VRAMTRACE_CHECK_DIR ${CMAKE_CURRENT_LIST_DIR})

function(vramtrace_add_memory_test)
  cmake_parse_arguments(VT "WILL_FAIL" "NAME;BUDGET;VRAMTRACE;WORKING_DIRECTORY"
                        "COMMAND;CHECK_ARGS;RUN_ARGS;ENVIRONMENT;LABELS" ${ARGN})
  if(NOT VT_NAME OR NOT VT_COMMAND)
    message(FATAL_ERROR "vramtrace_add_memory_test: NAME and COMMAND are required")
  endif()
  if(NOT VT_BUDGET AND NOT VT_CHECK_ARGS)
    message(FATAL_ERROR "vramtrace_add_memory_test(${VT_NAME}): give a BUDGET file or CHECK_ARGS with a budget")
  endif()
  if(NOT VT_VRAMTRACE)
    if(TARGET vramtrace)
      set(VT_VRAMTRACE $<TARGET_FILE:vramtrace>)
    else()
      find_program(VT_VRAMTRACE vramtrace REQUIRED)
    endif()
  endif()
  if(NOT VT_WORKING_DIRECTORY)
    set(VT_WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  set(trace ${CMAKE_CURRENT_BINARY_DIR}/${VT_NAME}.vramtrace.jsonl)
  set(junit ${CMAKE_CURRENT_BINARY_DIR}/${VT_NAME}.junit.xml)
  string(REPLACE ";" "@@" cmd "${VT_COMMAND}")
  string(REPLACE ";" "@@" check_args "${VT_CHECK_ARGS}")
  string(REPLACE ";" "@@" run_args "${VT_RUN_ARGS}")
  add_test(NAME ${VT_NAME}
           COMMAND ${CMAKE_COMMAND}
                   "-DVT_VRAMTRACE=${VT_VRAMTRACE}" "-DVT_TRACE=${trace}" "-DVT_JUNIT=${junit}"
                   "-DVT_BUDGET=${VT_BUDGET}" "-DVT_COMMAND=${cmd}" "-DVT_CHECK_ARGS=${check_args}"
                   "-DVT_RUN_ARGS=${run_args}"
                   -P ${_VRAMTRACE_CHECK_DIR}/vramtrace_memory_test.cmake
           WORKING_DIRECTORY ${VT_WORKING_DIRECTORY})
  if(VT_ENVIRONMENT)
    set_tests_properties(${VT_NAME} PROPERTIES ENVIRONMENT "${VT_ENVIRONMENT}")
  endif()
  if(VT_LABELS)
    set_tests_properties(${VT_NAME} PROPERTIES LABELS "${VT_LABELS}")
  endif()
  if(VT_WILL_FAIL)
    # Fail the negative test for the right reason only: the runner prints this line when
    # `vramtrace check` exits 1 (a budget exceeded), not on a crash or unusable input.
    set_tests_properties(${VT_NAME} PROPERTIES PASS_REGULAR_EXPRESSION "vramtrace_add_memory_test: budget exceeded")
  endif()
endfunction()
