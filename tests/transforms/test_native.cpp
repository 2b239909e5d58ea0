// Native fused loops (backend/cpu/native.hpp): jit's fused groups compiled
// to one loop by the system compiler give eager's bits for every op and
// dtype, special values included (NaN, inf, -0, subnormals, and inputs
// beyond the polynomials' ranges, whose tiles the tile loop redoes); the
// disk cache serves a later request without compiling; without a compiler
// jit runs the tile loop with the same results.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/native.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::cpu;
using ts::testing::expect_same;

namespace {

// Every test here compiles every group (restored after the test).
class Native : public ::testing::Test {
 protected:
  void SetUp() override { cpu::set_native_mode(cpu::NativeMode::Always); }
  void TearDown() override { cpu::set_native_mode(cpu::NativeMode::Auto); }
};

// Rows over the first n devices.
ts::NamedSharding rows(int n) {
  const std::vector<ts::Device> all = ts::devices();
  const std::vector<ts::Device> d(all.begin(), all.begin() + n);
  return ts::NamedSharding(ts::Mesh(d, {n}, {"x"}), ts::P("x"));
}

// n values: ordinary ones in [lo, hi) first, then `tail` at the end (in the
// last device's last tile).
std::vector<double> values(std::int64_t n, double lo, double hi, const std::vector<double>& tail) {
  std::vector<double> v = ts::testing::uniform_doubles(n, 7, lo, hi);
  for (size_t k = 0; k < tail.size(); ++k) v[v.size() - tail.size() + k] = tail[k];
  return v;
}

template <class T>
ts::Array put(const std::vector<double>& v, const ts::NamedSharding& s) {
  std::vector<T> t(v.begin(), v.end());
  return ts::device_put(t, {static_cast<std::int64_t>(t.size())}, s);
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Each result of the jitted f equals eager f's, bitwise.
template <class F, class... A>
void expect_jit_same(F f, const std::string& what, const A&... args) {
  auto j = ts::jit(f);
  const std::vector<ts::Array> got = j(args...), want = f(args...);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) expect_same(got[k], want[k], what + " result " + std::to_string(k));
}

// The unary ops that never leave the native loop, on every special value.
std::vector<ts::Array> plain_unary(const ts::Array& x) {
  const ts::Array y = x * 1.0;  // one group: every op reads a member's value
  return {ts::sqrt(y), ts::rsqrt(y), ts::abs(y), ts::negative(y), ts::sign(y), ts::floor(y), ts::ceil(y),
          ts::round(y), ts::isnan(y), ts::isfinite(y), ts::tanh(y), ts::log1p(y), ts::expm1(y),
          ts::logical_not(y)};
}

// The polynomial ops (sin, cos, exp, log, sigmoid), which flag inputs
// beyond their range.
std::vector<ts::Array> poly_unary(const ts::Array& x) {
  const ts::Array y = x * 1.0;
  return {ts::sin(y), ts::cos(y), ts::exp(y), ts::log(y), ts::sigmoid(y), 2.0 * ts::sin(y) + 1.0};
}

std::vector<ts::Array> trig(const ts::Array& x) {
  const ts::Array y = x * 1.0;
  return {ts::sin(y), ts::cos(y)};
}

std::vector<ts::Array> binary_all(const ts::Array& a, const ts::Array& b) {
  const ts::Array x = a * 1, y = b * 1;
  return {x + y,        x - y,         x * y,          ts::divide(x, y), ts::floor_divide(x, y),
          ts::remainder(x, y), ts::pow(x, y), ts::maximum(x, y), ts::minimum(x, y), ts::equal(x, y),
          ts::not_equal(x, y), ts::less(x, y), ts::less_equal(x, y), ts::greater(x, y), ts::greater_equal(x, y),
          ts::logical_and(x, y), ts::logical_or(x, y), ts::logical_xor(x, y), 3 - x, x * 2, ts::where(x > y, x, y),
          ts::where(x > y, x, 5), ts::where(x > y, 4, y), ts::clip(x, 1, 3)};
}

}  // namespace

