// Native fused loops (see native.hpp): the source generator, the compiler
// driver and the caches.
#include "backend/cpu/native.hpp"

#include <dlfcn.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/hash.hpp"
#include "tessera/error.hpp"

#ifndef TESSERA_NATIVE_CXX
#define TESSERA_NATIVE_CXX "c++"
#endif

extern char** environ;

namespace tessera::cpu {

extern const char* const kNativePrelude;  // generated from kernels/scalar_math.hpp (cmake/embed_prelude.cmake)

namespace {

using detail::BinaryOp;
using detail::ElementExpr;
using detail::UnaryOp;

// ------------------------------------------------------------------ mode

std::mutex g_mode_mu;  // g_mode and g_cuda_shape
std::optional<NativeMode> g_mode;
CudaLoopShape g_cuda_shape;

// ------------------------------------------------------------- generator

// The C++ type of dtype t in the target's dialect (the fixed-width
// integers from libcu++ on CUDA).
std::string ctype(DType t, NativeTarget target) {
  const std::string ns = target == NativeTarget::Cuda ? "cuda::std::" : "std::";
  switch (t) {
    case DType::bool_: return "bool";
    case DType::u8: return ns + "uint8_t";
    case DType::i8: return ns + "int8_t";
    case DType::u32: return ns + "uint32_t";
    case DType::i32: return ns + "int32_t";
    case DType::u64: return ns + "uint64_t";
    case DType::i64: return ns + "int64_t";
    case DType::f32: return "float";
    case DType::f64: return "double";
  }
  return "float";
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }

// The call computing a unary op on `x`, as the eager kernel
// (backend/cpu/elementwise.cpp) computes it; "" when there is none. With
// `checked` false it takes the polynomials and flags an element beyond
// their range in `outside` (the CPU's loop then recomputes its tile; a GPU
// step recomputes its elements one by one); with `checked` it takes the
// slow path (kernels/libm.hpp) for such an element at once (the *_checked
// functions), as a GPU's elements one by one do. Either way an element's
// value is the eager kernel's.
std::string unary_call(UnaryOp op, DType t, const std::string& x, bool checked) {
  const std::string T = t == DType::f32 ? "float" : "double";  // (used by the float ops only)
  const bool f32 = t == DType::f32;
  switch (op) {
    case UnaryOp::Neg: return "M::neg(" + x + ")";
    case UnaryOp::Abs: return "M::abs(" + x + ")";
    case UnaryOp::Sign: return "M::sign(" + x + ")";
    case UnaryOp::Floor: return "M::floor(" + x + ")";
    case UnaryOp::Ceil: return "M::ceil(" + x + ")";
    case UnaryOp::Round: return "M::round(" + x + ")";
    case UnaryOp::IsNan: return "M::is_nan(" + x + ")";
    case UnaryOp::IsFinite: return "M::is_finite(" + x + ")";
    case UnaryOp::Not: return "M::logical_not(" + x + ")";
    default: break;
  }
  if (!is_float(t)) return "";  // the front end converts integer operands of these to f32
  switch (op) {
    case UnaryOp::Exp:
      if (f32 && checked) return "M::exp_f32_checked(" + x + ", 1.0f)";
      return f32 ? "M::exp_f32_fast(1.0f * " + x + ", outside)" : "M::exp(" + x + ")";
    case UnaryOp::Log:
      if (f32 && checked) return "M::log_f32_checked(" + x + ")";
      return f32 ? "M::log_f32_fast(" + x + ", outside)" : "M::log(" + x + ")";
    case UnaryOp::Log1p: return "M::log1p(" + x + ")";
    case UnaryOp::Expm1: return "M::expm1(" + x + ")";
    case UnaryOp::Sqrt: return "M::sqrt(" + x + ")";
    case UnaryOp::Rsqrt: return "M::rsqrt(" + x + ")";
    case UnaryOp::Sin:
      return checked ? "M::trig_checked<" + T + ", 0>(" + x + ")" : "M::trig_fast<" + T + ", 0>(" + x + ", outside)";
    case UnaryOp::Cos:
      return checked ? "M::trig_checked<" + T + ", 1>(" + x + ")" : "M::trig_fast<" + T + ", 1>(" + x + ", outside)";
    case UnaryOp::Tanh: return f32 ? "M::tanh_f32(" + x + ")" : "M::tanh(" + x + ")";
    case UnaryOp::Sigmoid:
      if (f32 && checked) return "M::sigmoid_f32_checked(" + x + ")";
      return f32 ? "M::sigmoid_f32_fast(" + x + ", outside)" : "M::sigmoid(" + x + ")";
    default: return "";
  }
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::FloorDiv: return "floordiv";
    case BinaryOp::Mod: return "mod";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Max: return "max";
    case BinaryOp::Min: return "min";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
    case BinaryOp::And: return "logical_and";
    case BinaryOp::Or: return "logical_or";
    case BinaryOp::Xor: return "logical_xor";
  }
  return "";
}

// A variable's name: a letter and a number. (Built by appending: GCC 12
// warns falsely about `"v" + std::to_string(k)`.)
std::string var(char letter, std::size_t k) {
  std::string s(1, letter);
  s += std::to_string(k);
  return s;
}

// Elements the loop takes per step, member by member: several vectors'
// worth, so that the steps of one member on different vectors are
// independent and overlap. (One element at a time, a chain of tanh is one
// long dependency per vector and runs at its latency, slower than the tile
// loop.) Measured on the 20-op tanh chain, 2^24 f32 on 2 Zen 4 cores: 65 ms
// one element at a time, 76 with 16, 50 with 32, 38-40 with 64, 128 or 256
// (the tile loop: 48-58 ms).
constexpr int kStep = 64;

// Elements a GPU thread takes per step of its grid-stride loop, one grid
// stride apart (so a warp's loads stay whole runs): their loads are issued
// together, before any result is computed. One element at a time, a thread
// has one load in flight, and an H100/H200 SM's 2048 threads then hold too
// few bytes in flight to cover memory latency at full bandwidth, the more
// so when each element computes longer. Four in general; eight when the
// inputs are of 4 bytes or less and a member computes a transcendental
// function. Measured on an H200, 2^28 f32, against the copy bandwidth, when
// each element's slow path was inlined in the step (`2*sin(x)+1` in f32:
// 48 registers, 1280 threads per SM): `2*sin(x)+1` 0.79 with four, 0.81
// with eight; `2*x+1` 0.86 with four, 0.79 with eight. (Loops with a
// polynomial are now split, below: 32 registers, 2048 threads per SM;
// bench_gpu times four and eight.)
bool transcendental(const ElementExpr& e) {
  if (e.kind == ElementExpr::Kind::Unary) {
    switch (e.unary) {
      case UnaryOp::Exp:
      case UnaryOp::Log:
      case UnaryOp::Log1p:
      case UnaryOp::Expm1:
      case UnaryOp::Sin:
      case UnaryOp::Cos:
      case UnaryOp::Tanh:
      case UnaryOp::Sigmoid: return is_float(e.t);
      default: return false;
    }
  }
  return (e.kind == ElementExpr::Kind::Binary || e.kind == ElementExpr::Kind::BinaryScalar) &&
         e.binary == BinaryOp::Pow && is_float(e.t);
}

int gpu_step(const NativeGroup& g) {
  for (DType t : g.inputs)
    if (itemsize(t) > 4) return 4;
  for (const NativeGroup::Member& m : g.members)
    if (transcendental(m.expr)) return 8;
  return 4;
}

// Builds the loop's source; scalar operands are read from f[]/i[] (not
// written into the source), so groups that differ only in their scalars
// share one compiled loop.
struct Generator {
  Generator(const NativeGroup& group, NativeTarget t, CudaLoopShape s = {}) : g(group), target(t), shape(s) {}
  const NativeGroup& g;
  NativeTarget target;
  CudaLoopShape shape;  // the CUDA target's
  std::string ctype(DType t) const { return cpu::ctype(t, target); }
  std::vector<double> f;
  std::vector<std::int64_t> i;

