// The dot_general kernel (see dot.hpp).
#include "backend/cpu/dot.hpp"

#include <cstddef>
#include <cstring>

#include "backend/cpu/gemm.hpp"
#include "core/array_impl.hpp"
#include "core/gemm_plan.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail::cpu {

namespace {

// Temporary memory: on the device's allocator when the kernel runs for a
// device, so its peak memory shows the temporaries too.
class Scratch {
 public:
  void* take(int device, std::size_t nbytes) {
    if (device >= 0) {
      buf_ = Buffer(device, nbytes);
      return buf_.data();
    }
    heap_.resize(nbytes);
    return heap_.data();
  }

 private:
  Buffer buf_;
  std::vector<std::byte> heap_;
};

// One operand's block prepared for the GEMM as its plan says
// (core/gemm_plan.hpp): pre-summed, and permuted when neither the plain nor
// the transposed form matches its layout.
struct Prepared {
  const void* data = nullptr;
  DotOperandPlan plan;
  Scratch keep_sum, keep_perm;
};

void prepare(Prepared& p, const void* data, const Shape& shape, DType dtype, int device, const DotSide& side,
             bool is_lhs, const std::vector<std::int64_t>& out_batch) {
  const std::size_t isz = itemsize(dtype);
  p.plan = plan_dot_operand(shape, side, is_lhs, out_batch);
  p.data = data;
  if (!p.plan.sum_flag.empty()) {
    void* dst = p.keep_sum.take(device, static_cast<std::size_t>(num_elements(p.plan.shape)) * isz);
    sum_dims(dtype, data, shape, p.plan.sum_flag, dst);
    p.data = dst;
  }
  if (!p.plan.permute.empty()) {
    void* dst = p.keep_perm.take(device, static_cast<std::size_t>(num_elements(p.plan.shape)) * isz);
    permute(p.data, p.plan.shape, p.plan.permute, dst, isz);
    p.data = dst;
  }
}

}  // namespace

void dot_general(const Contraction& c, DType dtype, const void* a, const Shape& sa, const void* b, const Shape& sb,
                 void* out, const Shape& out_shape, int device) {
  const std::size_t isz = itemsize(dtype);
  const std::size_t nbytes = static_cast<std::size_t>(num_elements(out_shape)) * isz;
  if (nbytes == 0) return;
  const DotResultPlan r = plan_dot_result(c, sa, out_shape);
  Scratch canon_mem;
  void* cbuf = r.in_place ? out : canon_mem.take(device, nbytes);
  if (r.k == 0) {
    std::memset(out, 0, nbytes);
    return;
  }
  const std::vector<std::int64_t>& bl = r.batch;
  const size_t nb = bl.size();
  Prepared pa, pb;
  prepare(pa, a, sa, dtype, device, c.lhs, true, bl);
  prepare(pb, b, sb, dtype, device, c.rhs, false, bl);
  GemmBatch g;
  g.dtype = dtype;
  g.batch = bl;
  g.a_stride = pa.plan.batch_stride;
  g.b_stride = pb.plan.batch_stride;
  g.m = r.m;
  g.n = r.n;
  g.k = r.k;
  g.trans_a = pa.plan.trans;
  g.trans_b = pb.plan.trans;
  // rhs shared by the whole batch and lhs contiguous over it: one GEMM.
  bool merge = !g.trans_a;
  std::int64_t expect = g.m * g.k;
  for (int i = static_cast<int>(nb) - 1; i >= 0 && merge; --i) {
    if (bl[i] == 1) continue;
    merge = g.b_stride[i] == 0 && g.a_stride[i] == expect;
    expect *= bl[i];
  }
  if (merge) {
    g.m *= shape_product(r.local, 0, nb);
    g.batch.clear();
    g.a_stride.clear();
    g.b_stride.clear();
  }
  batched_gemm(g, pa.data, pb.data, cbuf);
  if (!r.in_place) permute(cbuf, r.local, r.perm, out, isz);
}

}  // namespace tessera::detail::cpu
