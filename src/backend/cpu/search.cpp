// The searchsorted and median kernels (see search.hpp).
#include "backend/cpu/search.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/array_impl.hpp"
#include "core/dispatch.hpp"
#include "tessera/error.hpp"

namespace tessera::detail::cpu {

namespace {

/// Elements per chunk of converted values (fits in L1/L2).
constexpr std::int64_t kChunkElems = 8192;

// ------------------------------------------------------------ searchsorted

/// The number of elements of a[0, n) that are < x (Right: <= x), for
/// ascending a. A binary search without branches on the data (the halving
/// step compiles to a conditional move), so random values cost no
/// mispredictions.
template <bool Right, class T>
std::int64_t rank_in(const T* a, std::int64_t n, T x) {
  if (n == 0) return 0;
  const T* base = a;
  while (n > 1) {
    const std::int64_t half = n / 2;
    const bool before = Right ? !(x < base[half]) : base[half] < x;
    base = before ? base + half : base;
    n -= half;
  }
  const bool before = Right ? !(x < *base) : *base < x;
  return (base - a) + (before ? 1 : 0);
}

/// Indices of n values in the sorted sequence a[0, len), the first nn of
/// which are not NaN (NaN sorts last). For a value v that is not NaN every
/// NaN of the sequence is greater, so both searches run over a[0, nn) with
/// plain comparisons; a NaN value goes before the first NaN (left) or after
/// the last (right).
template <class T, class O>
void search_values(const T* a, std::int64_t len, std::int64_t nn, const void* values, DType vdt, std::int64_t n,
                   bool right, O* out) {
  const bool same = vdt == dtype_of<T>();
  std::unique_ptr<T[]> buf;
  if (!same) buf = std::make_unique<T[]>(static_cast<std::size_t>(std::min(n, kChunkElems)));
  for (std::int64_t b = 0; b < n; b += kChunkElems) {
    const std::int64_t c = std::min(kChunkElems, n - b);
    const T* v;
    if (same) {
      v = static_cast<const T*>(values) + b;
    } else {
      detail::convert(static_cast<const unsigned char*>(values) + b * static_cast<std::int64_t>(itemsize(vdt)), vdt,
                      buf.get(), dtype_of<T>(), c);
      v = buf.get();
    }
    for (std::int64_t e = 0; e < c; ++e) {
      const T x = v[e];
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) {
          out[b + e] = static_cast<O>(right ? len : nn);
          continue;
        }
      }
      out[b + e] = static_cast<O>(right ? rank_in<true>(a, nn, x) : rank_in<false>(a, nn, x));
    }
  }
}

// ------------------------------------------------------------------- keys

template <class T>
using KeyOf = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;

/// The order-preserving key of a value that is not NaN: negative values
/// have their bits flipped (larger magnitude, smaller key), the others get
/// the sign bit set, so unsigned key order is the values' order with
/// -0.0 < 0.0.
template <class T>
KeyOf<T> to_key(T v) {
  using K = KeyOf<T>;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  const K u = std::bit_cast<K>(v);
  return (u & sign) ? K(~u) : K(u | sign);
}

template <class T>
T from_key(KeyOf<T> k) {
  using K = KeyOf<T>;
  constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
  return std::bit_cast<T>((k & sign) ? K(k & ~sign) : K(~k));
}

/// Calls f(T{}) with T = double for f64, float for f32.
template <class F>
decltype(auto) dispatch_float(DType t, F&& f) {
  if (t == DType::f64) return f(double{});
  return f(float{});
}

