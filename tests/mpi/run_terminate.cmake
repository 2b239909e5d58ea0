# Runs terminate.cpp's cases under mpirun -np 2 (two devices per process)
# and requires, for each: the launch ends within a bound (no hang), with a
# non-zero exit code (process 1 failed), and process 0 reports a
# CollectiveError naming process 1 and saying how it failed, caught well
# within the collective timeout ("process 0: OK").
#
#   cmake -DMPIRUN="mpirun|--oversubscribe|..." -DPROGRAM=path/to/terminate
#         [-DMPI_ENV="VAR=value|..."] [-DCASES="throw|exit|body"] -P run_terminate.cmake
include(${CMAKE_CURRENT_LIST_DIR}/launch_args.cmake)
mpi_launch_args(run_terminate.cmake PROGRAM)
if(NOT DEFINED CASES)
  set(CASES "throw|exit|body")
endif()
string(REPLACE "|" ";" cases "${CASES}")

# What process 0's CollectiveError must say, per case (regular expressions).
set(expect_throw "process 1 failed while this process \\(0\\) waited for it"
                 "terminated by an uncaught exception: deliberate failure on process 1 between collectives")
set(expect_exit "process 1 exited while this process \\(0\\) waited for it")
set(expect_body "\\(process 1\\) raised an error: deliberate failure in the body on axis index [23]")
# The collective timeout is 30 s; the notice must end the wait long before.
# A launch that hangs is stopped here, well before ctest's own timeout.
set(launch_timeout 60)

foreach(c IN LISTS cases)
  set(cmd ${env_prefix} ${mpirun} -np 2 -x TESSERA_NUM_CPU_DEVICES=2 ${PROGRAM} ${c})
  string(REPLACE ";" " " shown "${cmd}")
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT ${launch_timeout})
  string(TIMESTAMP t1 "%s")
  math(EXPR took "${t1} - ${t0}")
  set(all "--- stdout\n${out}\n--- stderr\n${err}")
  if(NOT rc MATCHES "^-?[0-9]+$")
    message(FATAL_ERROR "case ${c}: the launch did not end by itself (${rc}) after ${took} s:\n  ${shown}\n${all}")
  endif()
  if(rc EQUAL 0)
    message(FATAL_ERROR "case ${c}: the launch exited 0 although process 1 failed:\n  ${shown}\n${all}")
  endif()
  # mpirun gives the first non-zero exit code: process 1's own (process 0
  # exits 0 when its checks pass).
  if(c STREQUAL "exit" AND NOT rc EQUAL 3)
    message(FATAL_ERROR "case ${c}: the launch exited ${rc}, want process 1's exit code 3:\n  ${shown}\n${all}")
  endif()
  if(NOT out MATCHES "process 0 caught CollectiveError after [0-9.]+ s: ([^\n]*)")
    message(FATAL_ERROR "case ${c}: process 0 did not report a CollectiveError:\n  ${shown}\n${all}")
  endif()
  set(message_text "${CMAKE_MATCH_1}")
  foreach(re IN LISTS expect_${c})
    if(NOT message_text MATCHES "${re}")
      message(FATAL_ERROR "case ${c}: process 0's CollectiveError does not match '${re}':\n  ${message_text}\n${all}")
    endif()
  endforeach()
  if(NOT out MATCHES "process 0: OK")
    message(FATAL_ERROR "case ${c}: process 0's checks failed:\n  ${shown}\n${all}")
  endif()
  message(STATUS "case ${c}: exit code ${rc} after ${took} s; process 0 caught: ${message_text}")
endforeach()
