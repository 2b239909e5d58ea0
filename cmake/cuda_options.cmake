# tessera_cuda_options(target): how every CUDA source of the project is
# compiled. The GPU must give the CPU's bits for the shared kernel math
# (src/kernels/), so nothing may contract a multiply and an add into a fused
# multiply-add behind the source's back (--fmad=false; the math writes each
# fma it wants), denormals stay (no flush to zero) and division and square
# root round correctly. The host half of a .cu file goes to the host compiler
# with the same rule the library's kernels have (-ffp-contract=off).
function(tessera_cuda_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false --ftz=false --prec-div=true --prec-sqrt=true
      -Xcompiler=-Wall,-Wextra,-ffp-contract=off>)
  # The runtime's static library: no libcudart.so to find at run time, and
  # libcuda (the driver) is opened only when a GPU is first asked for.
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Static)
endfunction()
