# The `layers` check must catch a real upward include: copy the tree, plant
# one in a low-layer file, and expect the checker to fail naming it.
#
#   cmake -DCHECKER=<check_layers> -DSOURCE_DIR=<repo> -DTABLE=<layers.txt>
#         -DWORK_DIR=<scratch dir> -P planted.cmake
foreach(var CHECKER SOURCE_DIR TABLE WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "planted.cmake: ${var} is not set")
  endif()
endforeach()

# A fresh copy each run, so that an earlier plant is never counted.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
foreach(dir src include apps tools)
  if(EXISTS "${SOURCE_DIR}/${dir}")
    file(COPY "${SOURCE_DIR}/${dir}" DESTINATION "${WORK_DIR}")
  endif()
endforeach()
file(COPY "${TABLE}" DESTINATION "${WORK_DIR}")
get_filename_component(table_name "${TABLE}" NAME)

# The lowest-layer file there is: src/core/array.cpp, or the first .cpp of
# src/runtime if the sources have moved.
set(victim src/core/array.cpp)
if(NOT EXISTS "${WORK_DIR}/${victim}")
  file(GLOB_RECURSE runtime_sources RELATIVE "${WORK_DIR}" "${WORK_DIR}/src/runtime/*.cpp")
  list(SORT runtime_sources)
  list(LENGTH runtime_sources count)
  if(count EQUAL 0)
    message(FATAL_ERROR "planted.cmake: neither src/core/array.cpp nor a .cpp under src/runtime to plant in")
  endif()
  list(GET runtime_sources 0 victim)
endif()

# Planted as the file's new last line; a file without a final newline gets
# one first, so that the include is a line of its own.
file(READ "${WORK_DIR}/${victim}" text)
if(NOT text STREQUAL "" AND NOT text MATCHES "\n$")
  file(APPEND "${WORK_DIR}/${victim}" "\n")
  string(APPEND text "\n")
endif()
string(REGEX MATCHALL "\n" newlines "${text}")
list(LENGTH newlines line)
math(EXPR line "${line} + 1")
file(APPEND "${WORK_DIR}/${victim}" "#include \"transforms/trace.hpp\"\n")

execute_process(COMMAND "${CHECKER}" --root "${WORK_DIR}" --table "${WORK_DIR}/${table_name}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")

if(rc EQUAL 0)
  message(FATAL_ERROR "planted.cmake: the checker passed a tree with an upward include planted at ${victim}:${line}")
endif()
# The planted line's report: "<file>:<line>: ... includes transforms/trace.hpp of transforms ...".
string(FIND "${out}" "${victim}:${line}: " at)
if(at EQUAL -1)
  message(FATAL_ERROR "planted.cmake: the checker failed (${rc}) without naming ${victim}:${line}")
endif()
string(SUBSTRING "${out}" ${at} -1 report)
string(FIND "${report}" "\n" eol)
string(SUBSTRING "${report}" 0 ${eol} report)
if(NOT report MATCHES " includes " OR NOT report MATCHES "transforms")
  message(FATAL_ERROR "planted.cmake: the report of ${victim}:${line} does not say it includes transforms: ${report}")
endif()
message("planted.cmake: caught ${report}")
