// The shared kernel math (src/kernels/) on a GPU against the CPU: the sweep
// (sweep.hpp) run by the GPU kernel (sweep_device.cu) and by this file's host
// compiler, as the CPU library computes it.
//
//  - Elements that stay in the shared source (polynomials, IEEE arithmetic,
//    integers, conversions, threefry) must give the CPU's bits. NaNs count
//    as equal whatever their payload: the GPU's carry none.
//  - Elements the CPU computes with libm meet CUDA's libm on the GPU; they
//    are reported (count and largest distance in ulp) and must lie within
//    kLibmUlps: that is the gap left until the shared source has its own
//    versions of those functions.
//
// Without a GPU the test is skipped: it exits 77 (ctest's
// SKIP_RETURN_CODE) saying why, so a run without a GPU never counts as a
// pass.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "compare.hpp"
#include "sweep_device.hpp"

namespace sw = tessera::sweep;

namespace {
// CUDA documents at most 2 ulp for the single and double functions used here
// (4 for powf); glibc's are within 1.
constexpr sw::u64 kLibmUlps = 5;
}  // namespace

int main() {
  std::string why;
  const int gpus = sw::gpu_count(&why);
  if (gpus == 0) {
    std::printf("skipped: no CUDA GPU (%s)\n", why.c_str());
    return 77;
  }
  const std::vector<sw::Result> cpu = sw::run_all_on_host();
  int failures = 0;
  for (int d = 0; d < gpus; ++d) {
    std::vector<sw::Result> gpu;
    if (!sw::run_all_on_gpu(d, gpu, &why)) {
      std::printf("GPU %d: %s\n", d, why.c_str());
      ++failures;
      continue;
    }
    const auto diffs = sw::compare(cpu, gpu, /*any_nan=*/true);
    long exact_differ = 0, libm_differ = 0;
    sw::u64 worst = 0;
    for (const auto& p : diffs) {
      exact_differ += p.differ - p.libm_differ;
      libm_differ += p.libm_differ;
      worst = std::max(worst, p.max_ulps);
    }
    std::printf("GPU %d: %d probes x %lld inputs; %ld differ on shared-source paths (must be 0); %ld differ on libm "
                "paths, at most %llu ulp (allowed %llu)\n",
                d, sw::kProbes, static_cast<long long>(sw::kInputs), exact_differ, libm_differ,
                static_cast<unsigned long long>(worst), static_cast<unsigned long long>(kLibmUlps));
    std::printf("%s", sw::report(diffs).c_str());
    if (exact_differ != 0 || worst > kLibmUlps) ++failures;
  }
  std::printf(failures ? "FAILED\n" : "passed\n");
  return failures ? 1 : 0;
}
