// Stencil and scan primitives: diff, cumsum, convolve, convolve2d, gradient,
// interp.
//
// Each primitive is its parts, one per layer:
//   - here and in stencil.cpp: the class, its types (infer), its sharding
//     rule and its parameters;
//   - backend/cpu/eval_stencil.cpp: the per-block kernel calls (eval_cpu,
//     and cumsum's two scan passes); backend/cuda/eval_stencil.cpp the same
//     on CUDA devices (eval_cuda and the *_cuda variants);
//   - transforms/rules/stencil.cpp: batching, JVP and transposition rules.
// The partitioning is the engine's (spmd/engine.cpp), read from the rule:
// diff, convolve, convolve2d and gradient have Halo factors (each device
// reads its block widened by the rows around it, its neighbours' edges
// received), cumsum a scanned Halo factor (each device starts its block
// from the carried totals of the parts before it). Their results keep x's
// layout (keeps_layout_of). interp is elementwise in x with its tables
// whole on every device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/lines.hpp"
#include "core/promote.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// JAX's promote_dtypes_inexact: integer and bool results become f32.
inline DType inexact(DType t) { return is_float(t) ? t : DType::f32; }

/// The n-th difference along `axis` (n >= 1) of the sequence prepend | x |
/// append. Operands: x, then prepend and append when present, all of the
/// result dtype; a rank-0 prepend or append is one row.
class Diff final : public Primitive {
 public:
  Diff(int n, int axis, bool prepend, bool append) : n_(n), axis_(axis), pre_(prepend), app_(append) {}
  std::string_view name() const override { return "diff"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  int keeps_layout_of() const override { return 0; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  bool reads_halo_pieces() const override { return true; }
  void eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_EVAL_CUDA;
  void eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

  /// The rows of prepend | x | append that the result block `res` (not
  /// empty) reads, for every backend's eval_halo: see primitives/stencil.cpp.
  std::vector<RowRun> read_runs(const LocalArgs& in, const std::vector<LocalArgs>& pieces, const LocalOut& res) const;

 private:
  // Operand indices of prepend and append (-1 when absent).
  int prepend_index() const { return pre_ ? 1 : -1; }
  int append_index() const { return app_ ? (pre_ ? 2 : 1) : -1; }
  // Rows operand i adds to the sequence (0 when absent, 1 for a scalar).
  std::int64_t rows(std::span<const AbstractArray> in, int i) const {
    if (i < 0) return 0;
    return in[i].shape.empty() ? 1 : in[i].shape[axis_];
  }
  int n_, axis_;
  bool pre_, app_;
};

/// The inclusive sum along `axis`, in sum_dtype(x).
class Cumsum final : public Primitive {
 public:
  explicit Cumsum(int axis) : axis_(axis) {}
  std::string_view name() const override { return "cumsum"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  int keeps_layout_of() const override { return 0; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  void scan_totals(const LocalArgs& in, LocalOut& totals) const override;
  void eval_scan(const LocalArgs& in, const LocalIn& before, LocalOuts& out) const override;
  TESSERA_DECLARE_EVAL_CUDA;
  void scan_totals_cuda(const LocalArgs& in, LocalOut& totals) const override;
  void eval_scan_cuda(const LocalArgs& in, const LocalIn& before, LocalOuts& out) const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  int axis_;
};

/// 'same' convolution of x with the 1-d kernel (operands x, kernel) along
/// `axis`, in the inexact promoted dtype.
class Convolve final : public Primitive {
 public:
  explicit Convolve(int axis) : axis_(axis) {}
  std::string_view name() const override { return "convolve"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  int keeps_layout_of() const override { return 0; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  bool reads_halo_pieces() const override { return true; }
  void eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_EVAL_CUDA;
  void eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  int axis_;
};

/// 'same' convolution of x's last two dims with the 2-d kernel.
class Convolve2d final : public Primitive {
 public:
  std::string_view name() const override { return "convolve2d"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  int keeps_layout_of() const override { return 0; }
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;
};

/// jnp.gradient along `axis` with uniform `spacing` (edge_order 1): central
/// differences inside, one-sided ones at the ends; the dim has >= 2 rows.
/// Result dtype inexact(x).
class Gradient final : public Primitive {
 public:
  Gradient(int axis, double spacing) : axis_(axis), spacing_(spacing) {}
  std::string_view name() const override { return "gradient"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  int keeps_layout_of() const override { return 0; }
  std::string params() const override;
  TESSERA_DECLARE_EVAL_CPU;
  bool reads_halo_pieces() const override { return true; }
  void eval_halo(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_EVAL_CUDA;
  void eval_halo_cuda(const LocalArgs& in, const std::vector<LocalArgs>& pieces, LocalOuts& out) const override;
  TESSERA_DECLARE_BATCH;
  TESSERA_DECLARE_JVP;
  TESSERA_DECLARE_TRANSPOSE;

 private:
  int axis_;
  double spacing_;
};

/// jnp.interp(x, xp, fp) (operands x, xp, fp). Elementwise in x; xp and fp
/// share one factor that must be whole on every device, so the engine
/// replicates them and keeps x's layout.
class Interp final : public Primitive {
 public:
  std::string_view name() const override { return "interp"; }
  TESSERA_DECLARE_INFER;
  TESSERA_DECLARE_RULE;
  TESSERA_DECLARE_EVAL_CPU;
  TESSERA_DECLARE_EVAL_CUDA;

  /// As jnp.interp: x and xp promoted together to inexact (fp on its own).
  static DType x_type(DType x, DType xp);
};

PrimitivePtr make_diff(int n, int axis, bool prepend, bool append);
PrimitivePtr make_cumsum(int axis);
PrimitivePtr make_convolve(int axis);
PrimitivePtr make_convolve2d();
PrimitivePtr make_gradient(int axis, double spacing);
PrimitivePtr make_interp();

/// The pieces a halo-reading eval gets operand i in (none: its one buffer).
inline const LocalArgs& held_of(const std::vector<LocalArgs>& pieces, std::size_t i) {
  static const LocalArgs none;
  return i < pieces.size() ? pieces[i] : none;
}

/// Operand `a`'s rows along `axis`, numbered from `shift`, as segments of
/// a backend's kind (Segment{data, dtype, start, stop, outer_stride}; rows
/// of `inner` elements): the buffers `held` holds it in (held_of), or its
/// one buffer.
template <class Segment>
std::vector<Segment> row_segments(const LocalIn& a, const LocalArgs& held, int axis, std::int64_t inner,
                                  std::int64_t shift) {
  std::vector<Segment> segs;
  auto add = [&](const LocalIn& p) {
    const Slice r = p.box[axis];
    if (r.size() > 0) segs.push_back(Segment{p.data, p.dtype, r.start + shift, r.stop + shift, r.size() * inner});
  };
  if (held.empty())
    add(a);
  else
    for (const LocalIn& p : held) add(p);
  return segs;
}

}  // namespace tessera::detail