  // The scalar operand as a variable declared before the loop.
  // The loop function's parameters and the entry point's arguments for
  // them. The pointers are __restrict parameters: GCC honours restrict on
  // parameters, not on local variables, and without it a loop with several
  // outputs needs more run-time alias checks than it will version for.
  std::vector<std::string> params, args;

  void param(std::string type_and_name, std::string arg) {
    params.push_back(std::move(type_and_name));
    args.push_back(std::move(arg));
  }

  std::string scalar(const ElementExpr& e) {
    const std::string T = ctype(e.t);
    const bool fl = is_float(e.t);
    const std::size_t k = fl ? f.size() : i.size();
    const std::string name = var(fl ? 'f' : 'i', k);
    param("const " + T + " " + name, "static_cast<" + T + ">(" + (fl ? "f_[" : "i_[") + std::to_string(k) + "])");
    if (fl) f.push_back(e.scalar.f);
    else i.push_back(e.scalar.i);
    return name;
  }

  // Element u of a step: neighbours on the CPU (vectors), a grid stride
  // (s_) apart on a GPU.
  const char* step_index() const { return target == NativeTarget::Cuda ? "[e + u * s_]" : "[e + u]"; }
  // An input's element u in a step: on a GPU from the step's loads, made
  // first (aK_[u] = aK[e + u * s_]), so that they are all in flight
  // before any element's math, whose branches (a polynomial's range) would
  // otherwise keep the compiler from moving later loads up.
  const char* step_input() const { return target == NativeTarget::Cuda ? "_[u]" : "[e + u]"; }
  // Before a step's loop over u: on a GPU it is unrolled, so that the
  // step's values stay in registers.
  const char* step_loop() const {
    return target == NativeTarget::Cuda ? "#pragma unroll\n    for (int u = 0; u < kStep; ++u)"
                                        : "    for (int u = 0; u < kStep; ++u)";
  }