TEST_F(Native, UnaryOpsGiveEagerBitsOnSpecialValues) {
  const std::int64_t n = 8 * 1500 + 13;  // several tiles per device, uneven blocks
  const std::vector<double> special = {0.0, -0.0, 1e-40, -1e-40, 1e-310, kNaN, kInf, -kInf, -1.0, -2.5, 1e30, 3e38};
  for (int devices : {1, 8}) {
    const auto s = rows(devices);
    const auto before = cpu::native_stats();
    expect_jit_same(plain_unary, "f32 plain", put<float>(values(n, -4, 4, special), s));
    expect_jit_same(plain_unary, "f64 plain", put<double>(values(n, -4, 4, special), s));
    // In range: -0, subnormals and large arguments short of the limits stay native.
    // (f32 log takes zero and subnormals to libm.)
    expect_jit_same(poly_unary, "f32 poly in range", put<float>(values(n, 0.01, 80, {1e-30, 86.5}), s));
    expect_jit_same(trig, "f32 trig in range", put<float>(values(n, -80, 80, {-0.0, 1e-40, 8191.0, -8192.0}), s));
    expect_jit_same(poly_unary, "f64 poly in range", put<double>(values(n, 0.01, 80, {-0.0, 1e-310, 9e4}), s));
    const auto mid = cpu::native_stats();
    EXPECT_EQ(mid.tiles_redone, before.tiles_redone) << "no input was beyond a polynomial's range";
    // Beyond: the tiles holding them are redone by the tile loop.
    expect_jit_same(poly_unary, "f32 poly beyond", put<float>(values(n, -3, 3, special), s));
    expect_jit_same(poly_unary, "f64 poly beyond", put<double>(values(n, -3, 3, special), s));
    const auto after = cpu::native_stats();
    EXPECT_GT(after.tiles_redone, mid.tiles_redone);
    EXPECT_GT(after.compiled + after.loaded + after.reused, before.compiled + before.loaded + before.reused)
        << after.last_error;
    EXPECT_EQ(after.failed, 0) << after.last_error;
  }
}

TEST_F(Native, BinarySelectAndScalarOpsGiveEagerBitsInEveryDtype) {
  const std::int64_t n = 8 * 700 + 5;
  const auto s = rows(8);
  const std::vector<double> sa = {0.0, -0.0, kNaN, kInf, -kInf, 7.0, -7.0, 1e-40};
  const std::vector<double> sb = {0.0, 0.0, 1.0, -kInf, kNaN, 0.0, -1.0, -0.0};
  expect_jit_same(binary_all, "f32", put<float>(values(n, -5, 5, sa), s), put<float>(values(n, -5, 5, sb), s));
  expect_jit_same(binary_all, "f64", put<double>(values(n, -5, 5, sa), s), put<double>(values(n, -5, 5, sb), s));
  // Integers: division and remainder by zero and by -1, wrapping products and
  // negative powers.
  const std::vector<double> ia = {0, -7, 7, 2147483647, -2147483648.0, 3, -1, 1};
  const std::vector<double> ib = {0, 0, -1, 2, -1, -2, -3, 31};
  expect_jit_same(binary_all, "i32", put<std::int32_t>(values(n, -100, 100, ia), s),
                  put<std::int32_t>(values(n, -9, 9, ib), s));
  expect_jit_same(binary_all, "u8", put<std::uint8_t>(values(n, 0, 255, {0, 255, 128, 7}), s),
                  put<std::uint8_t>(values(n, 0, 9, {0, 0, 255, 3}), s));
  expect_jit_same(binary_all, "i64", put<std::int64_t>(values(n, -1e6, 1e6, ia), s),
                  put<std::int64_t>(values(n, -9, 9, ib), s));
}

TEST_F(Native, ConversionsGiveEagerBits) {
  const std::int64_t n = 8 * 900 + 3;
  const auto s = rows(8);
  auto f = [](const ts::Array& x) {
    const ts::Array y = x * 1;
    return std::vector<ts::Array>{ts::astype(y, ts::i32), ts::astype(y, ts::u8), ts::astype(y, ts::i64),
                                  ts::astype(y, ts::u64), ts::astype(y, ts::bool_), ts::astype(y, ts::f32),
                                  ts::astype(ts::astype(y, ts::i8), ts::f64)};
  };
  const std::vector<double> tail = {kNaN, kInf, -kInf, 3e9, -3e9, 1e20, -0.0, 255.9, -1.5, 2147483647.0};
  expect_jit_same(f, "from f32", put<float>(values(n, -300, 300, tail), s));
  expect_jit_same(f, "from f64", put<double>(values(n, -300, 300, tail), s));
  expect_jit_same(f, "from i32", put<std::int32_t>(values(n, -70000, 70000, {-1, 0, 2147483647.0}), s));
}

