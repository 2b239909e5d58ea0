// searchsorted and the median's radix selection on CUDA GPUs (search.hpp).
//
// searchsorted: one thread per value runs the CPU's branch-free binary
// search (backend/cpu/search.cpp, rank_in) over the sequence converted to
// the comparison dtype; the sequence's first NaN (where the searches stop)
// is an atomic minimum of indices, an integer, so its order does not matter.
//
// The median: cpu::RadixSelect's passes, with the same keys and the same
// histograms. count() adds each element's 0 or 1 into its output's digit
// with an integer atomic (sums of integers: the counts are exact whatever
// the order); advance() and finish() run one thread per output over the
// summed histogram, as the CPU's loops do per output. Selections held whole
// by one device run the same passes without the sum across devices: they
// find the same keys as the CPU's nth_element (the elements of the middle
// ranks), so the values are bitwise the CPU's.
#include "kernels/convert.hpp"  // first: see launch.cuh
#include "kernels/portable.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cuda/atomics.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/search.hpp"
#include "backend/cuda/load_as.cuh"
#include "core/dispatch.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;
using std::uint64_t;

using detail::dispatch;

// ------------------------------------------------------------ searchsorted

// cpu's rank_in: the number of elements of a[0, n) that are < x (right:
// <= x), the same halving steps.
template <class T>
TESSERA_HD int64_t rank_in(const T* a, int64_t n, T x, bool right) {
  if (n == 0) return 0;
  const T* base = a;
  while (n > 1) {
    const int64_t half = n / 2;
    const bool before = right ? !(x < base[half]) : base[half] < x;
    base = before ? base + half : base;
    n -= half;
  }
  const bool before = right ? !(x < *base) : *base < x;
  return (base - a) + (before ? 1 : 0);
}

template <class T>
struct FirstNanKernel {
  const T* a;
  int64_t* nn;
  TESSERA_HD void operator()(int64_t i) const {
    if (detail::lm::isnan(a[i])) atomic_min(nn, i);
  }
};

template <class T, class O>
struct SearchKernel {
  const T* a;
  int64_t len;
  const int64_t* nn;  // null: no NaN possible (integers)
  const void* values;
  DType vdt;
  bool right;
  O* out;
  TESSERA_HD void operator()(int64_t i) const {
    const T x = load_as<T>(values, vdt, i);
    int64_t n = len;
    if constexpr (std::is_floating_point_v<T>) {
      n = *nn;
      if (detail::lm::isnan(x)) {
        out[i] = static_cast<O>(right ? len : n);
        return;
      }
    }
    out[i] = static_cast<O>(rank_in(a, n, x, right));
  }
};

std::size_t round8(std::size_t b) { return (b + 7) / 8 * 8; }

// ------------------------------------------------------------------ keys

template <class T>
using KeyOf = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;

// cpu's to_key / from_key: unsigned key order is the values' order.
template <class T>
TESSERA_HD KeyOf<T> to_key(T v) {
  using K = KeyOf<T>;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  K u;
  memcpy(&u, &v, sizeof u);
  return (u & sign) ? K(~u) : K(u | sign);
}

template <class T>
TESSERA_HD T from_key(KeyOf<T> k) {
  using K = KeyOf<T>;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  const K u = (k & sign) ? K(k & ~sign) : K(~k);
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}

