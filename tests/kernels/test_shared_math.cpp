// The shared kernel math (src/kernels/) compiled two ways gives the same
// bits: by the host compiler, as the CPU library's kernels are, and by
// nvcc's host pass (the program shared_math_nvcc_dump, TESSERA_NVCC_DUMP),
// where kernels/portable.hpp takes its CUDA branch. Every probe of the sweep
// (sweep.hpp) must agree bit for bit, NaN payloads included: both run on
// this CPU with its libm, so any difference is the source's, not the
// hardware's. The same sweep runs on a GPU in test_shared_math_gpu.
//
// The sweep's probes are also checked against the library's own eager ops,
// so that they compute what the CPU backend computes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "compare.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace sw = tessera::sweep;

namespace {

const std::vector<sw::Result>& host_results() {
  static const std::vector<sw::Result> r = sw::run_all_on_host();
  return r;
}

}  // namespace

TEST(SharedMath, EveryProbeHasInputsAndNamesAreUnique) {
  ASSERT_GT(sw::kProbes, 80);
  for (int p = 0; p < sw::kProbes; ++p)
    for (int q = p + 1; q < sw::kProbes; ++q) EXPECT_STRNE(sw::kProbeInfo[p].name, sw::kProbeInfo[q].name);
  // The sweep reaches the libm paths and the polynomials' ranges alike.
  const auto& r = host_results();
  for (sw::Probe p : {sw::Probe::sin_f32, sw::Probe::exp_f32, sw::Probe::log_f32, sw::Probe::sin_f64}) {
    long libm = 0;
    for (sw::i64 i = 0; i < sw::kInputs; ++i) libm += r[static_cast<std::size_t>(static_cast<int>(p) * sw::kInputs + i)].libm;
    EXPECT_GT(libm, 100) << sw::kProbeInfo[static_cast<int>(p)].name;
    EXPECT_LT(libm, sw::kInputs - 1000) << sw::kProbeInfo[static_cast<int>(p)].name;
  }
}

#ifdef TESSERA_NVCC_DUMP
TEST(SharedMath, NvccHostPassGivesTheHostCompilersBits) {
  const std::string out = std::string(::testing::TempDir()) + "shared_math_nvcc.bin";
  const std::string cmd = std::string("'") + TESSERA_NVCC_DUMP + "' '" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<sw::Result> nvcc;
  ASSERT_TRUE(sw::load(out, nvcc)) << out;
  std::remove(out.c_str());
  const auto diffs = sw::compare(host_results(), nvcc, /*any_nan=*/false);
  const std::string text = sw::report(diffs);
  EXPECT_TRUE(text.empty()) << "the host compiler's and nvcc's builds of src/kernels differ:\n" << text;
}
#endif

// The probes compute what the library's eager kernels compute.
TEST(SharedMath, ProbesAreTheLibrarysEagerResults) {
  const auto& r = host_results();
  auto check_f32 = [&](sw::Probe p, ts::Array (*op)(const ts::Array&)) {
    std::vector<float> x(static_cast<std::size_t>(sw::kInputs));
    for (sw::i64 i = 0; i < sw::kInputs; ++i) x[static_cast<std::size_t>(i)] = sw::f32_at(i);
    const std::vector<float> y = op(ts::device_put(x, {sw::kInputs}, ts::NamedSharding(ts::make_mesh({8}, {"x"}), ts::P("x")))).to_vector<float>();
    long bad = 0;
    for (sw::i64 i = 0; i < sw::kInputs; ++i) {
      const sw::u64 want = r[static_cast<std::size_t>(static_cast<int>(p) * sw::kInputs + i)].bits;
      const sw::u64 got = __builtin_bit_cast(sw::u32, y[static_cast<std::size_t>(i)]);
      if (want != got && !(std::isnan(y[static_cast<std::size_t>(i)]) && sw::is_nan(sw::Kind::f32, want))) ++bad;
    }
    EXPECT_EQ(bad, 0) << sw::kProbeInfo[static_cast<int>(p)].name;
  };
  auto check_f64 = [&](sw::Probe p, ts::Array (*op)(const ts::Array&)) {
    std::vector<double> x(static_cast<std::size_t>(sw::kInputs));
    for (sw::i64 i = 0; i < sw::kInputs; ++i) x[static_cast<std::size_t>(i)] = sw::f64_at(i);
    const std::vector<double> y = op(ts::device_put(x, {sw::kInputs}, ts::NamedSharding(ts::make_mesh({8}, {"x"}), ts::P("x")))).to_vector<double>();
    long bad = 0;
    for (sw::i64 i = 0; i < sw::kInputs; ++i) {
      const sw::u64 want = r[static_cast<std::size_t>(static_cast<int>(p) * sw::kInputs + i)].bits;
      const sw::u64 got = __builtin_bit_cast(sw::u64, y[static_cast<std::size_t>(i)]);
      if (want != got && !(std::isnan(y[static_cast<std::size_t>(i)]) && sw::is_nan(sw::Kind::f64, want))) ++bad;
    }
    EXPECT_EQ(bad, 0) << sw::kProbeInfo[static_cast<int>(p)].name;
  };
  using F = ts::Array (*)(const ts::Array&);
  check_f32(sw::Probe::sin_f32, static_cast<F>([](const ts::Array& a) { return ts::sin(a); }));
  check_f32(sw::Probe::cos_f32, static_cast<F>([](const ts::Array& a) { return ts::cos(a); }));
  check_f32(sw::Probe::exp_f32, static_cast<F>([](const ts::Array& a) { return ts::exp(a); }));
  check_f32(sw::Probe::log_f32, static_cast<F>([](const ts::Array& a) { return ts::log(a); }));
  check_f32(sw::Probe::tanh_f32, static_cast<F>([](const ts::Array& a) { return ts::tanh(a); }));
  check_f32(sw::Probe::sigmoid_f32, static_cast<F>([](const ts::Array& a) { return ts::sigmoid(a); }));
  check_f32(sw::Probe::sqrt_f32, static_cast<F>([](const ts::Array& a) { return ts::sqrt(a); }));
  check_f64(sw::Probe::sin_f64, static_cast<F>([](const ts::Array& a) { return ts::sin(a); }));
  check_f64(sw::Probe::cos_f64, static_cast<F>([](const ts::Array& a) { return ts::cos(a); }));
  check_f64(sw::Probe::exp_f64, static_cast<F>([](const ts::Array& a) { return ts::exp(a); }));
}