TEST_F(Native, SinksBroadcastsAndEscapingValues) {
  const auto mesh = ts::make_mesh({4, 2}, {"x", "y"});
  const std::int64_t r = 301, c = 97;
  auto x = ts::device_put(ts::testing::uniform_doubles(r * c, 3, -2, 2), {r, c}, ts::NamedSharding(mesh, ts::P("x", "y")));
  auto row = ts::device_put(ts::testing::uniform_doubles(c, 4, -2, 2), {c}, ts::NamedSharding(mesh, ts::P("y")));
  // A reduction ends the group (the loop feeds it tiles); a broadcast operand;
  // an intermediate that is a result as well.
  auto f = [](const ts::Array& a, const ts::Array& b) {
    const ts::Array t = ts::tanh(a * 0.5 + b);
    const ts::Array u = ts::exp(t) - 1.0;
    return std::vector<ts::Array>{t, ts::sum(u * u), ts::sum(ts::sin(a) * b, {1})};
  };
  const auto before = cpu::native_stats();
  expect_jit_same(f, "sink/broadcast", x, row);
  const auto after = cpu::native_stats();
  EXPECT_GT(after.compiled + after.loaded + after.reused, before.compiled + before.loaded + before.reused)
      << after.last_error;
}

TEST_F(Native, TheDiskCacheServesALaterRequestWithoutCompiling) {
  const auto s = rows(2);
  auto x = put<float>(values(4099, -3, 3, {}), s);
  auto f = [](const ts::Array& v) { return std::vector<ts::Array>{ts::cos(v * 3.25f) * 0.5f - v}; };
  expect_jit_same(f, "first", x);
  cpu::forget_native_kernels();  // as a new process would start
  const auto before = cpu::native_stats();
  expect_jit_same(f, "from disk", x);
  const auto after = cpu::native_stats();
  EXPECT_EQ(after.compiled, before.compiled);
  EXPECT_EQ(after.loaded, before.loaded + 1) << after.last_error;
  // Groups that differ only in their scalars share one compiled loop.
  auto g = [](const ts::Array& v) { return std::vector<ts::Array>{ts::cos(v * 1.5f) * 0.25f - v}; };
  expect_jit_same(g, "other scalars", x);
  EXPECT_EQ(cpu::native_stats().compiled, after.compiled);
}

TEST_F(Native, WithoutACompilerTheTileLoopRuns) {
  ASSERT_EQ(setenv("TESSERA_CXX", "/nonexistent/c++", 1), 0);
  const auto before = cpu::native_stats();
  auto x = put<double>(values(3001, -3, 3, {kNaN}), rows(4));
  expect_jit_same([](const ts::Array& v) { return std::vector<ts::Array>{ts::sin(v) * v + 0.125}; }, "no compiler", x);
  unsetenv("TESSERA_CXX");
  const auto after = cpu::native_stats();
  EXPECT_EQ(after.failed, before.failed + 1);
  EXPECT_NE(after.last_error.find("/nonexistent/c++"), std::string::npos) << after.last_error;
}

TEST(NativeMode, TheSettingIsReadAndCheckedByName) {
  EXPECT_EQ(cpu::parse_native_mode(nullptr), cpu::NativeMode::Auto);
  EXPECT_EQ(cpu::parse_native_mode("auto"), cpu::NativeMode::Auto);
  EXPECT_EQ(cpu::parse_native_mode("always"), cpu::NativeMode::Always);
  EXPECT_EQ(cpu::parse_native_mode("off"), cpu::NativeMode::Off);
  ts::testing::expect_error<ts::Error>([] { cpu::parse_native_mode("fast"); }, "[jit] TESSERA_NATIVE_KERNELS",
                                       {"auto, always or off", "'fast'"});
}

TEST(NativeMode, OffAndSmallBlocksInAutoUseTheTileLoop) {
  auto x = put<float>(values(1000, -3, 3, {}), rows(2));
  auto f = [](const ts::Array& v) { return std::vector<ts::Array>{ts::sin(v) * 2.0f + 1.0f}; };
  for (cpu::NativeMode m : {cpu::NativeMode::Off, cpu::NativeMode::Auto}) {
    cpu::set_native_mode(m);
    const auto before = cpu::native_stats();
    expect_jit_same(f, "tile loop", x);
    const auto after = cpu::native_stats();
    EXPECT_EQ(after.compiled + after.loaded + after.reused, before.compiled + before.loaded + before.reused);
  }
  cpu::set_native_mode(cpu::NativeMode::Auto);
}