  // An expression with its operands written $vK$ (member K's value) and
  // $aK$ (input K's element), for the blocked loop or the element loop.
  std::string expand(const std::string& t, bool blocked) const {
    std::string out;
    for (size_t p = 0; p < t.size(); ++p) {
      if (t[p] != '$') {
        out += t[p];
        continue;
      }
      const size_t end = t.find('$', p + 1);
      const std::string name = t.substr(p + 1, end - p - 1);
      out += name;
      out += name[0] == 'v' ? (blocked ? "[u]" : "") : (blocked ? step_input() : "[e]");
      p = end;
    }
    return out;
  }

  std::string operator()() {
    // body: one element (e); blocked: a step of kStep elements, storing
    // each output as it is made; computed and stores: the step's values,
    // then its stores.
    // one_fast and one_stores: one element with the polynomials' fast
    // forms (flagging), then its stores.
    std::string body, blocked, computed, stores, one_fast, one_stores;
    bool flags_outside = false;  // a member's step flags elements beyond a polynomial's range
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      const std::string T = ctype(g.inputs[k]);
      param("const " + T + "* __restrict__ " + var('a', k), "static_cast<const " + T + "*>(in_[" + std::to_string(k) + "])");
    }
    for (size_t m = 0; m < g.members.size(); ++m) {
      const NativeGroup::Member& mem = g.members[m];
      const ElementExpr& e = mem.expr;
      std::vector<std::string> x;
      for (const NativeGroup::Arg& a : mem.args) {
        std::string t = "$";
        t += a.member >= 0 ? var('v', a.member) : var('a', a.input);
        t += '$';
        x.push_back(std::move(t));
      }
      std::string value, value_one;  // value_one: one element at a time, when it differs
      const std::string T = ctype(e.t);
      switch (e.kind) {
        case ElementExpr::Kind::Unary:
          if (x.size() != 1) return "";
          value = unary_call(e.unary, e.t, x[0], false);
          // A GPU's elements one by one (the tail, a step recomputed)
          // cannot go back: the slow path at once.
          if (target == NativeTarget::Cuda) value_one = unary_call(e.unary, e.t, x[0], true);
          break;
        case ElementExpr::Kind::Binary:
          if (x.size() != 2) return "";
          value = "M::Ops<" + T + ">::" + binary_name(e.binary) + "(" + x[0] + ", " + x[1] + ")";
          break;
        case ElementExpr::Kind::BinaryScalar: {
          if (x.size() != 1) return "";
          const std::string s = scalar(e);
          value = "M::Ops<" + T + ">::" + binary_name(e.binary) + "(" + (e.scalar_first ? s + ", " + x[0] : x[0] + ", " + s) + ")";
          break;
        }
        case ElementExpr::Kind::Select:
          if (x.size() != 3) return "";
          value = "(" + x[0] + " ? " + x[1] + " : " + x[2] + ")";
          break;
        case ElementExpr::Kind::SelectScalar: {
          if (x.size() != 2) return "";
          const std::string s = scalar(e);
          value = "(" + x[0] + " ? " + (e.scalar_first ? s + " : " + x[1] : x[1] + " : " + s) + ")";
          break;
        }
        case ElementExpr::Kind::Convert:
          if (x.size() != 1) return "";
          value = e.t == e.result ? x[0] : "tessera::detail::convert_one<" + ctype(e.result) + ">(" + x[0] + ")";
          // Integer to float plus +0, which changes no value a conversion
          // gives: under -fno-trapping-math GCC folds float(int(x)) into
          // trunc(x), which keeps the sign of -0 where the integer has none.
          if (!is_float(e.t) && is_float(e.result)) value = "(" + value + " + " + ctype(e.result) + "(0))";
          break;
      }
      if (value.empty()) return "";
      if (value_one.empty()) value_one = value;
      flags_outside = flags_outside || value.find("outside") != std::string::npos;
      const std::string R = ctype(e.result), v = var('v', m);
      body += "    const " + R + " " + v + " = " + expand(value_one, false) + ";\n";
      one_fast += "    const " + R + " " + v + " = " + expand(value, false) + ";\n";
      const std::string make = "    " + R + " " + v + "[kStep];\n" + step_loop() + " {\n      " + v + "[u] = " +
                               expand(value, true) + ";\n";
      blocked += make;
      computed += make + "    }\n";
      if (mem.output >= 0) {
        const std::string o = var('o', mem.output);
        param(R + "* __restrict__ " + o, "static_cast<" + R + "*>(out_[" + std::to_string(mem.output) + "])");
        body += "    " + o + "[e] = " + v + ";\n";
        one_stores += "    " + o + "[e] = " + v + ";\n";
        const std::string store = o + step_index() + " = " + v + "[u];\n";
        blocked += "      " + store;
        stores += std::string(step_loop()) + " " + store;
      }
      blocked += "    }\n";
    }
    std::string src = kNativePrelude;
    src += "\n// ---- the fused loop\nnamespace M = tessera::detail::math;\n";
    if (target == NativeTarget::Cuda) {
      // Grid-stride. The operands come by value in one struct (kernel
      // parameters: no arrays of pointers to upload per launch).
      const CudaArgsLayout lay = cuda_args_layout(g.inputs.size(), static_cast<std::size_t>(g.num_outputs), f.size(),
                                                  i.size());
      if (lay.words * 8 > kCudaMaxArgBytes) return "";
      src += "struct tessera_fused_args {\n  const void* in[" + std::to_string(lay.in) + "];\n  void* out[" +
             std::to_string(lay.out) + "];\n  double f[" + std::to_string(lay.f) + "];\n  long long i[" +
             std::to_string(lay.i) + "];\n};\n";
      const bool split = flags_outside && shape.split;
      if (split)
        src += "__device__ unsigned tessera_fix_[" + std::to_string(kCudaFixSlots) +
               "] = {};\n__device__ unsigned tessera_fix_seen_[" + std::to_string(kCudaFixSlots) + "] = {};\n";
      // A kernel's head: its operands from the struct, the step, the
      // thread's first element.
      auto head = [&](const std::string& name, const std::string& extra, const std::string& gate) {
        std::string h = "extern \"C\" __global__ void " + name + "(const tessera_fused_args args_, long long n, int slot_" +
                        extra + ") {\n" + gate +
                        "  const void* const* in_ = args_.in;\n  void* const* out_ = args_.out;\n"
                        "  const double* f_ = args_.f;\n  const long long* i_ = args_.i;\n";
        for (size_t k = 0; k < params.size(); ++k) h += "  " + params[k] + " = " + args[k] + ";\n";
        h += "  (void)in_; (void)out_; (void)f_; (void)i_; (void)slot_;\n";
        // gpu_step elements a grid stride apart per step (its loads
        // first), then the rest one by one.
        h += "  constexpr int kStep = " + std::to_string(shape.step > 0 ? shape.step : gpu_step(g)) + ";\n";
        h += "  const long long s_ = static_cast<long long>(gridDim.x) * blockDim.x;\n";
        h += "  long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;\n";
        return h;
      };
      std::string loads;
      for (size_t k = 0; k < g.inputs.size(); ++k) {
        const std::string a = var('a', k);
        loads += "    " + ctype(g.inputs[k]) + " " + a + "_[kStep];\n" + step_loop() + " " + a + "_[u] = " + a +
                 "[e + u * s_];\n";
      }
      if (!flags_outside) {
        src += head("tessera_fused", "", "");
        src += "  for (; e + (kStep - 1) * s_ < n; e += kStep * s_) {\n" + loads + blocked + "  }\n";
        src += "  for (; e < n; e += s_) {\n" + body + "  }\n}\n";
        return src;
      }
      // A step with a polynomial (sin, exp, ...) takes it for every
      // element and flags those beyond its range, as the CPU's loop does.
      // Where one is flagged (rare), nothing of the step has been stored
      // yet, and its elements are computed again one by one with the slow
      // path at once, from memory (an element reads its own index before
      // writing it, so an output that is its input is fine). So the slow
      // path, whose f64 reduction is long, is in the loop once rather than
      // kStep times, out of the common path's way.
      const std::string full_loop =
          "  for (; e + (kStep - 1) * s_ < n; e += kStep * s_) {\n" + loads + "    unsigned outside = 0;\n" +
          computed +
          "    if (outside != 0) {\n      const long long step_ = e;\n#pragma unroll 1\n"
          "      for (int u = 0; u < kStep; ++u) {\n        const long long e = step_ + u * s_;\n" +
          body + "      }\n      continue;\n    }\n" + stores + "  }\n" + "  for (; e < n; e += s_) {\n" + body + "  }\n";
      if (!split) {
        src += head("tessera_fused", "", "") + full_loop + "}\n";
        return src;
      }
      // Split: even once in the loop, the slow path's registers are the
      // kernel's (a kernel has the registers of its largest path), and
      // they leave fewer threads per SM to keep memory busy (2*sin(x)+1 in
      // f32: 46 registers with it, 32 without). So tessera_fused has no
      // slow path: a step (or tail element) with a flagged element stores
      // nothing and marks the device's slot. tessera_fused_fix, launched
      // after it on the same stream, returns at once unless the slot is
      // marked; then it is the loop above, over everything (the inputs are
      // intact: the caller launches the pair only where no output is an
      // input, and otherwise the fix alone with force_), and its last
      // thread to finish clears the slot for the next launch. Every thread
      // reads the mark before it counts itself done, so the last one
      // clears it after all have read it. The values are the same bits
      // either way: the fast and checked forms agree where a step is not
      // flagged.
      const std::string mark = "    if (outside != 0) {\n      tessera_fix_[slot_] = 1u;\n      continue;\n    }\n";
      src += head("tessera_fused", "", "");
      src += "  for (; e + (kStep - 1) * s_ < n; e += kStep * s_) {\n" + loads + "    unsigned outside = 0;\n" +
             computed + mark + stores + "  }\n";
      src += "  for (; e < n; e += s_) {\n    unsigned outside = 0;\n" + one_fast + mark + one_stores + "  }\n}\n";
      src += head("tessera_fused_fix", ", int force_", "  if (force_ == 0 && tessera_fix_[slot_] == 0u) return;\n") +
             full_loop +
             "  if (force_ == 0) {\n    __threadfence();\n"
             "    if (atomicAdd(&tessera_fix_seen_[slot_], 1u) == gridDim.x * blockDim.x - 1u) {\n"
             "      tessera_fix_seen_[slot_] = 0u;\n      tessera_fix_[slot_] = 0u;\n    }\n  }\n}\n";
      return src;
    }
    src += "constexpr int kStep = " + std::to_string(kStep) + ";\n\n";
    src += "static __attribute__((noinline)) unsigned fused_loop(";
    for (const std::string& p : params) src += p + ", ";
    src += "std::int64_t n) {\n  std::uint32_t outside = 0;\n  std::int64_t e = 0;\n";
    src += "  for (; e + kStep <= n; e += kStep) {\n" + blocked + "  }\n";
    src += "  for (; e < n; ++e) {\n" + body + "  }\n  return outside;\n}\n\n";
    src +=
        "extern \"C\" __attribute__((visibility(\"default\"))) unsigned tessera_fused(const void* const* in_, "
        "void* const* out_, const double* f_, const std::int64_t* i_, std::int64_t n) {\n"
        "  (void)in_; (void)out_; (void)f_; (void)i_;\n  return fused_loop(";
    for (const std::string& a : args) src += a + ", ";
    src += "n);\n"
        "}\n";
    return src;
  }
};