/// Calls f(offset, output, len, step) for every innermost run of a block:
/// elements [offset, offset + len) belong to outputs output + i * step.
template <class F>
void for_each_row(const ReduceMap& m, F&& f) {
  if (m.size == 0) return;
  const int nd = static_cast<int>(m.extent.size());
  if (nd == 0) {
    f(std::int64_t{0}, std::int64_t{0}, std::int64_t{1}, std::int64_t{0});
    return;
  }
  const std::int64_t len = m.extent[nd - 1], step = m.out_stride[nd - 1];
  std::vector<std::int64_t> idx(static_cast<std::size_t>(nd - 1), 0);
  std::int64_t off = 0, out = 0;
  for (;;) {
    f(off, out, len, step);
    off += len;
    int d = nd - 2;
    for (; d >= 0; --d) {
      out += m.out_stride[d];
      if (++idx[d] < m.extent[d]) break;
      out -= m.out_stride[d] * m.extent[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <class T>
void fill_nan(void* p, std::int64_t n) {
  std::fill_n(static_cast<T*>(p), n, std::numeric_limits<T>::quiet_NaN());
}

template <class T>
void select_middle(const T* x, const bool* mask, const ReduceMap& m, T* lo, T* hi) {
  using K = KeyOf<T>;
  const std::int64_t O = m.outputs;
  fill_nan<T>(lo, O);
  fill_nan<T>(hi, O);
  if (O == 0) return;
  // Group the selected keys by output (a counting sort on the output index).
  std::vector<std::int64_t> start(static_cast<std::size_t>(O) + 1, 0);
  std::vector<unsigned char> has_nan(static_cast<std::size_t>(O), 0);
  for_each_row(m, [&](std::int64_t off, std::int64_t o, std::int64_t len, std::int64_t step) {
    for (std::int64_t i = 0; i < len; ++i) {
      if (mask && !mask[off + i]) continue;
      if (std::isnan(x[off + i]))
        has_nan[o + i * step] = 1;
      else
        ++start[o + i * step + 1];
    }
  });
  for (std::int64_t o = 0; o < O; ++o) start[o + 1] += start[o];
  std::vector<K> keys(static_cast<std::size_t>(start[O]));
  std::vector<std::int64_t> cur(start.begin(), start.end() - 1);
  for_each_row(m, [&](std::int64_t off, std::int64_t o, std::int64_t len, std::int64_t step) {
    for (std::int64_t i = 0; i < len; ++i) {
      if ((mask && !mask[off + i]) || std::isnan(x[off + i])) continue;
      keys[cur[o + i * step]++] = to_key(x[off + i]);
    }
  });
  for (std::int64_t o = 0; o < O; ++o) {
    const std::int64_t c = start[o + 1] - start[o];
    if (has_nan[o] || c == 0) continue;
    K* b = keys.data() + start[o];
    const std::int64_t k = (c - 1) / 2;
    std::nth_element(b, b + k, b + c);
    lo[o] = from_key<T>(b[k]);
    // Everything after position k is >= b[k]: the next rank is their minimum.
    hi[o] = c % 2 == 1 ? lo[o] : from_key<T>(*std::min_element(b + k + 1, b + c));
  }
}

}  // namespace

// ------------------------------------------------------------ searchsorted

void searchsorted(DType t, const void* seq, DType sdt, std::int64_t len, const void* values, DType vdt, std::int64_t n,
                  bool right, void* out, DType out_dt) {
  if (n == 0) return;
  // bool compares as 0 < 1 (u8 keeps that order and has a data() buffer).
  if (t == DType::bool_) t = DType::u8;
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      std::vector<T> a(static_cast<std::size_t>(len));
      detail::convert(seq, sdt, a.data(), t, len);
      std::int64_t nn = len;
      if constexpr (std::is_floating_point_v<T>)
        nn = std::find_if(a.begin(), a.end(), [](T v) { return std::isnan(v); }) - a.begin();
      if (out_dt == DType::i64)
        search_values<T>(a.data(), len, nn, values, vdt, n, right, static_cast<std::int64_t*>(out));
      else
        search_values<T>(a.data(), len, nn, values, vdt, n, right, static_cast<std::int32_t*>(out));
    }
  });
}

// -------------------------------------------------------------- reduce map

