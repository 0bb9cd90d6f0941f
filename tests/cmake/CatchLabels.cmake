# vramtrace_discover_tests(TARGET [TEST_PREFIX prefix] LABELS label... [PROPERTIES name value...])
#
# catch_discover_tests() with several ctest labels. Catch2's own PROPERTIES option passes its
# values through a `cmake -P` script that splits every list, so `PROPERTIES LABELS "cpu;allocator"`
# arrives as `LABELS cpu allocator`: one label "cpu" and a property named "allocator", and
# `ctest -L allocator` selects nothing. Here the discovered names go to a TEST_LIST variable and
# a second include file, run by ctest after Catch2's, sets the labels as a real list.
# PROPERTIES (single values only) are passed to catch_discover_tests unchanged.
function(vramtrace_discover_tests target)
  cmake_parse_arguments(V "" "TEST_PREFIX" "LABELS;PROPERTIES" ${ARGN})
  set(list_var vramtrace_tests_of_${target})
  set(props)
  if(V_PROPERTIES)
    set(props PROPERTIES ${V_PROPERTIES})
  endif()
  catch_discover_tests(${target} TEST_PREFIX "${V_TEST_PREFIX}" TEST_LIST ${list_var} ${props})
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
  file(WRITE ${labels_file}
       "# Written by vramtrace_discover_tests (tests/cmake/CatchLabels.cmake)\n"
       "if(${list_var})\n"
       "  set_tests_properties(\${${list_var}} PROPERTIES LABELS \"${V_LABELS}\")\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