// ---------------------------------------------------------------- caches

std::mutex g_mu;  // the caches and the counters below
std::unordered_map<std::string, NativeKernel::Fn> g_loaded;  // key -> loop
std::unordered_map<std::string, bool> g_failed;               // keys that did not build
NativeStats g_stats;
std::atomic<std::int64_t> g_redone{0};

const std::vector<std::string>& compile_flags() {
  static const std::vector<std::string> flags = {"-std=c++20", "-O3", "-march=native", "-fno-trapping-math",
                                                 "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared",
                                                 "-fvisibility=hidden", "-w"};
  return flags;
}

std::string compiler() {
  if (const char* env = std::getenv("TESSERA_CXX"); env && *env) return env;
  // The compiler that built the library, where it still is; else the PATH's.
  if (access(TESSERA_NATIVE_CXX, X_OK) == 0) return TESSERA_NATIVE_CXX;
  return "c++";
}

// What -march=native means here: the CPU's model line (a shared home
// directory may be read from machines with other CPUs).
const std::string& cpu_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) return line;
    return std::string("unknown cpu");
  }();
  return id;
}

bool make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The disk cache's folder, created on first use; a private temporary one
// when none of the candidates can be made.
const std::string& cache_dir() {
  static const std::string dir = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TESSERA_KERNEL_CACHE"); env && *env) candidates.push_back(env);
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
      candidates.push_back(std::string(xdg) + "/tessera/kernels");
    if (const char* home = std::getenv("HOME"); home && *home)
      candidates.push_back(std::string(home) + "/.cache/tessera/kernels");
    for (const std::string& c : candidates)
      if (make_dirs(c)) return c;
    char tmpl[] = "/tmp/tessera-kernels-XXXXXX";
    if (const char* d = mkdtemp(tmpl)) return std::string(d);
    return std::string();
  }();
  return dir;
}

