# Shared by the scripts that launch test programs under mpirun: checks the
# required -D variables and splits MPIRUN (and MPI_ENV) into lists; they
# arrive joined by '|', since a ';' would split the argument on the way.
# Sets `mpirun` and `env_prefix` (a `cmake -E env ...` prefix, or empty).
macro(mpi_launch_args script)
  foreach(v MPIRUN ${ARGN})
    if(NOT DEFINED ${v})
      message(FATAL_ERROR "${script}: -D${v}=... is required")
    endif()
  endforeach()
  string(REPLACE "|" ";" mpirun "${MPIRUN}")
  set(env_prefix "")
  if(DEFINED MPI_ENV AND NOT MPI_ENV STREQUAL "")
    string(REPLACE "|" ";" mpi_env "${MPI_ENV}")
    set(env_prefix ${CMAKE_COMMAND} -E env ${mpi_env})
  endif()
endmacro()