// The CUDA target's loop, run on the host: its source compiled by the host
// compiler with stand-ins for CUDA's built-in variables, and launched as a
// loop over the threads of a grid. Its grid-stride steps (kStep elements
// a grid stride apart, then the rest one by one) must write every element
// once and nothing beyond, with the CPU loop's bits, for every size against
// every grid, in every shape of the loop (cpu::CudaLoopShape): split into
// the polynomials' kernel and its fix-up or not, and with other steps.
namespace {

// CUDA's names for the host compiler: the built-in variables, __global__,
// __device__, the fence and atomicAdd (threads run one after another), and
// libcu++'s namespace.
const char* const kCudaOnHost = R"(
struct tessera_dim3 { unsigned x = 1, y = 1, z = 1; };
static tessera_dim3 blockIdx, threadIdx, gridDim, blockDim;
#define __global__
#define __device__
#define __threadfence()
static unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned old = *p; *p += v; return old; }
namespace cuda { namespace std { using namespace ::std; } }
)";

// tessera_grid(args, n, blocks, threads, mode) launches the loop on slot 3:
// mode 0 as launch_fused does where no output is an input (the kernel,
// then its fix-up where the source has one), mode 1 the fix-up alone,
// forced (where an output is an input). It returns the slot's mark between
// the two kernels; tessera_mark() the mark and count after them (both 0
// where the source has no fix-up).
const char* const kGridDriver = R"(
template <class F> static void each_thread(unsigned blocks, unsigned threads, F f) {
  gridDim.x = blocks;
  blockDim.x = threads;
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      f();
    }
}
extern "C" __attribute__((visibility("default"))) unsigned tessera_grid(const void* args, long long n, unsigned blocks,
                                                                          unsigned threads, int mode) {
  const tessera_fused_args& a = *static_cast<const tessera_fused_args*>(args);
  if (mode == 0) each_thread(blocks, threads, [&] { tessera_fused(a, n, 3); });
#ifdef TESSERA_HAS_FIX
  const unsigned mark = tessera_fix_[3];
  each_thread(blocks, threads, [&] { tessera_fused_fix(a, n, 3, mode); });
  return mark;
#else
  return 0;
#endif
}
extern "C" __attribute__((visibility("default"))) unsigned tessera_mark() {
#ifdef TESSERA_HAS_FIX
  unsigned others = 0;
  for (int s = 0; s < 256; ++s) others += s == 3 ? 0u : tessera_fix_[s] + tessera_fix_seen_[s];
  return tessera_fix_[3] + tessera_fix_seen_[3] + others;
#else
  return 0;
#endif
}
)";

// The source compiled on the host and loaded.
struct HostLoop {
  using Grid = unsigned (*)(const void*, long long, unsigned, unsigned, int);
  using Mark = unsigned (*)();
  void* lib = nullptr;
  Grid grid = nullptr;
  Mark mark = nullptr;
  bool has_fix = false;
  std::string dir;
  explicit HostLoop(const std::string& src) {
    char tmpl[] = "/tmp/tessera-cuda-on-host-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return;
    dir = tmpl;
    has_fix = src.find("tessera_fused_fix") != std::string::npos;
    const std::string cpp = dir + "/loop.cpp", so = dir + "/loop.so";
    std::ofstream(cpp) << kCudaOnHost << src << kGridDriver;
    const char* cxx = std::getenv("TESSERA_CXX");
    const std::string cmd = std::string(cxx && *cxx ? cxx : "c++") + " -std=c++20 -O1 -ffp-contract=off -fPIC -shared -w" +
                            (has_fix ? " -DTESSERA_HAS_FIX" : "") + " -o " + so + " " + cpp;
    if (std::system(cmd.c_str()) != 0) return;
    lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    grid = reinterpret_cast<Grid>(dlsym(lib, "tessera_grid"));
    mark = reinterpret_cast<Mark>(dlsym(lib, "tessera_mark"));
    std::remove(so.c_str());
    std::remove(cpp.c_str());
  }
  ~HostLoop() {
    if (lib) dlclose(lib);
    if (!dir.empty()) rmdir(dir.c_str());
  }
};

}  // namespace