NativeKernel::Fn load(const std::string& so) {
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  // Kept loaded for the life of the process: compiled programs hold its loop.
  return reinterpret_cast<NativeKernel::Fn>(dlsym(h, "tessera_fused"));
}

std::string read_head(const std::string& path, int max_lines) {
  std::ifstream in(path);
  std::string line, out;
  for (int k = 0; k < max_lines && std::getline(in, line); ++k) out += line + "\n";
  return out;
}

// Runs the compiler on `cpp` into `so`; the message on failure.
std::optional<std::string> run_compiler(const std::string& cpp, const std::string& so, const std::string& log) {
  const std::string cxx = compiler();
  std::vector<std::string> args = {cxx};
  for (const auto& f : compile_flags()) args.push_back(f);
  args.insert(args.end(), {"-o", so, cpp});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, cxx.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return "cannot run the compiler '" + cxx + "': " + std::strerror(rc);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return "waiting for the compiler '" + cxx + "' failed: " + std::strerror(errno);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::nullopt;
  return "'" + cxx + "' failed on " + cpp + ":\n" + read_head(log, 20);
}

// Loads or builds the loop of `src`; nullptr when it cannot be built.
// Called with g_mu held.
NativeKernel::Fn build(const std::string& src, const std::string& key) {
  if (auto it = g_loaded.find(key); it != g_loaded.end()) {
    ++g_stats.reused;
    return it->second;
  }
  if (g_failed.count(key)) return nullptr;
  const std::string& dir = cache_dir();
  auto fail = [&](std::string why) -> NativeKernel::Fn {
    ++g_stats.failed;
    g_stats.last_error = std::move(why);
    g_failed[key] = true;
    return nullptr;
  };
  if (dir.empty()) return fail("no folder for compiled kernels could be made");
  const std::string so = dir + "/" + key + ".so";
  if (access(so.c_str(), R_OK) == 0) {
    if (NativeKernel::Fn fn = load(so)) {
      ++g_stats.loaded;
      return g_loaded[key] = fn;
    }
  }
  // Built under names of this process, then renamed into place: another
  // process building the same kernel at once never sees a partial file.
  const std::string tag = "." + std::to_string(getpid());
  const std::string cpp = dir + "/" + key + tag + ".cpp", tmp = dir + "/" + key + tag + ".so",
                    log = dir + "/" + key + tag + ".log";
  {
    std::ofstream out(cpp);
    out << src;
    if (!out) return fail("cannot write " + cpp);
  }
  if (auto err = run_compiler(cpp, tmp, log)) {
    for (const std::string& f : {tmp, cpp, log}) std::remove(f.c_str());
    return fail(*err);
  }
  std::remove(log.c_str());
  std::rename(cpp.c_str(), (dir + "/" + key + ".cpp").c_str());  // kept beside the object, for reading
  if (std::rename(tmp.c_str(), so.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail("cannot rename the compiled kernel into " + so);
  }
  NativeKernel::Fn fn = load(so);
  if (!fn) return fail("cannot load " + so + ": " + (dlerror() ? dlerror() : "no tessera_fused"));
  ++g_stats.compiled;
  return g_loaded[key] = fn;
}

}  // namespace

