# tessera ifu-fit on four devices in one process and on two processes of two
# (mpirun): the fit's losses, step by step, must be the same (they follow
# from every gradient of the path, so the gradients must be too). The data
# are the golden IFU test's config, galaxy and cut templates; the observed
# cube is that galaxy's, and the fit starts from a generated one.
#
#   cmake -DMPIRUN="mpirun|..." -DTESSERA=path/to/tessera -DDATA=tests/data/ifu -DWORK_DIR=dir
#         [-DMPI_ENV="VAR=value|..."] -P ifu_fit_launches.cmake
include(${CMAKE_CURRENT_LIST_DIR}/launch_args.cmake)
mpi_launch_args(ifu_fit_launches.cmake TESSERA DATA WORK_DIR)
file(MAKE_DIRECTORY "${WORK_DIR}")
set(common --config ${DATA}/config.yml --ssp ${DATA}/ssp_bc03_cut.h5)

execute_process(COMMAND ${CMAKE_COMMAND} -E env TESSERA_NUM_CPU_DEVICES=2 ${TESSERA} ifu ${common}
                        --input ${DATA}/galaxy.h5 --output ${WORK_DIR}/observed.fits --no-plots --quiet
                RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ifu_fit_launches.cmake: tessera ifu failed (${rc}): ${err}")
endif()

execute_process(COMMAND ${TESSERA} ifu-generate --particles 500 --seed 3 --config ${DATA}/config.yml
                        --output ${WORK_DIR}/start.h5
                RESULT_VARIABLE rc ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ifu_fit_launches.cmake: tessera ifu-generate failed (${rc}): ${err}")
endif()

set(fit ifu-fit ${common} --input ${WORK_DIR}/start.h5 --observed ${WORK_DIR}/observed.fits --loss mse
        --params age,metallicity,mass_scale --steps 3 --no-plots --quiet)
set(reference "")
foreach(launch plain np2x2)
  set(json ${WORK_DIR}/${launch}.json)
  file(REMOVE ${json})
  if(launch STREQUAL "plain")
    set(cmd ${CMAKE_COMMAND} -E env TESSERA_NUM_CPU_DEVICES=4 ${TESSERA} ${fit})
  else()
    set(cmd ${env_prefix} ${mpirun} -np 2 -x TESSERA_NUM_CPU_DEVICES=2 ${TESSERA} ${fit})
  endif()
  execute_process(COMMAND ${cmd} --output ${WORK_DIR}/${launch}.h5 --json ${json} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ifu_fit_launches.cmake: ${launch} failed (${rc}):\n${out}\n${err}")
  endif()
  file(READ ${json} text)
  string(REGEX MATCH "\"losses\": \\[[^]]*\\]" losses "${text}")
  if(losses STREQUAL "")
    message(FATAL_ERROR "ifu_fit_launches.cmake: ${launch}: no losses in ${json}: ${text}")
  endif()
  message(STATUS "${launch}: ${losses}")
  if(reference STREQUAL "")
    set(reference "${losses}")
  elseif(NOT losses STREQUAL reference)
    message(FATAL_ERROR "ifu_fit_launches.cmake: the fit on two processes took another path:\n  one process: "
                        "${reference}\n  two processes: ${losses}")
  endif()
endforeach()
