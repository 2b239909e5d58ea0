// The shared-math sweep with its host code compiled by nvcc: nvcc's host
// pass sees __CUDACC__, so kernels/portable.hpp takes its CUDA branch
// (libcu++, the CUDA spelling of the libm calls). test_shared_math runs this
// program and requires the same bits as the host compiler's build of the
// same source. A program of its own, so that no copy of the math compiled by
// the host compiler can stand in for nvcc's at link time.
#include <cstdio>

#include "compare.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  if (!tessera::sweep::save(argv[1], tessera::sweep::run_all_on_host())) {
    std::fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