// std::numeric_limits<T>::quiet_NaN()'s bits.
template <class T>
TESSERA_HD T quiet_nan() {
  const KeyOf<T> bits = sizeof(T) == 4 ? KeyOf<T>(0x7fc00000u) : KeyOf<T>(0x7ff8000000000000ull);
  T v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

// The output of element i of a block (row-major over the walk's extents).
TESSERA_HD inline int64_t output_of(const MedianWalk& w, int64_t i) {
  int64_t out = 0;
  for (int d = w.nd - 1; d >= 0; --d) {
    const int64_t q = i / w.extent[d];
    out += (i - q * w.extent[d]) * w.out_stride[d];
    i = q;
  }
  return out;
}

int key_bits(DType t) { return t == DType::f64 ? 64 : 32; }

int64_t hist_per_output(int bits, int pass) {
  const int64_t nb = int64_t{1} << bits;
  return pass == 0 ? nb + 1 : 2 * nb;
}

struct ZeroKernel {
  int64_t* p;
  TESSERA_HD void operator()(int64_t i) const { p[i] = 0; }
};

// Pass 0: every selected element's top digit (NaN: slot nb).
template <class T>
struct Count0Kernel {
  MedianWalk w;
  const T* x;
  const bool* mask;
  int shift;
  int64_t hpo, nb;
  int64_t* hist;
  TESSERA_HD void operator()(int64_t i) const {
    const int64_t add = mask ? static_cast<int64_t>(mask[i]) : 1;
    if (add == 0) return;
    const T v = x[i];
    const int64_t d = detail::lm::isnan(v) ? nb : static_cast<int64_t>(to_key(v) >> shift);
    atomic_add(&hist[output_of(w, i) * hpo + d], add);
  }
};

// Later passes: the digit below each selection's prefix, counted for the
// keys sharing it (cpu RadixSelect::count's `want`: an invalid output, or a
// second selection sharing the first one's prefix, matches no key).
template <class T>
struct CountKernel {
  MedianWalk w;
  const T* x;
  const bool* mask;
  MedianState s;
  int shift, hs;
  int64_t hpo, nb;
  int64_t* hist;
  TESSERA_HD void operator()(int64_t i) const {
    const T v = x[i];
    const int64_t sel = (mask ? static_cast<int64_t>(mask[i]) : 1) & !detail::lm::isnan(v);
    if (sel == 0) return;
    const int64_t oo = output_of(w, i);
    if (!s.valid[oo]) return;
    const uint64_t k = to_key(v);
    const uint64_t top = k >> hs;
    const int64_t d = static_cast<int64_t>((k >> shift) & static_cast<uint64_t>(nb - 1));
    const uint64_t p0 = s.prefix[2 * oo], p1 = s.prefix[2 * oo + 1];
    if (top == (p0 >> hs)) atomic_add(&hist[oo * hpo + d], 1);
    if (p1 != p0 && top == (p1 >> hs)) atomic_add(&hist[oo * hpo + nb + d], 1);
  }
};

// After counting: a second selection sharing the first one's prefix gets
// the first one's counts.
struct ShareKernel {
  MedianState s;
  int64_t hpo, nb;
  int64_t* hist;
  TESSERA_HD void operator()(int64_t o) const {
    if (!s.valid[o] || s.prefix[2 * o + 1] != s.prefix[2 * o]) return;
    for (int64_t d = 0; d < nb; ++d) hist[o * hpo + nb + d] = hist[o * hpo + d];
  }
};

// The digit holding rank r in a histogram row, and r's rank within it;
// false when the counts do not reach r.
TESSERA_HD inline bool pick(const int64_t* h, int64_t nb, int64_t& r, uint64_t& digit) {
  int64_t below = 0;
  for (int64_t d = 0; d < nb; ++d) {
    if (r < below + h[d]) {
      r -= below;
      digit = static_cast<uint64_t>(d);
      return true;
    }
    below += h[d];
  }
  return false;
}

struct AdvanceKernel {
  MedianState s;
  int pass, shift;
  int64_t hpo, nb;
  const int64_t* hist;
  TESSERA_HD void operator()(int64_t o) const {
    const int64_t* h = hist + o * hpo;
    uint64_t digit = 0;
    if (pass == 0) {
      int64_t c = 0;
      for (int64_t d = 0; d < nb; ++d) c += h[d];
      s.valid[o] = h[nb] == 0 && c > 0;
      if (!s.valid[o]) return;
      s.rank[2 * o] = (c - 1) / 2;
      s.rank[2 * o + 1] = c / 2;
      for (int k = 0; k < 2; ++k) {
        if (!pick(h, nb, s.rank[2 * o + k], digit)) *s.error = 1;
        s.prefix[2 * o + k] = digit << shift;
      }
    } else if (s.valid[o]) {
      for (int k = 0; k < 2; ++k) {
        if (!pick(h + k * nb, nb, s.rank[2 * o + k], digit)) *s.error = 1;
        s.prefix[2 * o + k] |= digit << shift;
      }
    }
  }
};

template <class T>
struct FinishKernel {
  MedianState s;
  T* lo;
  T* hi;
  TESSERA_HD void operator()(int64_t o) const {
    using K = KeyOf<T>;
    const bool ok = s.valid[o] != 0;
    lo[o] = ok ? from_key<T>(static_cast<K>(s.prefix[2 * o])) : quiet_nan<T>();
    hi[o] = ok ? from_key<T>(static_cast<K>(s.prefix[2 * o + 1])) : quiet_nan<T>();
  }
};

struct ResetKernel {
  MedianState s;
  TESSERA_HD void operator()(int64_t o) const {
    s.prefix[2 * o] = s.prefix[2 * o + 1] = 0;
    s.rank[2 * o] = s.rank[2 * o + 1] = 0;
    s.valid[o] = 0;
    if (o == 0) *s.error = 0;
  }
};

template <class F>
void dispatch_float(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  return f(float{});
}

}  // namespace

