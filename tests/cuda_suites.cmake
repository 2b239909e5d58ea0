# The existing suites on the CUDA platform. Each suite runs twice more:
#   cuda-emulated.<suite>  on 8 devices of 2 emulated GPUs (TESSERA_CUDA_EMULATE:
#                          device memory in host memory, kernels as host loops,
#                          every other code path the GPU's), on every machine;
#   cuda.<suite>           on the real GPUs, 8 devices per GPU, skipped (not
#                          passed) where there is none.
# A suite lists the tests that do not run on GPUs, each with why (a test's
# own primitives without CUDA kernels). An op without a CUDA path would
# raise "[op] has no CUDA kernel yet" and fail its suite here.
if(NOT TESSERA_HAVE_CUDA)
  return()
endif()

set(TESSERA_CUDA_EMULATED_ENV
  "TESSERA_PLATFORM=cuda;TESSERA_CUDA_EMULATE=2;TESSERA_DEVICES_PER_GPU=4;TESSERA_KERNEL_CACHE=${CMAKE_BINARY_DIR}/kernel-cache")

# tessera_cuda_suite(<test executable> [gtest patterns not run on GPUs...])
function(tessera_cuda_suite name)
  set(filter "")
  if(ARGN)
    list(JOIN ARGN ":" excluded)
    set(filter "--gtest_filter=-${excluded}")
  endif()
  add_test(NAME cuda-emulated.${name} COMMAND ${name} ${filter})
  set_tests_properties(cuda-emulated.${name} PROPERTIES LABELS cuda-emulated TIMEOUT 900
    ENVIRONMENT "${TESSERA_CUDA_EMULATED_ENV}")
  add_test(NAME cuda.${name} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cuda/run_on_gpu.sh
    $<TARGET_FILE:tessera_gpu_info> $<TARGET_FILE:${name}> ${filter})
  set_tests_properties(cuda.${name} PROPERTIES LABELS cuda SKIP_RETURN_CODE 77 TIMEOUT 900
    ENVIRONMENT "TESSERA_DEVICES_PER_GPU=8;TESSERA_KERNEL_CACHE=${CMAKE_BINARY_DIR}/kernel-cache")
endfunction()

