// The shared kernel math (src/kernels/) compiled two ways gives the same
// bits: by the host compiler, as the CPU library's kernels are, and by
// nvcc's host pass (the program shared_math_nvcc_dump, TESSERA_NVCC_DUMP),
// where kernels/portable.hpp takes its CUDA branch. Every probe of the sweep
// (sweep.hpp) must agree bit for bit, NaN payloads included: both run on
// this CPU with its libm, so any difference is the source's, not the
// hardware's. The same sweep runs on a GPU in test_shared_math_gpu.
//
// The sweep's probes are also checked against the library's own eager ops,
// so that they compute what the CPU backend computes; and the functions of
// kernels/libm.hpp are measured against long double (x87's 64-bit
// significand: its libm's error is near 2^-11 of an f64 ulp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
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
  // The sweep reaches the polynomials' slow paths and their ranges alike:
  // sin/cos of huge arguments (f64 ones far beyond 2^64 too, where the
  // reduction takes the later words of 2/pi), and f32 exp and log.
  const auto& r = host_results();
  for (sw::Probe p : {sw::Probe::sin_f32, sw::Probe::cos_f32, sw::Probe::sin_f64, sw::Probe::cos_f64, sw::Probe::exp_f32,
                      sw::Probe::log_f32}) {
    long slow = 0;
    for (sw::i64 i = 0; i < sw::kInputs; ++i) slow += r[static_cast<std::size_t>(static_cast<int>(p) * sw::kInputs + i)].slow;
    EXPECT_GT(slow, 1000) << sw::kProbeInfo[static_cast<int>(p)].name;
    EXPECT_LT(slow, sw::kInputs - 1000) << sw::kProbeInfo[static_cast<int>(p)].name;
  }
  long beyond_2_64 = 0;
  for (sw::i64 i = 0; i < sw::kInputs; ++i) beyond_2_64 += std::isfinite(sw::f64_at(i)) && std::fabs(sw::f64_at(i)) > 0x1p64;
  EXPECT_GT(beyond_2_64, 1000);
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
  check_f32(sw::Probe::log1p_f32, static_cast<F>([](const ts::Array& a) { return ts::log1p(a); }));
  check_f32(sw::Probe::expm1_f32, static_cast<F>([](const ts::Array& a) { return ts::expm1(a); }));
  check_f64(sw::Probe::log_f64, static_cast<F>([](const ts::Array& a) { return ts::log(a); }));
  check_f64(sw::Probe::log1p_f64, static_cast<F>([](const ts::Array& a) { return ts::log1p(a); }));
  check_f64(sw::Probe::expm1_f64, static_cast<F>([](const ts::Array& a) { return ts::expm1(a); }));
  check_f64(sw::Probe::tanh_f64, static_cast<F>([](const ts::Array& a) { return ts::tanh(a); }));
  check_f64(sw::Probe::sigmoid_f64, static_cast<F>([](const ts::Array& a) { return ts::sigmoid(a); }));
  // pow: the eager binary loops (the math clones) give the probe's bits.
  const ts::NamedSharding sharded(ts::make_mesh({8}, {"x"}), ts::P("x"));
  auto check_pow = [&](sw::Probe p, auto zero) {
    using T = decltype(zero);
    constexpr sw::Kind kind = std::is_same_v<T, float> ? sw::Kind::f32 : sw::Kind::f64;
    std::vector<T> x(static_cast<std::size_t>(sw::kInputs)), y(x.size());
    for (sw::i64 i = 0; i < sw::kInputs; ++i) {
      if constexpr (std::is_same_v<T, float>) x[static_cast<std::size_t>(i)] = sw::f32_at(i), y[static_cast<std::size_t>(i)] = sw::f32_at(i, 1);
      else x[static_cast<std::size_t>(i)] = sw::f64_at(i), y[static_cast<std::size_t>(i)] = sw::f64_at(i, 1);
    }
    const std::vector<T> z = ts::pow(ts::device_put(x, {sw::kInputs}, sharded), ts::device_put(y, {sw::kInputs}, sharded)).template to_vector<T>();
    long bad = 0;
    for (sw::i64 i = 0; i < sw::kInputs; ++i) {
      const sw::u64 want = r[static_cast<std::size_t>(static_cast<int>(p) * sw::kInputs + i)].bits;
      const sw::u64 got = sw::bits_of(z[static_cast<std::size_t>(i)]);
      if (want != got && !(std::isnan(z[static_cast<std::size_t>(i)]) && sw::is_nan(kind, want))) ++bad;
    }
    EXPECT_EQ(bad, 0) << sw::kProbeInfo[static_cast<int>(p)].name;
  };
  check_pow(sw::Probe::pow_f32, 0.0f);
  check_pow(sw::Probe::pow_f64, 0.0);
}

