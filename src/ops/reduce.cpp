// Reductions: a local reduce on every device, then one reduction over the
// mesh axes that shard the reduced dims (all-reduce; reduce-scatter when the
// requested output is sharded over those axes).
//
// In keepdims form the reduced dims have size 1. Device t's partial covers
// the box of the output given by its input block on the kept dims and [0, 1)
// on the reduced ones; every device of a reduction group (devices that differ
// only on the reduced mesh axes) covers the same box. The natural output
// sharding keeps the kept dims' axes and replicates over the reduced axes. A
// requested out_sharding whose blocks lie inside the partial boxes is served
// directly by the reduction (reduce-scatter); any other is reached by a
// reshard afterwards.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/nd_index.hpp"
#include "core/reduce_op.hpp"
#include "core/wrapping.hpp"
#include "ops/common.hpp"

namespace tessera {

using detail::Buffer;
using detail::combine1;
using detail::msg;
using detail::ReduceOp;

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

// Which kinds run in which dtype: sums and products in the promoted dtype
// (i32, u32, i64, u64, floats; never bool or 8-bit), any/all in bool,
// max/min in every dtype. Only these are instantiated.
template <ReduceOp r, class T>
constexpr bool kRuns = (r == ReduceOp::Max || r == ReduceOp::Min) ? true
                       : (r == ReduceOp::Any || r == ReduceOp::All) ? std::is_same_v<T, bool>
                                                                    : !std::is_same_v<T, bool> && sizeof(T) >= 4;

// Reduces a row-major block of shape `shape` over dims with reduced[d] into
// `out` (keepdims layout). Walks the input in order, stepping all dims but
// the last with NdIndex; the last dim is either summed into one value or
// accumulated elementwise into an output row.
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
    for (detail::NdIndex it(detail::first_dims(shape, rank - 1), ostride); !it.done(); it.next(), p += inner) {
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

DType result_dtype(ReduceOp r, DType in) {
  switch (r) {
    case ReduceOp::Sum: case ReduceOp::Prod: return detail::sum_dtype(in);
    case ReduceOp::Any: case ReduceOp::All: return DType::bool_;
    default: return in;
  }
}

// Drops the reduced dims of a keepdims-form result (a local view change).
Array drop_dims(const Array& k, const std::vector<int>& axes) {
  Shape shape;
  std::vector<std::vector<std::string>> dims;
  for (int d = 0; d < k.ndim(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) != axes.end()) continue;
    shape.push_back(k.shape()[d]);
    dims.push_back(k.sharding().spec()[d].axes());
  }
  return detail::wrap(shape, k.dtype(), NamedSharding(k.sharding().mesh(), detail::make_spec(dims)),
                      k.impl()->buffers);
}

// Inserts size-1 unsharded dims at `axes` into a spec for the keepdims form.
PartitionSpec keepdims_spec(const PartitionSpec& spec, int rank, const std::vector<int>& axes) {
  std::vector<std::vector<std::string>> dims;
  int src = 0;
  for (int d = 0; d < rank; ++d) {
    if (std::find(axes.begin(), axes.end(), d) != axes.end())
      dims.emplace_back();
    else
      dims.push_back(spec[src++].axes());
  }
  return detail::make_spec(dims);
}

Array reduce(ReduceOp r, const char* op, const Array& x0, const Axes& axes_in, const ReduceOptions& opt) {
  detail::check_valid(x0, op);
  const int rank = x0.ndim();
  const std::vector<int> axes = detail::normalize_axes(axes_in, rank, op);
  const DType t = result_dtype(r, x0.dtype());
  const Array x = detail::cast(x0, (r == ReduceOp::Any || r == ReduceOp::All) ? DType::bool_ : t);
  const Mesh& mesh = x.sharding().mesh();

  std::vector<bool> reduced(rank, false);
  for (int a : axes) reduced[a] = true;
  Shape kshape = x.shape();
  for (int a : axes) kshape[a] = 1;
  std::vector<std::string> mesh_axes;
  std::vector<std::vector<std::string>> kdims(rank);
  for (int d = 0; d < rank; ++d) {
    const auto& ax = x.sharding().spec()[d].axes();
    if (reduced[d])
      mesh_axes.insert(mesh_axes.end(), ax.begin(), ax.end());
    else
      kdims[d] = ax;
  }
  const NamedSharding natural(mesh, detail::make_spec(kdims));

  // The requested layout, in keepdims form.
  std::optional<NamedSharding> want;
  if (opt.out_sharding) {
    const int out_rank = opt.keepdims ? rank : rank - static_cast<int>(axes.size());
    detail::resolve_spec(mesh, *opt.out_sharding, out_rank, op);
    want = NamedSharding(mesh, opt.keepdims ? *opt.out_sharding : keepdims_spec(*opt.out_sharding, rank, axes));
  } else if (detail::has_explicit_axes(x.sharding())) {
    want = natural;  // known at once, nothing to resolve
  }

  const int n = mesh.size();
  std::vector<Buffer> partial(n);
  std::vector<std::vector<Slice>> pbox(n), obox(n);
  detail::for_each_device(mesh, [&](int pos) {
    const Shape local = detail::local_shape(x, pos);
    Shape lk = local;
    for (int a : axes) lk[a] = 1;
    Buffer b(mesh.devices()[pos].id(), static_cast<size_t>(detail::num_elements(lk)) * itemsize(t));
    detail::dispatch(t, [&](auto tag) {
      using T = decltype(tag);
      detail::with_op(r, [&](auto kind) {
        if constexpr (kRuns<decltype(kind)::value, T>)
          local_reduce<decltype(kind)::value, T>(static_cast<const T*>(detail::local_data(x, pos)), local, reduced,
                                                 static_cast<T*>(b.data()));
      });
    });
    partial[pos] = std::move(b);
  });
  bool direct = true;
  for (int pos = 0; pos < n; ++pos) {
    pbox[pos] = natural.shard_index(kshape, pos);
    obox[pos] = want ? want->shard_index(kshape, pos) : pbox[pos];
    const auto inter = detail::intersect(obox[pos], pbox[pos]);
    direct = direct && inter == obox[pos];
  }
  if (!direct) obox = pbox;
  std::vector<Buffer> out = detail::reduce_over(mesh, mesh_axes, r, t, partial, pbox, obox, op);
  Array k = detail::wrap(kshape, t, direct && want ? *want : natural, std::move(out));
  if (want && !(k.sharding() == *want)) k = detail::reshard_for(k, *want, op);
  return opt.keepdims ? k : drop_dims(k, axes);
}

}  // namespace