TEST(NativeCuda, TheGridStrideLoopWritesEveryElementOnceWithTheCpuBits) {
  using E = tessera::detail::ElementExpr;
  using K = E::Kind;
  using tessera::detail::BinaryOp;
  using tessera::detail::UnaryOp;
  // out0 = sin(a0) * 2.5, out1 = out0 + a1 (f32): two inputs, two outputs,
  // one scalar.
  cpu::NativeGroup g;
  g.inputs = {ts::f32, ts::f32};
  auto member = [&](E e, std::vector<cpu::NativeGroup::Arg> args, int output) {
    cpu::NativeGroup::Member m;
    m.expr = e;
    m.args = std::move(args);
    m.output = output;
    g.members.push_back(m);
  };
  E e;
  e.t = e.result = ts::f32;
  e.kind = K::Unary;
  e.unary = UnaryOp::Sin;
  member(e, {{-1, 0}}, -1);
  e.kind = K::BinaryScalar;
  e.binary = BinaryOp::Mul;
  e.scalar.is_scalar = true;
  e.scalar.f = 2.5;
  member(e, {{0, -1}}, 0);
  e.kind = K::Binary;
  e.binary = BinaryOp::Add;
  member(e, {{1, -1}, {-1, 1}}, 1);
  g.num_outputs = 2;

  const auto cpu_loop = cpu::native_kernel(g);
  ASSERT_NE(cpu_loop, nullptr);
  // The default shape (split, the generator's step), one kernel, and a
  // split loop of odd steps.
  const std::vector<cpu::CudaLoopShape> shapes = {{}, {0, false}, {3, true}};
  for (const cpu::CudaLoopShape& shape : shapes) {
    std::vector<double> f;
    std::vector<std::int64_t> i;
    const std::string src = cpu::native_source(g, cpu::NativeTarget::Cuda, &f, &i, &shape);
    ASSERT_FALSE(src.empty());
    ASSERT_EQ(src.find("tessera_fused_fix") != std::string::npos, shape.split);
    const HostLoop loop(src);
    ASSERT_NE(loop.grid, nullptr) << "the CUDA source did not build on the host";
    ASSERT_EQ(cpu_loop->f, f);
    const std::string what = "step " + std::to_string(shape.step) + (shape.split ? ", split" : ", one kernel");

    const float sentinel = -12345.0f;
    // `beyond`: some inputs past sin's polynomial (|x| > 8192, -inf),
    // which the fix-up (split) or the step (one kernel) computes again one
    // element at a time; the reference is then the eager ops' (the CPU
    // loop gives up on such a tile).
    for (bool beyond : {false, true})
      for (int mode : shape.split ? std::vector<int>{0, 1} : std::vector<int>{0})
        for (const auto& [blocks, threads] :
             std::vector<std::pair<unsigned, unsigned>>{{1, 1}, {3, 4}, {2, 32}, {5, 7}})
          for (long long n : {0LL, 1LL, 3LL, 11LL, 12LL, 47LL, 48LL, 49LL, 95LL, 96LL, 97LL, 1001LL}) {
            const std::vector<double> va = ts::testing::uniform_doubles(n + 1, 3, -100, 100),
                                      vb = ts::testing::uniform_doubles(n + 1, 4, -1, 1);
            std::vector<float> a(va.begin(), va.begin() + n), b(vb.begin(), vb.begin() + n);
            bool flagged = false;
            if (beyond)
              for (long long k = 0; k < n; ++k) {
                if (k % 7 == 3) a[k] = static_cast<float>((k % 2 ? -1 : 1) * (9000.0 + 1234.5 * static_cast<double>(k)));
                if (k % 29 == 6) a[k] = -std::numeric_limits<float>::infinity();
                flagged = flagged || k % 7 == 3 || k % 29 == 6;
              }
            const int guard = 8;  // past the end: must stay untouched
            std::vector<float> o0(n + guard, sentinel), o1(n + guard, sentinel), w0(n + 1), w1(n + 1);
            // The argument struct's words (cpu::cuda_args_layout): inputs,
            // outputs, float scalars, integer scalars.
            std::vector<std::uint64_t> words;
            auto put = [&](const void* p) {
              std::uint64_t w = 0;
              std::memcpy(&w, &p, sizeof p);
              words.push_back(w);
            };
            put(a.data());
            put(b.data());
            put(o0.data());
            put(o1.data());
            for (double x : f) {
              std::uint64_t w = 0;
              std::memcpy(&w, &x, sizeof w);
              words.push_back(w);
            }
            if (f.empty()) words.push_back(0);
            for (std::int64_t x : i) words.push_back(static_cast<std::uint64_t>(x));
            if (i.empty()) words.push_back(0);
            const unsigned mark = loop.grid(words.data(), n, blocks, threads, mode);
            const std::string at = what + (beyond ? ", beyond" : "") + (mode == 1 ? ", fix-up alone" : "") + ", n " +
                                   std::to_string(n) + ", grid " + std::to_string(blocks) + "x" + std::to_string(threads);
            // The polynomials' kernel marks the slot exactly where an element
            // is beyond their range; after the fix-up it is clear.
            if (shape.split && mode == 0) {
              ASSERT_EQ(mark, flagged ? 1u : 0u) << at;
            }
            ASSERT_EQ(loop.mark(), 0u) << at;
            const void* in[] = {a.data(), b.data()};
            void* out[] = {w0.data(), w1.data()};
            if (beyond && n > 0) {
              const ts::Array x0 = ts::device_put(a, {n}, rows(1)), x1 = ts::device_put(b, {n}, rows(1));
              const ts::Array r0 = ts::sin(x0) * 2.5f;
              w0 = r0.to_vector<float>();
              w1 = (r0 + x1).to_vector<float>();
            } else {
              ASSERT_EQ(cpu_loop->fn(in, out, f.data(), i.data(), n), 0u);  // no input beyond the polynomial's range
            }
            for (long long k = 0; k < n; ++k) {
              ASSERT_EQ(std::memcmp(&o0[k], &w0[k], 4), 0) << at << ", out0[" << k << "] " << o0[k] << " vs " << w0[k];
              ASSERT_EQ(std::memcmp(&o1[k], &w1[k], 4), 0) << at << ", out1[" << k << "] " << o1[k] << " vs " << w1[k];
            }
            for (long long k = n; k < n + guard; ++k) ASSERT_TRUE(o0[k] == sentinel && o1[k] == sentinel) << at;
          }
  }
}