// ------------------------------------------------------------ searchsorted

std::size_t searchsorted_scratch(DType t, std::int64_t len) {
  return round8(static_cast<std::size_t>(len) * itemsize(t == DType::bool_ ? DType::u8 : t)) + 8;
}

void searchsorted(DType t, const void* seq, DType sdt, std::int64_t len, const void* values, DType vdt, std::int64_t n,
                  bool right, void* out, DType out_dt, void* scratch) {
  if (n == 0) return;
  // bool compares as 0 < 1 (u8 keeps that order).
  if (t == DType::bool_) t = DType::u8;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      T* a = static_cast<T*>(scratch);
      convert(seq, sdt, a, t, len);
      int64_t* nn = reinterpret_cast<int64_t*>(static_cast<unsigned char*>(scratch) +
                                               round8(static_cast<std::size_t>(len) * sizeof(T)));
      if constexpr (std::is_floating_point_v<T>) {
        const int64_t first = len;
        fill(DType::i64, nn, 1, &first);
        for_each("searchsorted", len, FirstNanKernel<T>{a, nn});
      }
      auto go = [&](auto otag) {
        using O = decltype(otag);
        for_each("searchsorted", n, SearchKernel<T, O>{a, len, nn, values, vdt, right, static_cast<O*>(out)});
      };
      if (out_dt == DType::i64)
        go(int64_t{});
      else
        go(std::int32_t{});
    }
  });
}

// ---------------------------------------------------------------- median

void median_reset(const MedianState& s, std::int64_t outputs) {
  for_each("median", outputs > 0 ? outputs : 1, ResetKernel{s});
}

void median_count(DType t, int bits, int pass, const MedianWalk& w, const void* x, const bool* mask,
                  const MedianState& s, std::int64_t* hist) {
  const int64_t hpo = hist_per_output(bits, pass), nb = int64_t{1} << bits;
  const int shift = key_bits(t) - (pass + 1) * bits;
  for_each("median", w.outputs * hpo, ZeroKernel{hist});
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    if (pass == 0) {
      for_each("median", w.size, Count0Kernel<T>{w, xs, mask, shift, hpo, nb, hist});
      return;
    }
    for_each("median", w.size, CountKernel<T>{w, xs, mask, s, shift, shift + bits, hpo, nb, hist});
    for_each("median", w.outputs, ShareKernel{s, hpo, nb, hist});
  });
}

void median_advance(DType t, int bits, int pass, std::int64_t outputs, const std::int64_t* hist, const MedianState& s) {
  const int64_t hpo = hist_per_output(bits, pass), nb = int64_t{1} << bits;
  const int shift = key_bits(t) - (pass + 1) * bits;
  for_each("median", outputs, AdvanceKernel{s, pass, shift, hpo, nb, hist});
}

void median_finish(DType t, std::int64_t outputs, const MedianState& s, void* lo, void* hi) {
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    for_each("median", outputs, FinishKernel<T>{s, static_cast<T*>(lo), static_cast<T*>(hi)});
  });
}

}  // namespace tessera::cuda