Array sum(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  return reduce(ReduceOp::Sum, "sum", x, axes, opt);
}
Array prod(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  return reduce(ReduceOp::Prod, "prod", x, axes, opt);
}
Array max(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  detail::check_valid(x, "max");
  for (int a : detail::normalize_axes(axes, x.ndim(), "max"))
    if (x.shape()[a] == 0)
      throw ShapeError(msg("max", "cannot reduce over axis " + std::to_string(a) + " of size 0 (no identity)"));
  return reduce(ReduceOp::Max, "max", x, axes, opt);
}
Array min(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  detail::check_valid(x, "min");
  for (int a : detail::normalize_axes(axes, x.ndim(), "min"))
    if (x.shape()[a] == 0)
      throw ShapeError(msg("min", "cannot reduce over axis " + std::to_string(a) + " of size 0 (no identity)"));
  return reduce(ReduceOp::Min, "min", x, axes, opt);
}
Array any(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  return reduce(ReduceOp::Any, "any", x, axes, opt);
}
Array all(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  return reduce(ReduceOp::All, "all", x, axes, opt);
}

Array mean(const Array& x, const Axes& axes, const ReduceOptions& opt) {
  detail::check_valid(x, "mean");
  const std::vector<int> ax = detail::normalize_axes(axes, x.ndim(), "mean");
  std::int64_t count = 1;
  for (int a : ax) count *= x.shape()[a];
  const DType t = detail::is_float(x.dtype()) ? x.dtype() : DType::f32;
  Array s = reduce(ReduceOp::Sum, "mean", detail::cast(x, t), axes, opt);
  return divide(s, static_cast<double>(count));  // 0/0 gives NaN, like jnp.mean of nothing
}

// ------------------------------------------------------------ argmax/argmin

