// Reduction kernels (see reduce.hpp).
#include "backend/cpu/reduce.hpp"

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/dispatch.hpp"
#include "core/nd_index.hpp"

namespace tessera::detail::cpu {

namespace {

template <class T>
T identity(ReduceOp r) {
  switch (r) {
    case ReduceOp::Sum: return T(0);
    case ReduceOp::Prod: return T(1);
    case ReduceOp::Max:
      return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    case ReduceOp::Min:
      return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    case ReduceOp::Any: return T(0);
    case ReduceOp::All: return T(1);
  }
  return T(0);
}

// Accumulator type: f32 sums accumulate in f64 locally for accuracy; the
// mesh-level combine is in the output dtype.
// bool accumulates in bytes (0 or 1), as std::vector<bool> has no data().
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, float>, double,
                               std::conditional_t<std::is_same_v<T, bool>, unsigned char, T>>;

// Which kinds run in which dtype (reduce_runs); only these are instantiated.
template <ReduceOp r, class T>
constexpr bool kRuns = (r == ReduceOp::Max || r == ReduceOp::Min) ? true
                       : (r == ReduceOp::Any || r == ReduceOp::All) ? std::is_same_v<T, bool>
                                                                    : !std::is_same_v<T, bool> && sizeof(T) >= 4;

// Walks the input in order, stepping all dims but the last with NdIndex;
// the last dim is either reduced into one value or accumulated elementwise
// into an output row.
template <ReduceOp r, class T>
void local_reduce(const T* in, const Shape& shape, const std::vector<bool>& reduced, T* out) {
  using A = Acc<T>;
  const int rank = static_cast<int>(shape.size());
  std::int64_t nout = 1, nin = 1;
  for (int d = 0; d < rank; ++d) {
    nin *= shape[d];
    if (!reduced[d]) nout *= shape[d];
  }
  std::vector<A> acc(static_cast<size_t>(nout), static_cast<A>(identity<T>(r)));
  if (nin > 0 && rank > 0) {
    std::vector<std::int64_t> ostride(rank, 0);
    std::int64_t s = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (!reduced[d]) {
        ostride[d] = s;
        s *= shape[d];
      }
    }
    const std::int64_t inner = shape[rank - 1];
    const T* p = in;
    for (NdIndex it(first_dims(shape, rank - 1), ostride); !it.done(); it.next(), p += inner) {
      const std::int64_t o = it.offset(0);
      if (reduced[rank - 1]) {
        A v = acc[o];
        std::int64_t j = 0;
        if constexpr (r == ReduceOp::Sum) {
          // Eight independent partial sums (combined in a fixed order, so
          // still deterministic) let the compiler vectorise a contiguous sum.
          A lane[8] = {};
          for (; j + 8 <= inner; j += 8)
            for (int k = 0; k < 8; ++k) lane[k] = combine1<r, A>(lane[k], static_cast<A>(p[j + k]));
          const A l01 = combine1<r, A>(lane[0], lane[1]), l23 = combine1<r, A>(lane[2], lane[3]);
          const A l45 = combine1<r, A>(lane[4], lane[5]), l67 = combine1<r, A>(lane[6], lane[7]);
          v = combine1<r, A>(v, combine1<r, A>(combine1<r, A>(l01, l23), combine1<r, A>(l45, l67)));
        }
        for (; j < inner; ++j) v = combine1<r, A>(v, static_cast<A>(p[j]));
        acc[o] = v;
      } else {
        A* row = acc.data() + o;
        for (std::int64_t j = 0; j < inner; ++j) row[j] = combine1<r, A>(row[j], static_cast<A>(p[j]));
      }
    }
  } else if (rank == 0) {
    acc[0] = combine1<r, A>(acc[0], static_cast<A>(in[0]));
  }
  for (std::int64_t i = 0; i < nout; ++i) out[i] = static_cast<T>(acc[i]);
}

// True when (v, i) should replace the current best: larger (or smaller), NaN
// first, ties to the lower index.
template <class T>
bool better(bool is_max, T v, std::int64_t i, T bv, std::int64_t bi) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool vn = std::isnan(v), bn = std::isnan(bv);
    if (vn || bn) return vn && (!bn || i < bi);
  }
  if (v == bv) return i < bi;
  return is_max ? v > bv : v < bv;
}

// True when a and b are in the same class for `better`: equal, or both NaN.
template <class T>
bool same_value(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

}  // namespace

bool reduce_runs(ReduceOp op, DType t) {
  return dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    return with_op(op, [&](auto kind) { return kRuns<decltype(kind)::value, T>; });
  });
}

void reduce(ReduceOp op, DType t, const void* in, const Shape& shape, const std::vector<bool>& reduced, void* out) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    with_op(op, [&](auto kind) {
      if constexpr (kRuns<decltype(kind)::value, T>)
        local_reduce<decltype(kind)::value, T>(static_cast<const T*>(in), shape, reduced, static_cast<T*>(out));
    });
  });
}

void arg_best(bool is_max, DType t, const void* in, const Shape& shape, int axis, std::int64_t base, void* value,
              std::int64_t* index) {
  const int rank = static_cast<int>(shape.size());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = axis + 1; d < rank; ++d) inner *= shape[d];
  const std::int64_t len = shape[axis];
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(in);
    T* v = static_cast<T*>(value);
    const T none = identity<T>(is_max ? ReduceOp::Max : ReduceOp::Min);
    // Lines run along `axis` with stride `inner`: the walk goes row by row
    // (j outer, c inner) so reads stay contiguous; each line still sees its
    // elements in index order, which is what the tie rule needs.
    for (std::int64_t a = 0; a < outer; ++a) {
      T* bv = v + a * inner;
      std::int64_t* bi = index + a * inner;
      for (std::int64_t c = 0; c < inner; ++c) bv[c] = none, bi[c] = -1;
      for (std::int64_t j = 0; j < len; ++j) {
        const T* row = p + (a * len + j) * inner;
        for (std::int64_t c = 0; c < inner; ++c)
          if (bi[c] < 0 || better(is_max, row[c], base + j, bv[c], bi[c])) bv[c] = row[c], bi[c] = base + j;
      }
    }
  });
}

void arg_candidates(DType t, const void* value, const std::int64_t* index, const void* best, std::int64_t n,
                    std::int64_t* out) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(value);
    const T* b = static_cast<const T*>(best);
    for (std::int64_t k = 0; k < n; ++k)
      out[k] = index[k] >= 0 && same_value(v[k], b[k]) ? index[k] : std::numeric_limits<std::int64_t>::max();
  });
}

}  // namespace tessera::detail::cpu