// ------------------------------------------------------------ accuracy
//
// kernels/libm.hpp against long double: the error of each result in ulp of
// the exact value's format (the spacing of doubles or floats at the exact
// value, subnormal spacing below the normal range), over edges and many
// random inputs per range (uniform, and log-uniform in magnitude so that
// tiny and huge arguments are reached).

namespace {

namespace m = tessera::detail::math;

template <class T>
double ulp_error(T y, long double exact) {
  constexpr int kDigits = std::numeric_limits<T>::digits;
  constexpr int kMinExp = std::numeric_limits<T>::min_exponent - kDigits;  // of the smallest subnormal
  if (std::isnan(exact)) return std::isnan(y) ? 0.0 : 1e9;
  const long double max = static_cast<long double>(std::numeric_limits<T>::max());
  // Beyond max + half an ulp the value rounds to inf.
  if (std::fabs(exact) >= max + std::ldexp(1.0L, std::numeric_limits<T>::max_exponent - kDigits - 1))
    return std::isinf(y) && (y > 0) == (exact > 0) ? 0.0 : 1e9;
  if (!std::isfinite(y)) return 1e9;
  int e = 0;
  std::frexp(exact, &e);
  const long double ulp = std::ldexp(1.0L, std::max(e - kDigits, kMinExp));
  return static_cast<double>(std::fabs(static_cast<long double>(y) - exact) / ulp);
}

struct Sweep {
  double max_ulp = 0;
  double at = 0;
  long n = 0;
  template <class T>
  void add(T x, T y, long double exact) {
    const double e = ulp_error(y, exact);
    ++n;
    if (e > max_ulp) max_ulp = e, at = static_cast<double>(x);
  }
};

// f over the inputs: the edges, then `count` uniform inputs in each of
// `ranges` and as many log-uniform in |x| over [tiny, huge] of both signs
// (those outside [lo, hi] of the function's domain are skipped).
template <class T, class F, class R>
Sweep sweep(F f, R exact, std::initializer_list<std::pair<double, double>> ranges, double lo, double hi, std::initializer_list<double> edges,
            long count = 200000) {
  Sweep s;
  std::mt19937_64 g(7);
  auto one = [&](T x) {
    if (!(x >= lo && x <= hi)) return;
    s.add(x, f(x), exact(static_cast<long double>(x)));
  };
  for (double x : edges) one(static_cast<T>(x));
  for (auto [a, b] : ranges) {
    std::uniform_real_distribution<double> u(a, b);
    for (long i = 0; i < count; ++i) one(static_cast<T>(u(g)));
  }
  const double tiny = std::is_same_v<T, float> ? 1e-45 : 4.9e-324, huge = static_cast<double>(std::numeric_limits<T>::max());
  std::uniform_real_distribution<double> le(std::log2(tiny), std::log2(huge));
  for (long i = 0; i < count; ++i) {
    const T x = static_cast<T>(std::exp2(le(g)));
    one(x);
    one(-x);
  }
  return s;
}

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST(SharedMath, F64FunctionsAreWithinOneUlp) {
  struct Case {
    const char* name;
    Sweep s;
    double bound;  // the measured maximum, with a little room
  };
  const Case cases[] = {
      {"exp", sweep<double>(m::exp_f64, [](long double x) { return std::exp(x); }, {{-1, 1}, {-708.39, 709.8}, {-20, 20}}, -708.39, kInf,
                            {0, -0.0, 1, -1, 709.78, 709.79, -708.4, -745.13, -745.14, 1e-300, -1e-300, 0x1p-1074}),
       0.6},
      // Subnormal results round twice (the significand, then to the subnormal's ulp).
      {"exp subnormal", sweep<double>(m::exp_f64, [](long double x) { return std::exp(x); }, {{-745.2, -708.4}}, -kInf, -708.39,
                                      {-745.1332191019411, -745.1332191019412, -708.3964185322641}),
       0.99},
      {"expm1", sweep<double>(m::expm1_f64, [](long double x) { return std::expm1(x); }, {{-1, 1}, {-40, 709.8}, {-0.4, 0.4}}, -kInf,
                              kInf, {0x1p-54, -0x1p-54, 0x1p-53, 0.34657359027997264, -0.34657359027997264, 709.78, 1e-310}),
       0.6},
      {"log", sweep<double>(m::log_f64, [](long double x) { return std::log(x); }, {{0.5, 2}, {0.99, 1.01}, {1e-300, 1e300}}, 0, kInf,
                            {1, 0x1.fffffffffffffp-1, 0x1.0000000000001p0, 0x1p-1074, 2.2250738585072014e-308, 1.7976931348623157e308}),
       0.6},
      {"log1p", sweep<double>(m::log1p_f64, [](long double x) { return std::log1p(x); }, {{-1, 1}, {-1e-10, 1e-10}, {-0.3, 0.42}}, -1,
                              kInf, {-1 + 0x1p-53, 0x1p-53, 0x1.8p-53, -0x1p-54, 1e300, 0x1p-1074}),
       0.6},
      {"tanh", sweep<double>(m::tanh_f64, [](long double x) { return std::tanh(x); }, {{-1, 1}, {-20, 20}, {-0.6, 0.6}}, -kInf, kInf,
                             {0x1p-28, 0x1.0000000000001p-28, 19.06, 19.07, 22, 1e-310}),
       0.6},
      {"sigmoid", sweep<double>(m::sigmoid<double>, [](long double x) { return 1.0L / (1.0L + std::exp(-x)); }, {{-40, 40}}, -709, kInf, {0, 1, -1}),
       // 1 / (1 + exp(-x)): three roundings, 1.5 * 2^-53 relative, up to 3
       // ulp just above a power of two; below -709, e^-x overflows (and
       // the result is 0).
       3.05},
  };
  for (const Case& c : cases) {
    EXPECT_LT(c.s.max_ulp, c.bound) << c.name << " at " << c.s.at;
    std::printf("  %-14s %8ld inputs, max error %.4f ulp (at %a)\n", c.name, c.s.n, c.s.max_ulp, c.s.at);
  }
}

// The f32 functions through f64 (and the polynomials' slow paths) are the
// f64 value rounded once: within 0.5 ulp of f32 plus a 2^-29 sliver.
TEST(SharedMath, F32FunctionsThroughF64AreCorrectlyRoundedButForDoubleRounding) {
  struct Case {
    const char* name;
    Sweep s;
  };
  const Case cases[] = {
      {"exp slow", sweep<float>(m::exp_f32_slow, [](long double x) { return std::exp(x); }, {{-104, -87}, {87, 89}}, -kInf, kInf, {})},
      {"log slow", sweep<float>(m::log_f32_slow, [](long double x) { return std::log(x); }, {{0, 1.2e-38}}, 0, kInf, {0x1p-149f})},
      {"log1p", sweep<float>(m::log1p<float>, [](long double x) { return std::log1p(x); }, {{-1, 1}}, -1, kInf, {-1 + 0x1p-24f})},
      {"expm1", sweep<float>(m::expm1<float>, [](long double x) { return std::expm1(x); }, {{-1, 1}, {-20, 89}}, -kInf, kInf, {})},
      {"tanh", sweep<float>(m::tanh<float>, [](long double x) { return std::tanh(x); }, {{-1, 1}, {-10, 10}}, -kInf, kInf, {})},
      {"sin slow", sweep<float>(m::trig_slow<float, 0>, [](long double x) { return std::sin(x); }, {{8192, 1e6}, {-1e12, 1e12}}, -kInf, kInf,
                                {8192.0f, 8192.0009765625f, 3.4028234663852886e38f, 0x1.921fb6p+0f})},
      {"cos slow", sweep<float>(m::trig_slow<float, 1>, [](long double x) { return std::cos(x); }, {{8192, 1e6}, {-1e12, 1e12}}, -kInf, kInf,
                                {8192.0f, 8192.0009765625f, 3.4028234663852886e38f, 0x1.921fb6p+0f})},
  };
  for (const Case& c : cases) {
    EXPECT_LT(c.s.max_ulp, 0.5 + 1e-6) << c.name << " at " << c.s.at;
    std::printf("  %-14s %8ld inputs, max error %.7f ulp (at %a)\n", c.name, c.s.n, c.s.max_ulp, c.s.at);
  }
}

// sin and cos of f64 (kernels/libm.hpp's sin_f64 / cos_f64: the kernels'
// values beyond kTrigFastLimitF64, their reduction by pi/2 exact for every
// double) against long double (glibc's sinl / cosl reduce exactly too):
// huge arguments, log-uniform over every finite double, and the doubles
// that come closest to multiples of pi/2, where the reduction cancels
// most: those found for each exponent by continued fractions of 2^E 2/pi
// (0x1.6ac5b262ca1ffp+849 the closest of all: 2^-61.5 of pi/2), with
// their neighbours.
TEST(SharedMath, SinCosAreWithinOneUlpForEveryDouble) {
  std::vector<double> edges = {0.0, -0.0, 0x1p-1074, 1e-300, 0x1p-27, 0x1.921fb54442d18p-1, 0x1.921fb54442d19p-1, 0x1.921fb54442d18p+0,
                               0x1.921fb54442d18p+1, 1e5, 0x1.86a0000000001p+16, 1e22, 0x1p1023, 1.7976931348623157e308};
  const double hard[] = {0x1.6ac5b262ca1ffp+849, 0x1.6c6cbc45dc8dep+5,  0x1.b951f1572eba5p+23, 0x1.504cac51f1eafp+131,
                         0x1.e009c53148be1p+991, 0x1.4c96c11134d36p+577, 0x1.cfe482285f8edp+860, 0x1.db41f3cb71d7bp+680,
                         0x1.e7e44a78ac18cp+197, 0x1.c45cd11154dfdp+295, 0x1.83009e2e9e2ebp+614, 0x1.b2196364d750bp+253,
                         0x1.69eab0985179bp+246, 0x1.782b7a20df6d4p+67,  0x1.66bd5424e5655p+90,  0x1.4117573397d42p+939,
                         0x1.61a3db8c8d129p+1021, 0x1.8b28676cdcc5bp+555, 0x1.5ad5a62cb1cc9p+143, 0x1.dfa8d18f2b3eep+689};
  for (double h : hard)
    for (int e = 0; e <= 40; e += 4) {  // 2^e h is near a multiple too (2^e times farther)
      const double x = std::ldexp(h, e);
      if (!std::isfinite(x)) continue;
      double below = x, above = x;
      for (int j = 0; j < 3; ++j, below = std::nextafter(below, 0.0), above = std::nextafter(above, kInf)) {
        edges.push_back(below);
        edges.push_back(above);
      }
    }
  // Near k pi/2 for k up to 2^50 (k pi/2 in long double, rounded: within
  // an ulp of x of a multiple).
  std::mt19937_64 g(13);
  for (int i = 0; i < 200000; ++i) {
    const long double k = static_cast<long double>(g() >> (14 + g() % 48));
    const double x = static_cast<double>(k * 1.5707963267948966192313216916397514L);
    edges.push_back(x);
    edges.push_back(std::nextafter(x, kInf));
  }
  struct Case {
    const char* name;
    Sweep s;
  };
  const auto ranges = {std::pair{1e5, 1e6}, std::pair{-1e12, 1e12}, std::pair{1e15, 1e22}, std::pair{-4.0, 4.0}};
  auto run = [&](double (*f)(double), long double (*exact)(long double)) {
    Sweep s = sweep<double>(f, exact, ranges, -kInf, kInf, {}, 300000);
    for (double x : edges) {
      s.add(x, f(x), exact(static_cast<long double>(x)));
      s.add(-x, f(-x), exact(-static_cast<long double>(x)));
    }
    return s;
  };
  const Case cases[] = {
      {"sin", run(m::sin_f64, [](long double x) { return std::sin(x); })},
      {"cos", run(m::cos_f64, [](long double x) { return std::cos(x); })},
  };
  for (const Case& c : cases) {
    EXPECT_LT(c.s.max_ulp, 0.55) << c.name << " at " << c.s.at;
    std::printf("  %-14s %8ld inputs, max error %.4f ulp (at %a)\n", c.name, c.s.n, c.s.max_ulp, c.s.at);
  }
  // The hardest case's values, exactly (sin rounds to 1; cos, 2^-61 or so,
  // is all cancellation).
  EXPECT_EQ(m::sin_f64(0x1.6ac5b262ca1ffp+849), 1.0);
  EXPECT_EQ(m::cos_f64(0x1.6ac5b262ca1ffp+849), -0x1.14ae72e6ba22fp-61);
}

// pow over (x, y) pairs in several regimes, against powl; results in the
// subnormal range are left out (powl's own error there is near an ulp).
TEST(SharedMath, PowIsWithinOneUlp) {
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> u(0, 1);
  struct Regime {
    const char* name;
    double (*x)(double, double);
    double (*y)(double, double);
  };
  const Regime regimes[] = {
      {"x in [0, 2], |y| < 50", [](double a, double) { return 2 * a; }, [](double, double b) { return 100 * b - 50; }},
      {"x log-uniform, |y| < 5", [](double a, double) { return std::exp2(2000 * a - 1000); }, [](double, double b) { return 10 * b - 5; }},
      {"x near 1, |y| < 2^19", [](double a, double) { return 1 + 1e-3 * (a - 0.5); }, [](double, double b) { return std::ldexp(2 * b - 1, 19); }},
      {"near overflow", [](double a, double) { return 2 + a; }, [](double, double b) { return 600 + 50 * b; }},
      {"negative x, integer y", [](double a, double) { return -10 * a; }, [](double, double b) { return std::floor(100 * b - 50); }},
      {"f32-sized", [](double a, double) { return 100 * a; }, [](double, double b) { return 20 * b - 10; }},
  };
  for (const Regime& r : regimes) {
    double worst = 0, wx = 0, wy = 0;
    for (int i = 0; i < 200000; ++i) {
      const double a = u(g), b = u(g);
      const double x = r.x(a, b), y = r.y(a, b);
      const long double exact = std::pow(static_cast<long double>(x), static_cast<long double>(y));
      if (exact != 0 && std::fabs(exact) < 0x1p-1022L) continue;
      const double e = ulp_error(m::pow_f64(x, y), exact);
      if (e > worst) worst = e, wx = x, wy = y;
    }
    EXPECT_LT(worst, 0.6) << r.name << " at x = " << wx << ", y = " << wy;
    std::printf("  %-24s max error %.4f ulp (at %a, %a)\n", r.name, worst, wx, wy);
  }
  // f32 through f64.
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(10 * u(g)), y = static_cast<float>(40 * u(g) - 20);
    const float got = static_cast<float>(m::pow_f64(x, y));
    worst = std::max(worst, ulp_error(got, std::pow(static_cast<long double>(x), static_cast<long double>(y))));
  }
  EXPECT_LT(worst, 0.5 + 1e-6);
  std::printf("  %-24s max error %.7f ulp\n", "f32", worst);
  // IEEE pow's special cases: glibc's are the standard's (C99 Annex F).
  const double inf = kInf, nan = std::numeric_limits<double>::quiet_NaN();
  const double xs[] = {0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, inf, -inf, nan, 1e-310, -1e-310, 3.0};
  const double ys[] = {0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, inf, -inf, nan, 0x1p53, 0x1p53 + 2, 1e300, -1e300};
  for (double x : xs)
    for (double y : ys) {
      const double got = m::pow_f64(x, y), want = std::pow(x, y);
      EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : __builtin_bit_cast(sw::u64, got) == __builtin_bit_cast(sw::u64, want))
          << "pow(" << x << ", " << y << ") = " << got << ", want " << want;
    }
}

