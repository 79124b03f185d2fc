# mt_add_library(name SOURCES ... DEPS ...): one static library per layer.
# A layer with no .cpp yet (headers only) becomes an INTERFACE library.
function(mt_add_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  if(A_SOURCES)
    add_library(${name} STATIC ${A_SOURCES})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} PUBLIC ${A_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} INTERFACE ${A_DEPS})
  endif()
endfunction()

# mt_add_test(name [SERIAL] SOURCES ... DEPS ... LABELS ...): a GoogleTest executable whose
# cases are registered one by one with CTest, each carrying LABELS (default: unit). SERIAL cases
# run with no other test beside them (RUN_SERIAL): those that compare the speeds of processes.
function(mt_add_test name)
  cmake_parse_arguments(A "SERIAL" "" "SOURCES;DEPS;LABELS" ${ARGN})
  set(serial FALSE)
  if(A_SERIAL)
    set(serial TRUE)
  endif()
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} mt_test_support GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    MT_SOURCE_DIR="${PROJECT_SOURCE_DIR}" MT_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} TEST_LIST ${name}_TESTS PROPERTIES RUN_SERIAL ${serial}
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR} DISCOVERY_TIMEOUT 60)
  # The labels are set by a file that CTest reads after the discovered cases' (which leave their
  # names in ${name}_TESTS): gtest_discover_tests' PROPERTIES would split a list of labels into
  # property names.
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(CONFIGURE OUTPUT ${labels_file} CONTENT
    "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${A_LABELS}\")\nendif()\n" @ONLY)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()

# mt_add_script_test(name LABELS ... COMMAND ...): a test driven by a script
# (node or numpy references), run from the build directory. It finds the binary in MT_BIN and
# ctest (for the checks of the test set itself) in MT_CTEST.
function(mt_add_script_test name)
  cmake_parse_arguments(A "" "" "LABELS;COMMAND" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${A_COMMAND} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}"
    ENVIRONMENT "MT_BIN=$<TARGET_FILE:megatron>;MT_CTEST=${CMAKE_CTEST_COMMAND};MT_SOURCE_DIR=${PROJECT_SOURCE_DIR};MT_DATA_DIR=${PROJECT_SOURCE_DIR}/data")
endfunction()