// A loop without a polynomial has one kernel in every shape; an output
// that is its input (in place) stays correct in the one-kernel loop with
// a polynomial, whose steps read before they write.
TEST(NativeCuda, OnlyLoopsWithAPolynomialSplitAndTheOneKernelLoopRunsInPlace) {
  using E = tessera::detail::ElementExpr;
  using K = E::Kind;
  for (const bool with_sin : {false, true}) {
    cpu::NativeGroup g;
    g.inputs = {ts::f32};
    cpu::NativeGroup::Member m;
    E e;
    e.t = e.result = ts::f32;
    e.kind = K::Unary;
    e.unary = with_sin ? tessera::detail::UnaryOp::Sin : tessera::detail::UnaryOp::Neg;
    m.expr = e;
    m.args = {{-1, 0}};
    m.output = 0;
    g.members.push_back(m);
    g.num_outputs = 1;
    const cpu::CudaLoopShape split{}, one{0, false};
    const std::string src = cpu::native_source(g, cpu::NativeTarget::Cuda, nullptr, nullptr, &split);
    EXPECT_EQ(src.find("tessera_fused_fix") != std::string::npos, with_sin);
    if (!with_sin) continue;
    // In place, forced: the fix-up alone over an array that is its own output.
    for (const cpu::CudaLoopShape& shape : {split, one}) {
      const HostLoop loop(cpu::native_source(g, cpu::NativeTarget::Cuda, nullptr, nullptr, &shape));
      ASSERT_NE(loop.grid, nullptr);
      for (long long n : {1LL, 40LL, 1001LL}) {
        std::vector<double> v = ts::testing::uniform_doubles(n, 5, -100, 100);
        std::vector<float> x(v.begin(), v.end());
        for (long long k = 0; k < n; k += 13) x[k] = 1e6f + static_cast<float>(k);  // beyond the polynomial
        const std::vector<float> want = ts::sin(ts::device_put(x, {n}, rows(1))).to_vector<float>();
        std::vector<std::uint64_t> words(4, 0);
        const void* p = x.data();
        std::memcpy(&words[0], &p, sizeof p);
        std::memcpy(&words[1], &p, sizeof p);
        loop.grid(words.data(), n, 3, 5, shape.split ? 1 : 0);
        for (long long k = 0; k < n; ++k)
          ASSERT_EQ(std::memcmp(&x[k], &want[k], 4), 0) << (shape.split ? "split" : "one kernel") << ", n " << n << ", x[" << k << "]";
      }
    }
  }
}

