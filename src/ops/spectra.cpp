// Spectra: resample_accumulate and the exact accumulators
// (tessera/spectra.hpp). exact_limbs and exact_total are composites of
// elementwise ops and a reduction, so they run eagerly, under jit and inside
// shard_map bodies alike.
#include <cmath>
#include <cstdio>

#include "core/exact_limbs.hpp"
#include "core/promote.hpp"
#include "sharding/spec.hpp"
#include "spmd/exchange.hpp"
#include "tessera/ops.hpp"
#include "primitives/spectra.hpp"
#include "tessera/spectra.hpp"

namespace tessera {

using detail::msg;

namespace {

void check_bound(double max_abs, const char* op) {
  // The limbs' quanta reach 2^(P-70); keep them and the sigmas normal doubles.
  if (!(std::isfinite(max_abs) && max_abs >= 0x1p-900 && max_abs <= 0x1p900)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", max_abs);
    throw ValueError(msg(op, std::string("max_abs must be a finite bound in [2^-900, 2^900], got ") + buf));
  }
}

void check_float(const Array& a, const char* op, const char* name) {
  if (!detail::is_float(a.dtype()))
    throw DTypeError(msg(op, std::string(name) + " must be a float array, got " + detail::describe(a)));
}

/// The operands of resample_accumulate and its vjp, checked (without init):
/// flux, wave, target, segment_ids, then weights and wave_scale if given.
std::vector<Array> resample_operands(const Array& flux, const Array& wave, const Array& target,
                                     const Array& segment_ids, std::int64_t num_segments, const ResampleOptions& opt,
                                     const char* op) {
  detail::check_operand(flux, op, "flux");
  detail::check_operand(wave, op, "wave");
  detail::check_operand(target, op, "target");
  detail::check_operand(segment_ids, op, "segment_ids");
  if (opt.weights) detail::check_operand(*opt.weights, op, "weights");
  if (opt.wave_scale) detail::check_operand(*opt.wave_scale, op, "wave_scale");
  if (flux.ndim() != 2)
    throw ShapeError(msg(op, "flux must be 2-d (rows, wavelengths), got shape " + shape_str(flux.shape())));
  const std::int64_t n = flux.shape()[0], K = flux.shape()[1];
  const bool shared = wave.ndim() == 1 && wave.shape()[0] == K;
  const bool per_row = wave.ndim() == 2 && wave.shape() == flux.shape();
  if (!shared && !per_row) {
    std::string text = "wave must be (K,) or (n, K) for flux of shape ";
    text += shape_str(flux.shape());
    text += ", got shape ";
    text += shape_str(wave.shape());
    throw ShapeError(msg(op, text));
  }
  if (target.ndim() != 1 || target.size() == 0)
    throw ShapeError(msg(op, "target must be a non-empty 1-d grid, got shape " + shape_str(target.shape())));
  if (segment_ids.ndim() != 1 || segment_ids.shape()[0] != n) {
    std::string text = "segment_ids must have shape (";
    text += std::to_string(n);
    text += ",) (one per row of flux), got shape ";
    text += shape_str(segment_ids.shape());
    throw ShapeError(msg(op, text));
  }
  if (!detail::is_integer(segment_ids.dtype()))
    throw DTypeError(msg(op, "segment_ids must be integers, got " + detail::describe(segment_ids)));
  if (num_segments < 0)
    throw ValueError(msg(op, "num_segments must be >= 0, got " + std::to_string(num_segments)));
  check_float(flux, op, "flux");
  check_float(wave, op, "wave");
  check_float(target, op, "target");
  std::vector<Array> args{flux, wave, target, segment_ids};
  for (const auto* extra : {&opt.weights, &opt.wave_scale}) {
    if (!*extra) continue;
    const char* name = extra == &opt.weights ? "weights" : "wave_scale";
    const Array& a = **extra;
    if (a.ndim() != 1 || a.shape()[0] != n) {
      std::string text = name;
      text += " must have shape (";
      text += std::to_string(n);
      text += ",), got shape ";
      text += shape_str(a.shape());
      throw ShapeError(msg(op, text));
    }
    if (a.dtype() == DType::bool_) throw DTypeError(msg(op, std::string(name) + " must be numeric, got bool"));
    args.push_back(a);
  }
  return args;
}

}  // namespace

Array resample_accumulate(const Array& flux, const Array& wave, const Array& target, const Array& segment_ids,
                          std::int64_t num_segments, double max_abs, const ResampleOptions& opt,
                          std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "resample_accumulate";
  std::vector<Array> args = resample_operands(flux, wave, target, segment_ids, num_segments, opt, op);
  check_bound(max_abs, op);
  detail::checked_nbytes({3, num_segments, target.shape()[0]}, DType::f64, op);
  const bool per_row = wave.ndim() == 2;
  if (opt.init) {
    const Array& init = *opt.init;
    detail::check_operand(init, op, "init");
    const Shape want{3, num_segments, target.shape()[0]};
    if (init.shape() != want || init.dtype() != DType::f64) {
      std::string text = "init must be an exact accumulator f64 ";
      text += shape_str(want);
      text += ", got ";
      text += detail::describe(init);
      if (init.shape() == want) throw DTypeError(msg(op, text));
      throw ShapeError(msg(op, text));
    }
    // Every operand carrying the rows: a sharded one would shard them all.
    std::vector<const Array*> row_operands{&flux, &segment_ids};
    if (per_row) row_operands.push_back(&wave);
    if (opt.weights) row_operands.push_back(&*opt.weights);
    if (opt.wave_scale) row_operands.push_back(&*opt.wave_scale);
    for (const Array* rows : row_operands) {
      const auto& entries = rows->sharding().spec().entries();
      if (!entries.empty() && !entries[0].axes().empty()) {
        std::string text = "init needs the rows unsharded (inside a shard_map body, or replicated), so that it is "
                           "counted once; got ";
        text += detail::describe(*rows);
        throw ShardingError(msg(op, text));
      }
    }
    args.push_back(init);
  }
  return detail::bind1(detail::make_resample_accumulate(num_segments, max_abs, opt.weights.has_value(),
                                                        opt.wave_scale.has_value(), opt.init.has_value()),
                       std::move(args));
}

ResampleCotangents resample_accumulate_vjp(const Array& ct, const Array& flux, const Array& wave, const Array& target,
                                           const Array& segment_ids, std::int64_t num_segments,
                                           const ResampleOptions& opt, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "resample_accumulate_vjp";
  if (opt.init) throw ValueError(msg(op, "init has no cotangent to compute (it is the accumulator's cotangent itself)"));
  std::vector<Array> args = resample_operands(flux, wave, target, segment_ids, num_segments, opt, op);
  detail::check_operand(ct, op, "ct");
  const Shape want{3, num_segments, target.shape()[0]};
  if (ct.shape() != want) {
    std::string text = "ct must have the accumulator's shape ";
    text += shape_str(want);
    text += ", got ";
    text += detail::describe(ct);
    throw ShapeError(msg(op, text));
  }
  check_float(ct, op, "ct");
  args.push_back(ct.dtype() == DType::f64 ? ct : astype(ct, DType::f64, {}));
  const auto g = detail::bind(std::make_shared<detail::ResampleTranspose>(num_segments, opt.weights.has_value(),
                                                                          opt.wave_scale.has_value()),
                              std::move(args));
  // In the rows' dtypes, as vjp gives them.
  auto as = [](const Array& x, DType t) { return x.dtype() == t ? x : astype(x, t, {}); };
  ResampleCotangents r;
  r.flux = as(g[0], flux.dtype());
  std::size_t k = 1;
  if (opt.weights) r.weights = as(g[k++], opt.weights->dtype());
  if (opt.wave_scale) r.wave_scale = as(g[k++], opt.wave_scale->dtype());
  return r;
}

Array exact_limbs(const Array& x, double max_abs, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "exact_limbs";
  detail::check_operand(x, op, "x");
  check_bound(max_abs, op);
  if (x.dtype() == DType::bool_) throw DTypeError(msg(op, "x must be numeric, got bool"));
  const detail::ExactLimbs l(max_abs);
  // Each rounding is two ops, so nothing can fuse x + sigma - sigma away.
  const Array v = astype(x, DType::f64, {});
  const Array h = subtract(add(v, l.sigma[0], {}), l.sigma[0], {});
  const Array r = subtract(v, h, {}, {});
  const Array m = subtract(add(r, l.sigma[1], {}), l.sigma[1], {});
  const Array r2 = subtract(r, m, {}, {});
  const Array lo = subtract(add(r2, l.sigma[2], {}), l.sigma[2], {});
  return stack({h, m, lo}, 0, {});
}

Array exact_total(const Array& acc, DType dtype, std::source_location loc) {
  detail::CallSite site(loc);
  const char* op = "exact_total";
  detail::check_operand(acc, op, "acc");
  if (acc.ndim() < 1 || acc.shape()[0] != 3 || acc.dtype() != DType::f64)
    throw ShapeError(msg(op, "acc must be an exact accumulator f64 (3, ...), got " + detail::describe(acc)));
  const int rank = acc.ndim();
  auto limb = [&](std::int64_t i) {
    std::vector<SliceSpec> s(static_cast<std::size_t>(rank));
    s[0] = SliceSpec{i, i + 1};
    return squeeze(slice(acc, s, {}), {0}, {});
  };
  const Array v = add(add(limb(0), limb(1), {}, {}), limb(2), {}, {});
  return dtype == DType::f64 ? v : astype(v, dtype, {});
}

}  // namespace tessera
