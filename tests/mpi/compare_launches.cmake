# Runs the digest program (digest.cpp) on four devices split over processes
# in every way -- no mpirun, and mpirun -np 1 x 4, -np 2 x 2, -np 4 x 1 --
# and requires each to succeed and every digest file to be byte for byte
# the same as the first one's.
#
#   cmake -DMPIRUN="mpirun|--oversubscribe|..." -DDIGEST=path/to/digest -DWORK_DIR=dir
#         [-DMPI_ENV="VAR=value|..."] [-DCUDA_EMULATED=ON] -P compare_launches.cmake
#
# With CUDA_EMULATED, the same splits run again on emulated GPUs (one per
# process, its devices on it), and must agree with each other the same way:
# a mesh of GPUs across processes moves and combines bits as one process's
# GPUs do. (They are compared with the first GPU launch, not the CPU's:
# GEMMs are only within rounding of the CPU's. The GPU suites compare
# every other op with the CPU bit for bit.)
#
# MPIRUN (and MPI_ENV) are lists joined by '|'. The environment mpirun
# needs (running as root, oversubscribing) comes from ctest's ENVIRONMENT
# property, which the launches inherit, or from MPI_ENV.
include(${CMAKE_CURRENT_LIST_DIR}/launch_args.cmake)
mpi_launch_args(compare_launches.cmake DIGEST WORK_DIR)
file(MAKE_DIRECTORY "${WORK_DIR}")

# name,processes (0: no mpirun),devices per process
set(launches "plain,0,4" "np1x4,1,4" "np2x2,2,2" "np4x1,4,1")
if(CUDA_EMULATED)
  list(APPEND launches "cuda-plain,0,4" "cuda-np2x2,2,2" "cuda-np4x1,4,1")
endif()
# A launch takes about a second, but on a small machine busy with other work
# the processes' waits for each other stretch it to tens of seconds; a hang
# is reported here, the four launches staying under ctest's timeout.
set(per_launch_timeout 120)

set(reference "")
foreach(launch IN LISTS launches)
  string(REPLACE "," ";" triple "${launch}")
  list(GET triple 0 name)
  list(GET triple 1 np)
  list(GET triple 2 ndev)
  set(out "${WORK_DIR}/${name}.txt")
  file(REMOVE "${out}")
  if(name MATCHES "^cuda-")
    set(devs TESSERA_PLATFORM=cuda TESSERA_CUDA_EMULATE=1 TESSERA_DEVICES_PER_GPU=${ndev})
  else()
    set(devs TESSERA_NUM_CPU_DEVICES=${ndev})
  endif()
  if(np EQUAL 0)
    set(cmd ${CMAKE_COMMAND} -E env ${devs} ${DIGEST} ${out})
  else()
    set(xs "")
    foreach(d IN LISTS devs)
      list(APPEND xs -x ${d})
    endforeach()
    set(cmd ${env_prefix} ${mpirun} -np ${np} ${xs} ${DIGEST} ${out})
  endif()
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr
                  TIMEOUT ${per_launch_timeout})
  string(TIMESTAMP t1 "%s")
  math(EXPR took "${t1} - ${t0}")
  if(NOT rc STREQUAL "0")
    string(REPLACE ";" " " shown "${cmd}")
    # The digest lines are long; their end (the summary) is what matters.
    string(LENGTH "${stdout}" len)
    if(len GREATER 2000)
      math(EXPR from "${len} - 2000")
      string(SUBSTRING "${stdout}" ${from} -1 stdout)
      set(stdout "...${stdout}")
    endif()
    message(FATAL_ERROR "launch ${name} failed (${rc}) after ${took} s:\n  ${shown}\n--- stdout\n${stdout}\n--- stderr\n${stderr}")
  endif()
  if(NOT EXISTS "${out}")
    message(FATAL_ERROR "launch ${name} exited 0 but wrote no digest file ${out}\n--- stdout\n${stdout}\n--- stderr\n${stderr}")
  endif()
  file(STRINGS "${out}" lines)
  list(LENGTH lines count)
  if(count LESS 100)
    message(FATAL_ERROR "launch ${name} wrote only ${count} digest lines to ${out}, expected hundreds")
  endif()
  message(STATUS "${name}: ${count} results in ${took} s")

  if(reference STREQUAL "" OR name STREQUAL "cuda-plain")
    set(reference "${name}")
    set(ref_file "${out}")
    set(ref_lines "${lines}")
    set(ref_count ${count})
    continue()
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${ref_file}" "${out}" RESULT_VARIABLE same)
  if(same EQUAL 0)
    continue()
  endif()
  # Name the first result that differs.
  set(detail "")
  math(EXPR last "${count} - 1")
  if(ref_count LESS count)
    math(EXPR last "${ref_count} - 1")
  endif()
  foreach(i RANGE ${last})
    list(GET ref_lines ${i} a)
    list(GET lines ${i} b)
    if(NOT a STREQUAL b)
      math(EXPR lineno "${i} + 1")
      set(detail "first difference at line ${lineno}:\n  ${reference}: ${a}\n  ${name}: ${b}")
      break()
    endif()
  endforeach()
  if(detail STREQUAL "")
    set(detail "${reference} has ${ref_count} lines, ${name} has ${count} (or the files differ in bytes outside the lines)")
  endif()
  message(FATAL_ERROR "results of launch ${name} differ from launch ${reference} (${out} vs ${ref_file}); ${detail}")
endforeach()
message(STATUS "all launches gave the same ${ref_count} digests")