NativeMode parse_native_mode(const char* value) {
  if (!value || !*value || std::strcmp(value, "auto") == 0) return NativeMode::Auto;
  if (std::strcmp(value, "always") == 0) return NativeMode::Always;
  if (std::strcmp(value, "off") == 0) return NativeMode::Off;
  throw Error(std::string("[jit] TESSERA_NATIVE_KERNELS must be auto, always or off, got '") + value + "'");
}

NativeMode native_mode() {
  std::lock_guard<std::mutex> lock(g_mode_mu);
  if (!g_mode) g_mode = parse_native_mode(std::getenv("TESSERA_NATIVE_KERNELS"));
  return *g_mode;
}

void set_native_mode(NativeMode mode) {
  std::lock_guard<std::mutex> lock(g_mode_mu);
  g_mode = mode;
}

std::int64_t native_min_elements() { return std::int64_t(1) << 16; }

void set_cuda_loop_shape(CudaLoopShape shape) {
  if (shape.step < 0 || shape.step > 32)
    throw ValueError("[set_cuda_loop_shape] expected a step of 0 (the generator's choice) to 32 elements, got " +
                     std::to_string(shape.step));
  std::lock_guard<std::mutex> lock(g_mode_mu);
  g_cuda_shape = shape;
}

int cuda_fix_slot(int device_id, const char* op) {
  static std::mutex mu;
  static std::unordered_map<int, int> slots;  // Tessera device -> its slot
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = slots.find(device_id); it != slots.end()) return it->second;
  if (slots.size() >= static_cast<std::size_t>(kCudaFixSlots))
    throw DeviceError(std::string("[") + op + "] fused GPU loops run on at most " + std::to_string(kCudaFixSlots) +
                      " devices of a process; device " + std::to_string(device_id) + " would be one more");
  const int slot = static_cast<int>(slots.size());
  slots.emplace(device_id, slot);
  return slot;
}