ReduceMap reduce_map(const Shape& block, const std::vector<bool>& reduced) {
  ReduceMap m;
  m.size = num_elements(block);
  std::vector<bool> kind;
  for (std::size_t d = 0; d < block.size(); ++d) {
    if (!reduced[d]) m.outputs *= block[d];
    if (block[d] == 1) continue;
    if (!m.extent.empty() && kind.back() == reduced[d]) {
      m.extent.back() *= block[d];
    } else {
      m.extent.push_back(block[d]);
      kind.push_back(reduced[d]);
    }
  }
  m.out_stride.assign(m.extent.size(), 0);
  std::int64_t s = 1;
  for (std::size_t i = m.extent.size(); i-- > 0;) {
    if (kind[i]) continue;
    m.out_stride[i] = s;
    s *= m.extent[i];
  }
  return m;
}

int key_bits(DType t) { return t == DType::f64 ? 64 : 32; }

void select_middle(DType t, const void* x, const bool* mask, const ReduceMap& m, void* lo, void* hi) {
  dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    select_middle<T>(static_cast<const T*>(x), mask, m, static_cast<T*>(lo), static_cast<T*>(hi));
  });
}

// ------------------------------------------------------------ radix select
//
// Selection s (s = 0, 1) looks for the element of rank k_s among the c
// selected non-NaN elements of an output, k_0 = (c - 1) / 2, k_1 = c / 2.
// Pass p fixes the key's digit at bits [shift, shift + bits), shift =
// key_bits - (p + 1) * bits, from the top digit down. Invariant after pass
// p, for a valid output: prefix_s holds the correct digits of the key of
// rank k_s above `shift` (lower bits zero), and rank_s is k_s minus the
// number of selected keys whose digits above `shift` are smaller than
// prefix_s's, i.e. the target's rank among the keys that share prefix_s.
// Pass p + 1 counts, per digit, the keys sharing prefix_s above the next
// shift: the target's digit is the first d whose running count exceeds
// rank_s. After the last pass (shift 0) prefix_s is the key itself.
//
// Every count is an integer sum over the devices, so every device of a
// selection advances identically and the result does not depend on how the
// elements are spread. Pass 0 also learns c (the sum of its digit counts)
// and whether any selected element is NaN (its extra slot); both middle
// elements share one histogram there, and later while their prefixes agree.

RadixSelect::RadixSelect(DType t, std::int64_t outputs, int bits)
    : t_(t),
      outputs_(outputs),
      bits_(bits),
      key_bits_(key_bits(t)),
      prefix_(static_cast<std::size_t>(2 * outputs), 0),
      rank_(static_cast<std::size_t>(2 * outputs), 0),
      valid_(static_cast<std::size_t>(outputs), 0) {}

std::int64_t RadixSelect::hist_per_output(int pass) const {
  const std::int64_t nb = std::int64_t{1} << bits_;
  return pass == 0 ? nb + 1 : 2 * nb;
}