namespace {

template <class T>
struct ValIdx {
  T v;
  std::int64_t i;
};

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

Array arg_reduce(bool is_max, const char* op, const Array& x, int axis_in, const ReduceOptions& opt) {
  detail::check_valid(x, op);
  const int rank = x.ndim();
  const int axis = detail::normalize_axis(axis_in, rank, op);
  if (x.shape()[axis] == 0)
    throw ShapeError(msg(op, "cannot take the " + std::string(is_max ? "argmax" : "argmin") + " of axis " +
                                 std::to_string(axis) + " of size 0"));
  const Mesh& mesh = x.sharding().mesh();
  Shape kshape = x.shape();
  kshape[axis] = 1;
  std::vector<std::vector<std::string>> kdims(rank);
  for (int d = 0; d < rank; ++d)
    if (d != axis) kdims[d] = x.sharding().spec()[d].axes();
  const std::vector<std::string> mesh_axes = x.sharding().spec()[axis].axes();
  const NamedSharding natural(mesh, detail::make_spec(kdims));
  const int n = mesh.size();
  std::vector<Buffer> partial(n), idx(n);
  std::vector<std::vector<Slice>> pbox(n);
  detail::dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using VI = ValIdx<T>;
    detail::for_each_device(mesh, [&](int pos) {
      const Shape local = detail::local_shape(x, pos);
      const std::int64_t base = detail::local_index(x, pos)[axis].start;
      std::int64_t outer = 1, inner = 1;
      for (int d = 0; d < axis; ++d) outer *= local[d];
      for (int d = axis + 1; d < rank; ++d) inner *= local[d];
      const std::int64_t len = local[axis];
      Buffer b(mesh.devices()[pos].id(), static_cast<size_t>(outer * inner) * sizeof(VI));
      VI* o = static_cast<VI*>(b.data());
      const T* p = static_cast<const T*>(detail::local_data(x, pos));
      for (std::int64_t a = 0; a < outer; ++a)
        for (std::int64_t c = 0; c < inner; ++c) {
          VI best{T{}, -1};
          for (std::int64_t j = 0; j < len; ++j) {
            const T v = p[(a * len + j) * inner + c];
            if (best.i < 0 || better(is_max, v, base + j, best.v, best.i)) best = {v, base + j};
          }
          o[a * inner + c] = best;
        }
      partial[pos] = std::move(b);
    });
    for (int pos = 0; pos < n; ++pos) pbox[pos] = natural.shard_index(kshape, pos);
    // Across devices the best pair is found by two reductions: the best value
    // (Max or Min, NaN winning), then the lowest index among the devices whose
    // best value equals it. That is the order `better` defines (NaN first,
    // then the value, ties to the lower index), and each device's pair is
    // already the first best of its block. A device with nothing on the axis
    // offers the worst value and no index.
    const DType dt = x.dtype();
    const ReduceOp best_op = is_max ? ReduceOp::Max : ReduceOp::Min;
    std::vector<Buffer> vals(n), cands(n);
    detail::for_each_device(mesh, [&](int pos) {
      const std::int64_t cnt = detail::num_elements(detail::box_shape(pbox[pos]));
      Buffer b(mesh.devices()[pos].id(), static_cast<size_t>(cnt) * sizeof(T));
      const VI* s = static_cast<const VI*>(partial[pos].data());
      T* v = static_cast<T*>(b.data());
      for (std::int64_t k = 0; k < cnt; ++k) v[k] = s[k].i >= 0 ? s[k].v : identity<T>(best_op);
      vals[pos] = std::move(b);
    });
    auto best = detail::reduce_over(mesh, mesh_axes, best_op, dt, vals, pbox, pbox, op);
    detail::for_each_device(mesh, [&](int pos) {
      const std::int64_t cnt = detail::num_elements(detail::box_shape(pbox[pos]));
      Buffer b(mesh.devices()[pos].id(), static_cast<size_t>(cnt) * sizeof(std::int64_t));
      const VI* s = static_cast<const VI*>(partial[pos].data());
      const T* bv = static_cast<const T*>(best[pos].data());
      auto* c = static_cast<std::int64_t*>(b.data());
      for (std::int64_t k = 0; k < cnt; ++k)
        c[k] = s[k].i >= 0 && same_value(s[k].v, bv[k]) ? s[k].i : std::numeric_limits<std::int64_t>::max();
      cands[pos] = std::move(b);
    });
    auto reduced = detail::reduce_over(mesh, mesh_axes, ReduceOp::Min, DType::i64, cands, pbox, pbox, op);
    // Keep the indices (i32, as jnp.argmax returns).
    detail::for_each_device(mesh, [&](int pos) {
      const std::int64_t cnt = detail::num_elements(detail::box_shape(pbox[pos]));
      Buffer b(mesh.devices()[pos].id(), static_cast<size_t>(cnt) * sizeof(std::int32_t));
      const auto* s = static_cast<const std::int64_t*>(reduced[pos].data());
      auto* d = static_cast<std::int32_t*>(b.data());
      for (std::int64_t k = 0; k < cnt; ++k) d[k] = static_cast<std::int32_t>(s[k]);
      idx[pos] = std::move(b);
    });
  });
  Array k = detail::wrap(kshape, DType::i32, natural, std::move(idx));
  Array out = opt.keepdims ? k : drop_dims(k, {axis});
  if (opt.out_sharding)
    out = detail::reshard_for(out, detail::resolve_spec(mesh, *opt.out_sharding, out.ndim(), op), op);
  return out;
}

}  // namespace

Array argmax(const Array& x, int axis, const ReduceOptions& opt) { return arg_reduce(true, "argmax", x, axis, opt); }
Array argmin(const Array& x, int axis, const ReduceOptions& opt) { return arg_reduce(false, "argmin", x, axis, opt); }

}  // namespace tessera