// set_cuda_loop_shape: later sources take it; a bad step is refused with
// the setting unchanged.
TEST(NativeCuda, TheLoopShapeSettingReachesLaterSourcesAndRefusesBadSteps) {
  using E = tessera::detail::ElementExpr;
  cpu::NativeGroup g;
  g.inputs = {ts::f32};
  cpu::NativeGroup::Member m;
  E e;
  e.t = e.result = ts::f32;
  e.kind = E::Kind::Unary;
  e.unary = tessera::detail::UnaryOp::Exp;
  m.expr = e;
  m.args = {{-1, 0}};
  m.output = 0;
  g.members.push_back(m);
  g.num_outputs = 1;
  const cpu::CudaLoopShape before = cpu::cuda_loop_shape();
  EXPECT_EQ(before.step, 0);
  EXPECT_TRUE(before.split);
  EXPECT_NE(cpu::native_source(g, cpu::NativeTarget::Cuda).find("tessera_fused_fix"), std::string::npos);
  EXPECT_NE(cpu::native_source(g, cpu::NativeTarget::Cuda).find("kStep = 8;"), std::string::npos);
  cpu::set_cuda_loop_shape({5, false});
  const std::string src = cpu::native_source(g, cpu::NativeTarget::Cuda);
  EXPECT_EQ(src.find("tessera_fused_fix"), std::string::npos);
  EXPECT_NE(src.find("kStep = 5;"), std::string::npos);
  for (int bad : {-1, 33}) {
    try {
      cpu::set_cuda_loop_shape({bad, true});
      ADD_FAILURE() << "step " << bad << " was taken";
    } catch (const ts::ValueError& err) {
      EXPECT_EQ(std::string(err.what()),
                "[set_cuda_loop_shape] expected a step of 0 (the generator's choice) to 32 elements, got " +
                    std::to_string(bad));
    }
    EXPECT_EQ(cpu::cuda_loop_shape().step, 5);
  }
  cpu::set_cuda_loop_shape(before);
  EXPECT_NE(cpu::native_source(g, cpu::NativeTarget::Cuda).find("tessera_fused_fix"), std::string::npos);
}

// A device keeps its fused loops' slot; a process has kCudaFixSlots of
// them, and the device beyond is refused by name.
TEST(NativeCuda, EachDeviceKeepsItsSlotUpToTheLimit) {
  const int a = cpu::cuda_fix_slot(1005, "jit"), b = cpu::cuda_fix_slot(7, "jit");
  EXPECT_NE(a, b);
  EXPECT_EQ(cpu::cuda_fix_slot(1005, "jit"), a);
  std::vector<bool> seen(cpu::kCudaFixSlots, false);
  int id = 20000;
  for (int k = 0; k < cpu::kCudaFixSlots - 2; ++k) {
    const int s = cpu::cuda_fix_slot(id++, "jit");
    ASSERT_TRUE(s >= 0 && s < cpu::kCudaFixSlots);
    EXPECT_FALSE(seen[static_cast<std::size_t>(s)]);
    seen[static_cast<std::size_t>(s)] = true;
  }
  try {
    cpu::cuda_fix_slot(id, "jit");
    ADD_FAILURE() << "a slot beyond the limit was given";
  } catch (const ts::DeviceError& e) {
    EXPECT_EQ(std::string(e.what()), "[jit] fused GPU loops run on at most 256 devices of a process; device " +
                                         std::to_string(id) + " would be one more");
  }
  EXPECT_EQ(cpu::cuda_fix_slot(7, "jit"), b);
}

#ifdef TESSERA_TEST_NVRTC
// The generator's other target: the same member expressions over the same
// prelude, written as a CUDA kernel and compiled by NVRTC (no GPU needed to
// compile). Every op of the elementwise family in every dtype it takes.
#include <nvrtc.h>

