// Host side of the shared-math sweep (sweep.hpp): evaluating every probe on
// the host, saving and loading results, and comparing two runs probe by
// probe.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sweep.hpp"

namespace tessera::sweep {

/// Results of every probe at every input, probe-major, as the host compiler
/// of this file computes them.
inline std::vector<Result> run_all_on_host() {
  std::vector<Result> out(static_cast<std::size_t>(kProbes * kInputs));
  for (int p = 0; p < kProbes; ++p)
    for (i64 i = 0; i < kInputs; ++i) out[static_cast<std::size_t>(p * kInputs + i)] = run_probe(p, i);
  return out;
}

inline bool save(const std::string& path, const std::vector<Result>& r) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = true;
  for (const Result& e : r) ok = ok && std::fwrite(&e.bits, 8, 1, f) == 1 && std::fwrite(&e.slow, 4, 1, f) == 1;
  return std::fclose(f) == 0 && ok;
}

inline bool load(const std::string& path, std::vector<Result>& r) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  r.assign(static_cast<std::size_t>(kProbes * kInputs), Result{});
  bool ok = true;
  for (Result& e : r) ok = ok && std::fread(&e.bits, 8, 1, f) == 1 && std::fread(&e.slow, 4, 1, f) == 1;
  std::fclose(f);
  return ok;
}

inline bool is_nan(Kind k, u64 bits) {
  if (k == Kind::f32) return std::isnan(__builtin_bit_cast(float, static_cast<u32>(bits)));
  if (k == Kind::f64) return std::isnan(__builtin_bit_cast(double, bits));
  return false;
}

// Distance in units in the last place: floats ordered as integers, -0 and
// +0 at the same point.
inline u64 ulps(Kind k, u64 a, u64 b) {
  auto ordered = [k](u64 v) -> long double {
    const u64 sign = k == Kind::f32 ? 0x80000000ull : 0x8000000000000000ull;
    const long double mag = static_cast<long double>(v & (sign - 1));
    return (v & sign) ? -mag : mag;
  };
  const long double d = ordered(a) - ordered(b);
  return static_cast<u64>(d < 0 ? -d : d);
}

/// How two runs of one probe compare.
struct ProbeDiff {
  i64 differ = 0;       // elements whose bits differ (NaNs aside where allowed)
  i64 slow_differ = 0;  // of those, elements on a polynomial's slow path
  u64 max_ulps = 0;     // the largest distance among the float ones
  i64 first = -1;       // the first differing element
  u64 first_a = 0, first_b = 0;
};

/// Compares `a` (the reference: the host compiler's) with `b`. With
/// `any_nan`, two NaNs are equal whatever their bits (the GPU's NaN results
/// carry no payload, x86's do).
inline std::vector<ProbeDiff> compare(const std::vector<Result>& a, const std::vector<Result>& b, bool any_nan) {
  std::vector<ProbeDiff> out(kProbes);
  for (int p = 0; p < kProbes; ++p) {
    const Kind k = kProbeInfo[p].kind;
    ProbeDiff& d = out[p];
    for (i64 i = 0; i < kInputs; ++i) {
      const Result& x = a[static_cast<std::size_t>(p * kInputs + i)];
      const Result& y = b[static_cast<std::size_t>(p * kInputs + i)];
      if (x.bits == y.bits && x.slow == y.slow) continue;
      if (any_nan && x.slow == y.slow && is_nan(k, x.bits) && is_nan(k, y.bits)) continue;
      ++d.differ;
      if (x.slow) ++d.slow_differ;
      if (k != Kind::integer) d.max_ulps = std::max(d.max_ulps, ulps(k, x.bits, y.bits));
      if (d.first < 0) {
        d.first = i;
        d.first_a = x.bits;
        d.first_b = y.bits;
      }
    }
  }
  return out;
}

/// One line per probe that differs.
inline std::string report(const std::vector<ProbeDiff>& diffs) {
  std::string s;
  char line[256];
  for (int p = 0; p < kProbes; ++p) {
    const ProbeDiff& d = diffs[p];
    if (d.differ == 0) continue;
    std::snprintf(line, sizeof line,
                  "  %-14s %lld of %lld differ (%lld on slow paths, max %llu ulp); first at input %lld: %016llx vs "
                  "%016llx\n",
                  kProbeInfo[p].name, static_cast<long long>(d.differ), static_cast<long long>(kInputs),
                  static_cast<long long>(d.slow_differ), static_cast<unsigned long long>(d.max_ulps),
                  static_cast<long long>(d.first), static_cast<unsigned long long>(d.first_a),
                  static_cast<unsigned long long>(d.first_b));
    s += line;
  }
  return s;
}

}  // namespace tessera::sweep