TEST(SharedMath, SpecialValuesAreExact) {
  const double inf = kInf, nan = std::numeric_limits<double>::quiet_NaN();
  auto same = [](double a, double b) { return std::isnan(a) ? std::isnan(b) : __builtin_bit_cast(sw::u64, a) == __builtin_bit_cast(sw::u64, b); };
  struct Case {
    const char* what;
    double got, want;
  };
  const Case cases[] = {
      {"exp(0)", m::exp_f64(0.0), 1.0},        {"exp(-0)", m::exp_f64(-0.0), 1.0},       {"exp(inf)", m::exp_f64(inf), inf},
      {"exp(-inf)", m::exp_f64(-inf), 0.0},    {"exp(nan)", m::exp_f64(nan), nan},       {"exp(710)", m::exp_f64(710.0), inf},
      {"exp(-746)", m::exp_f64(-746.0), 0.0},  {"expm1(0)", m::expm1_f64(0.0), 0.0},     {"expm1(-0)", m::expm1_f64(-0.0), -0.0},
      {"expm1(inf)", m::expm1_f64(inf), inf},  {"expm1(-inf)", m::expm1_f64(-inf), -1.0}, {"expm1(nan)", m::expm1_f64(nan), nan},
      {"expm1(710)", m::expm1_f64(710.0), inf}, {"expm1(tiny)", m::expm1_f64(0x1p-1074), 0x1p-1074},
      {"log(1)", m::log_f64(1.0), 0.0},        {"log(0)", m::log_f64(0.0), -inf},        {"log(-0)", m::log_f64(-0.0), -inf},
      {"log(-1)", m::log_f64(-1.0), nan},      {"log(-inf)", m::log_f64(-inf), nan},     {"log(inf)", m::log_f64(inf), inf},
      {"log(nan)", m::log_f64(nan), nan},      {"log(2)", m::log_f64(2.0), 0x1.62e42fefa39efp-1},
      {"log1p(0)", m::log1p_f64(0.0), 0.0},    {"log1p(-0)", m::log1p_f64(-0.0), -0.0},  {"log1p(-1)", m::log1p_f64(-1.0), -inf},
      {"log1p(-2)", m::log1p_f64(-2.0), nan},  {"log1p(inf)", m::log1p_f64(inf), inf},   {"log1p(nan)", m::log1p_f64(nan), nan},
      {"log1p(tiny)", m::log1p_f64(-0x1p-1074), -0x1p-1074},
      {"tanh(0)", m::tanh_f64(0.0), 0.0},      {"tanh(-0)", m::tanh_f64(-0.0), -0.0},    {"tanh(inf)", m::tanh_f64(inf), 1.0},
      {"tanh(-inf)", m::tanh_f64(-inf), -1.0}, {"tanh(nan)", m::tanh_f64(nan), nan},     {"tanh(tiny)", m::tanh_f64(-0x1p-1074), -0x1p-1074},
      {"tanh(1e-10)", m::tanh_f64(1e-10), 1e-10}, {"tanh(30)", m::tanh_f64(30.0), 1.0},
  };
  for (const Case& c : cases) EXPECT_TRUE(same(c.got, c.want)) << c.what << ": " << c.got << ", want " << c.want;
  // f32 through f64.
  EXPECT_EQ(m::exp_f32_slow(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(m::exp_f32_slow(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(m::log_f32_slow(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(m::log_f32_slow(-1.0f)));
  EXPECT_TRUE(std::signbit(m::expm1<float>(-0.0f)) && std::signbit(m::log1p<float>(-0.0f)));
  // sin and cos: zeros keep their sign in sin, inf gives NaN.
  const Case trig[] = {
      {"sin(0)", m::sin_f64(0.0), 0.0},        {"sin(-0)", m::sin_f64(-0.0), -0.0},     {"cos(0)", m::cos_f64(0.0), 1.0},
      {"cos(-0)", m::cos_f64(-0.0), 1.0},      {"sin(inf)", m::sin_f64(inf), nan},      {"sin(-inf)", m::sin_f64(-inf), nan},
      {"cos(inf)", m::cos_f64(inf), nan},      {"cos(-inf)", m::cos_f64(-inf), nan},    {"sin(nan)", m::sin_f64(nan), nan},
      {"cos(nan)", m::cos_f64(nan), nan},      {"sin(tiny)", m::sin_f64(-0x1p-1074), -0x1p-1074},
      {"cos(tiny)", m::cos_f64(0x1p-1074), 1.0}, {"sin(1e-10)", m::sin_f64(1e-10), 1e-10},
  };
  for (const Case& c : trig) EXPECT_TRUE(same(c.got, c.want)) << c.what << ": " << c.got << ", want " << c.want;
  EXPECT_TRUE(std::isnan(m::trig_slow<float, 0>(std::numeric_limits<float>::infinity())));
}