# The CUDA platform itself: devices, memory, transfers, refusals.
add_executable(test_cuda_platform runtime/test_cuda_platform.cpp)
target_link_libraries(test_cuda_platform PRIVATE tessera_internal GTest::gtest GTest::gtest_main)
target_include_directories(test_cuda_platform PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(test_cuda_platform PRIVATE -Wall -Wextra)
tessera_cuda_suite(test_cuda_platform)
add_test(NAME cuda-emulated.bad_setting COMMAND test_cuda_platform --gtest_filter=CudaPlatform.DevicesAreGpus)
set_tests_properties(cuda-emulated.bad_setting PROPERTIES LABELS cuda-emulated
  ENVIRONMENT "TESSERA_PLATFORM=cuda;TESSERA_CUDA_EMULATE=two"
  PASS_REGULAR_EXPRESSION "\\[devices\\] TESSERA_CUDA_EMULATE: expected a number of emulated GPUs \\(0 to 64\\), got 'two'")

tessera_cuda_suite(test_array)
tessera_cuda_suite(test_creation)
tessera_cuda_suite(test_elementwise)
tessera_cuda_suite(test_dtypes)
tessera_cuda_suite(test_bad_inputs)
tessera_cuda_suite(test_reshard)
tessera_cuda_suite(test_random)
tessera_cuda_suite(test_reduce)
tessera_cuda_suite(test_linalg)
tessera_cuda_suite(test_shape)
tessera_cuda_suite(test_stencil)
tessera_cuda_suite(test_indexing)
tessera_cuda_suite(test_zero_size)
tessera_cuda_suite(test_search)
tessera_cuda_suite(test_interp2d)
tessera_cuda_suite(test_spectra)
tessera_cuda_suite(test_shard_map)
tessera_cuda_suite(test_collectives)
# The test's own primitives (test_iota) have CPU kernels only.
tessera_cuda_suite(test_jit Jit.PrimitivesThatFixTheirLayoutOrLowerThemselves)
tessera_cuda_suite(test_jit_graphs)
tessera_cuda_suite(test_vmap)
tessera_cuda_suite(test_autodiff)
tessera_cuda_suite(test_contract)

# Direct groups (comm/direct.hpp): the collectives' suites again with their
# bytes through a transport, here the emulated one (TESSERA_GPU_COLLECTIVES=
# emulated); scripts/gpu-check.sh runs them over NCCL where the GPU machine's
# NCCL lets ranks share a GPU. Then the settings that cannot work.
add_executable(test_direct_groups comm/test_direct_groups.cpp)
target_link_libraries(test_direct_groups PRIVATE tessera_internal GTest::gtest GTest::gtest_main)
target_include_directories(test_direct_groups PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(test_direct_groups PRIVATE -Wall -Wextra)
foreach(_suite test_direct_groups test_collectives test_shard_map)
  add_test(NAME cuda-emulated.direct.${_suite} COMMAND ${_suite})
  set_tests_properties(cuda-emulated.direct.${_suite} PROPERTIES LABELS cuda-emulated TIMEOUT 900
    ENVIRONMENT "${TESSERA_CUDA_EMULATED_ENV};TESSERA_GPU_COLLECTIVES=emulated")
endforeach()
foreach(_setting bogus nccl)
  add_test(NAME cuda-emulated.direct.setting_${_setting} COMMAND test_direct_groups
    --gtest_filter=DirectGroups.SettingsThatCannotWorkRaise)
  set_tests_properties(cuda-emulated.direct.setting_${_setting} PROPERTIES LABELS cuda-emulated
    ENVIRONMENT "${TESSERA_CUDA_EMULATED_ENV};TESSERA_GPU_COLLECTIVES=${_setting}"
    FAIL_REGULAR_EXPRESSION "SKIPPED|FAILED")
endforeach()

# The IFU pipeline on CUDA devices: its suites, and `tessera ifu` writing
# the CPU's cube byte for byte.
# (Not under the sanitizers: the CPU runs of these suites are already
# their longest tests there.)
if(TARGET test_ifu_pipeline AND NOT CMAKE_CXX_FLAGS MATCHES "sanitize")
  tessera_cuda_suite(test_ifu_pipeline)
  # Without PLplot (TESSERA_IFU_PLOTS off, as on a GPU machine) `tessera
  # ifu-fit` draws none of the pictures this test looks for.
  if(TESSERA_IFU_PLOTS)
    tessera_cuda_suite(test_ifu_grad)
  else()
    tessera_cuda_suite(test_ifu_grad IfuFit.CommandLineGradientAndFit)
  endif()
endif()
if(TARGET tessera_cli AND TARGET test_ifu_pipeline)
  set(_ifu_cube sh ${CMAKE_CURRENT_SOURCE_DIR}/cuda/ifu_cube.sh $<TARGET_FILE:tessera_cli>
    ${CMAKE_CURRENT_SOURCE_DIR}/data/ifu)
  add_test(NAME cuda-emulated.ifu_cube COMMAND ${_ifu_cube} ${CMAKE_CURRENT_BINARY_DIR}/ifu-cube-emulated)
  set_tests_properties(cuda-emulated.ifu_cube PROPERTIES LABELS cuda-emulated TIMEOUT 600
    ENVIRONMENT "TESSERA_CUDA_EMULATE=2" PASS_REGULAR_EXPRESSION "the CUDA devices' cube is the CPU's, byte for byte")
  # Two processes' emulated GPUs (a mesh across processes) write it too.
  if(TESSERA_MPIRUN)
    add_test(NAME cuda-emulated.mpi.ifu_cube COMMAND ${_ifu_cube} ${CMAKE_CURRENT_BINARY_DIR}/ifu-cube-emulated-mpi
      ${TESSERA_MPIRUN} -np 2 -x TESSERA_CUDA_EMULATE=1)
    set_tests_properties(cuda-emulated.mpi.ifu_cube PROPERTIES LABELS cuda-emulated TIMEOUT 600 RUN_SERIAL ON
      ENVIRONMENT "${TESSERA_MPI_ENV};TESSERA_CUDA_EMULATE=1"
      PASS_REGULAR_EXPRESSION "the CUDA devices' cube .*is the CPU's, byte for byte")
    # The same with its reshards and reductions across processes through
    # direct groups (TESSERA_GPU_COLLECTIVES=emulated).
    add_test(NAME cuda-emulated.mpi.direct.ifu_cube COMMAND ${_ifu_cube}
      ${CMAKE_CURRENT_BINARY_DIR}/ifu-cube-emulated-mpi-direct
      ${TESSERA_MPIRUN} -np 2 -x TESSERA_CUDA_EMULATE=1 -x TESSERA_GPU_COLLECTIVES=emulated)
    set_tests_properties(cuda-emulated.mpi.direct.ifu_cube PROPERTIES LABELS cuda-emulated TIMEOUT 600 RUN_SERIAL ON
      ENVIRONMENT "${TESSERA_MPI_ENV};TESSERA_CUDA_EMULATE=1"
      PASS_REGULAR_EXPRESSION "the CUDA devices' cube .*is the CPU's, byte for byte")
  endif()
  add_test(NAME cuda.ifu_cube COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cuda/run_on_gpu.sh $<TARGET_FILE:tessera_gpu_info>
    ${_ifu_cube} ${CMAKE_CURRENT_BINARY_DIR}/ifu-cube-gpu)
  set_tests_properties(cuda.ifu_cube PROPERTIES LABELS cuda SKIP_RETURN_CODE 77 TIMEOUT 600)
endif()