CudaLoopShape cuda_loop_shape() {
  std::lock_guard<std::mutex> lock(g_mode_mu);
  return g_cuda_shape;
}

std::string native_source(const NativeGroup& g, NativeTarget target, std::vector<double>* f,
                          std::vector<std::int64_t>* i, const CudaLoopShape* shape) {
  Generator gen(g, target, shape ? *shape : cuda_loop_shape());
  std::string src = gen();
  if (f) *f = gen.f;
  if (i) *i = gen.i;
  return src;
}

const std::string& kernel_cache_dir() { return cache_dir(); }

std::shared_ptr<const NativeKernel> native_kernel(const NativeGroup& g) {
  Generator gen(g, NativeTarget::Cpu);
  const std::string src = gen();
  if (src.empty()) return nullptr;
  std::string id = src + "\n// " + compiler();
  for (const auto& f : compile_flags()) id += " " + f;
  id += "\n// " + cpu_id();
  const std::string key = detail::fnv1a_hex(id);
  std::lock_guard<std::mutex> lock(g_mu);
  NativeKernel::Fn fn = build(src, key);
  if (!fn) return nullptr;
  auto k = std::make_shared<NativeKernel>();
  k->fn = fn;
  k->f = std::move(gen.f);
  k->i = std::move(gen.i);
  k->key = key;
  return k;
}

NativeStats native_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  NativeStats s = g_stats;
  s.tiles_redone = g_redone.load();
  return s;
}

void note_tile_redone() { g_redone.fetch_add(1, std::memory_order_relaxed); }

void forget_native_kernels() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_loaded.clear();
  g_failed.clear();
}

}  // namespace tessera::cpu