void RadixSelect::count(int pass, const void* x, const bool* mask, const ReduceMap& m, std::int64_t* hist) const {
  const std::int64_t hpo = hist_per_output(pass), nb = std::int64_t{1} << bits_;
  const int shift = key_bits_ - (pass + 1) * bits_;
  std::fill_n(hist, outputs_ * hpo, std::int64_t{0});
  dispatch_float(t_, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    // The loops add 0 or 1 instead of branching: masks and prefix matches
    // are data-dependent coin flips a branch predictor would miss.
    if (pass == 0) {
      for_each_row(m, [&](std::int64_t off, std::int64_t o, std::int64_t len, std::int64_t step) {
        for (std::int64_t i = 0; i < len; ++i) {
          const T v = xs[off + i];
          const std::int64_t d = std::isnan(v) ? nb : static_cast<std::int64_t>(to_key(v) >> shift);
          hist[(o + i * step) * hpo + d] += mask ? static_cast<std::int64_t>(mask[off + i]) : 1;
        }
      });
      return;
    }
    // The keys each selection still counts: those sharing its prefix above
    // shift + bits. An invalid output, or a second selection sharing the
    // first one's prefix, gets a value no key reaches (keys shifted right
    // by at least one bit stay below 2^63).
    const int hs = shift + bits_;
    constexpr std::uint64_t never = ~std::uint64_t{0};
    std::vector<std::uint64_t> want(static_cast<std::size_t>(2 * outputs_), never);
    for (std::int64_t o = 0; o < outputs_; ++o) {
      if (!valid_[o]) continue;
      want[2 * o] = prefix_[2 * o] >> hs;
      if (prefix_[2 * o + 1] != prefix_[2 * o]) want[2 * o + 1] = prefix_[2 * o + 1] >> hs;
    }
    const std::uint64_t dmask = static_cast<std::uint64_t>(nb - 1);
    for_each_row(m, [&](std::int64_t off, std::int64_t o, std::int64_t len, std::int64_t step) {
      for (std::int64_t i = 0; i < len; ++i) {
        const T v = xs[off + i];
        const std::int64_t sel = (mask ? static_cast<std::int64_t>(mask[off + i]) : 1) & !std::isnan(v);
        const std::uint64_t k = to_key(v);
        const std::int64_t oo = o + i * step;
        const std::uint64_t top = k >> hs;
        const std::int64_t d = static_cast<std::int64_t>((k >> shift) & dmask);
        hist[oo * hpo + d] += sel & static_cast<std::int64_t>(top == want[2 * oo]);
        hist[oo * hpo + nb + d] += sel & static_cast<std::int64_t>(top == want[2 * oo + 1]);
      }
    });
    for (std::int64_t o = 0; o < outputs_; ++o)
      if (valid_[o] && prefix_[2 * o + 1] == prefix_[2 * o])
        std::copy_n(hist + o * hpo, nb, hist + o * hpo + nb);
  });
}

void RadixSelect::advance(int pass, const std::int64_t* hist) {
  const std::int64_t hpo = hist_per_output(pass), nb = std::int64_t{1} << bits_;
  const int shift = key_bits_ - (pass + 1) * bits_;
  // The digit holding rank r in a histogram row, and r's rank within it.
  auto pick = [&](const std::int64_t* h, std::int64_t& r) -> std::uint64_t {
    std::int64_t below = 0;
    for (std::int64_t d = 0; d < nb; ++d) {
      if (r < below + h[d]) {
        r -= below;
        return static_cast<std::uint64_t>(d);
      }
      below += h[d];
    }
    throw Error("[median] internal: the digit counts of a selection do not add up across devices");
  };
  for (std::int64_t o = 0; o < outputs_; ++o) {
    const std::int64_t* h = hist + o * hpo;
    if (pass == 0) {
      std::int64_t c = 0;
      for (std::int64_t d = 0; d < nb; ++d) c += h[d];
      valid_[o] = h[nb] == 0 && c > 0;
      if (!valid_[o]) continue;
      rank_[2 * o] = (c - 1) / 2;
      rank_[2 * o + 1] = c / 2;
      for (int s = 0; s < 2; ++s) prefix_[2 * o + s] = pick(h, rank_[2 * o + s]) << shift;
    } else if (valid_[o]) {
      for (int s = 0; s < 2; ++s) prefix_[2 * o + s] |= pick(h + s * nb, rank_[2 * o + s]) << shift;
    }
  }
}

void RadixSelect::finish(void* lo, void* hi) const {
  dispatch_float(t_, [&](auto tag) {
    using T = decltype(tag);
    using K = KeyOf<T>;
    T* l = static_cast<T*>(lo);
    T* h = static_cast<T*>(hi);
    for (std::int64_t o = 0; o < outputs_; ++o) {
      const bool ok = valid_[o] != 0;
      l[o] = ok ? from_key<T>(static_cast<K>(prefix_[2 * o])) : std::numeric_limits<T>::quiet_NaN();
      h[o] = ok ? from_key<T>(static_cast<K>(prefix_[2 * o + 1])) : std::numeric_limits<T>::quiet_NaN();
    }
  });
}

}  // namespace tessera::detail::cpu