namespace {

using detail_expr = tessera::detail::ElementExpr;

// A group whose every member reads its own inputs and is written out.
struct GroupBuilder {
  cpu::NativeGroup g;
  void add(detail_expr e, const std::vector<ts::DType>& in) {
    cpu::NativeGroup::Member m;
    m.expr = e;
    for (ts::DType t : in) {
      cpu::NativeGroup::Arg a;
      a.input = static_cast<int>(g.inputs.size());
      g.inputs.push_back(t);
      m.args.push_back(a);
    }
    m.output = g.num_outputs++;
    g.members.push_back(m);
  }
};

std::string nvrtc_compile(const std::string& src) {
  nvrtcProgram p;
  if (nvrtcCreateProgram(&p, src.c_str(), "fused.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return "create failed";
  const std::string inc = std::string("-I") + TESSERA_CUDA_INCLUDE, cccl = inc + "/cccl";
  std::vector<const char*> opts = {"--gpu-architecture=compute_90", "--fmad=false", "-std=c++20", cccl.c_str(),
                                   inc.c_str()};
  const nvrtcResult r = nvrtcCompileProgram(p, static_cast<int>(opts.size()), opts.data());
  std::size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(p, log.data());
  nvrtcDestroyProgram(&p);
  return r == NVRTC_SUCCESS ? std::string() : log;
}

}  // namespace

TEST(NativeCuda, EveryElementwiseOpCompilesWithNvrtc) {
  using K = detail_expr::Kind;
  using tessera::detail::BinaryOp;
  using tessera::detail::UnaryOp;
  const std::vector<ts::DType> all = {ts::bool_, ts::u8, ts::i8, ts::u32, ts::i32, ts::u64, ts::i64, ts::f32, ts::f64};
  for (ts::DType t : all) {
    GroupBuilder b;
    const bool fl = t == ts::f32 || t == ts::f64;
    for (int u = 0; u <= static_cast<int>(UnaryOp::Not); ++u) {
      const auto op = static_cast<UnaryOp>(u);
      const bool float_only = !(op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Sign || op == UnaryOp::Floor ||
                                op == UnaryOp::Ceil || op == UnaryOp::Round || op == UnaryOp::IsNan ||
                                op == UnaryOp::IsFinite || op == UnaryOp::Not);
      if (float_only && !fl) continue;
      detail_expr e;
      e.kind = K::Unary;
      e.unary = op;
      e.t = t;
      e.result = tessera::detail::returns_bool(op) ? ts::bool_ : t;
      b.add(e, {t});
    }
    for (int o = 0; o <= static_cast<int>(BinaryOp::Xor); ++o) {
      const auto op = static_cast<BinaryOp>(o);
      detail_expr e;
      e.kind = K::Binary;
      e.binary = op;
      e.t = t;
      e.result = tessera::detail::returns_bool(op) ? ts::bool_ : t;
      b.add(e, {t, t});
      e.kind = K::BinaryScalar;
      e.scalar.is_scalar = true;
      e.scalar.f = 2.5;
      e.scalar.i = 3;
      e.scalar_first = o % 2 == 0;
      b.add(e, {t});
    }
    detail_expr sel;
    sel.kind = K::Select;
    sel.t = sel.result = t;
    b.add(sel, {ts::bool_, t, t});
    sel.kind = K::SelectScalar;
    sel.scalar.is_scalar = true;
    b.add(sel, {ts::bool_, t});
    for (ts::DType to : all) {
      detail_expr cv;
      cv.kind = K::Convert;
      cv.t = t;
      cv.result = to;
      b.add(cv, {t});
    }
    const std::string src = cpu::native_source(b.g, cpu::NativeTarget::Cuda);
    ASSERT_FALSE(src.empty()) << ts::dtype_name(t);
    EXPECT_NE(src.find("__global__ void tessera_fused"), std::string::npos);
    const std::string log = nvrtc_compile(src);
    EXPECT_TRUE(log.empty()) << ts::dtype_name(t) << ":\n" << log.substr(0, 4000);
    // The float groups have polynomials: split by default, and one kernel.
    EXPECT_EQ(src.find("tessera_fused_fix") != std::string::npos, fl) << ts::dtype_name(t);
    if (fl) {
      const cpu::CudaLoopShape one{0, false};
      const std::string log1 = nvrtc_compile(cpu::native_source(b.g, cpu::NativeTarget::Cuda, nullptr, nullptr, &one));
      EXPECT_TRUE(log1.empty()) << ts::dtype_name(t) << ", one kernel:\n" << log1.substr(0, 4000);
    }
    // The CPU target of the same group builds too.
    EXPECT_NE(cpu::native_source(b.g, cpu::NativeTarget::Cpu).find("fused_loop"), std::string::npos);
  }
}
#endif
