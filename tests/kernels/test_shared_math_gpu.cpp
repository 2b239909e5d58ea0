// The shared kernel math (src/kernels/) on a GPU against the CPU: the sweep
// (sweep.hpp) run by the GPU kernel (sweep_device.cu) and by this file's host
// compiler, as the CPU library computes it.
//
//  - Every element must give the CPU's bits: the shared source calls no
//    libm function but the exact ones (kernels/portable.hpp); pow and sin
//    and cos of huge arguments included (kernels/libm.hpp's). NaNs count as
//    equal whatever their payload: the GPU's carry none. The elements the
//    CPU computes by a polynomial's slow path are counted apart in the
//    report.
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
    long differ = 0, slow_differ = 0;
    sw::u64 worst = 0;
    for (const auto& p : diffs) {
      differ += p.differ;
      slow_differ += p.slow_differ;
      worst = std::max(worst, p.max_ulps);
    }
    std::printf("GPU %d: %d probes x %lld inputs; %ld differ (must be 0), %ld of them on slow paths, at most %llu ulp\n", d,
                sw::kProbes, static_cast<long long>(sw::kInputs), differ, slow_differ, static_cast<unsigned long long>(worst));
    std::printf("%s", sw::report(diffs).c_str());
    if (differ != 0) ++failures;
  }
  std::printf(failures ? "FAILED\n" : "passed\n");
  return failures ? 1 : 0;
}
