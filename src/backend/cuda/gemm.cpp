// dot_general on a CUDA GPU (gemm.hpp): the layout decisions of the CPU's
// kernel (core/gemm_plan.hpp, which backend/cpu/dot.cpp runs too), with
// every data movement a kernel on the GPU. Plain C++: the kernels it calls
// are gemm.cu's.
#include "backend/cuda/gemm.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "core/gemm_plan.hpp"
#include "runtime/runtime.hpp"
#include "tessera/error.hpp"

namespace tessera::cuda {

namespace {

using std::int64_t;

// Device memory for the temporaries: on the device's allocator (counted in
// its memory statistics, freed in stream order when the op is done), or,
// for a kernel called without a device on an emulated GPU, the heap.
class Scratch {
 public:
  void* take(int device, std::size_t nbytes) {
    if (device >= 0) {
      buf_ = detail::Buffer(device, nbytes);
      return buf_.device_data();
    }
    if (!emulated_gpu())
      throw DeviceError("[dot_general] internal: scratch memory on a GPU needs the device the kernel runs for");
    heap_ = std::make_unique<std::byte[]>(nbytes);
    return heap_.get();
  }

 private:
  detail::Buffer buf_;
  std::unique_ptr<std::byte[]> heap_;
};

using detail::shape_product;
using detail::strides_in;

int64_t elements(const Shape& s) { return shape_product(s, 0, s.size()); }

// The block of `shape` (row-major) with its dims permuted into `dst`: dst
// dim i is src dim perm[i].
void permute(const void* src, const Shape& shape, const std::vector<int>& perm, void* dst, std::size_t isz) {
  std::vector<int> identity(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) identity[i] = static_cast<int>(i);
  const auto st = strides_in(shape, identity);
  Shape dshape(perm.size());
  std::vector<int64_t> dstrides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    dshape[i] = shape[perm[i]];
    dstrides[i] = st[perm[i]];
  }
  gather(src, dshape, dstrides, dst, isz);
}

// One operand's block prepared for the GEMM as its plan says
// (core/gemm_plan.hpp, the CPU's plan too): summed dims summed away, and
// permuted when neither the plain nor the transposed form matches its
// layout. Its matrix (rows x cols) is contiguous; batch dim i starts every
// batch_stride[i] elements (0: broadcast).
struct Prepared {
  const void* data = nullptr;
  bool trans = false;
  int64_t matrix = 0;  // elements of one matrix
  std::vector<int64_t> batch_stride;
  Scratch keep_sum, keep_perm, keep_expand;
};

void prepare(Prepared& p, const void* data, const Shape& shape, DType dtype, int device, const detail::DotSide& side,
             bool is_lhs, const std::vector<int64_t>& out_batch) {
  const std::size_t isz = itemsize(dtype);
  detail::DotOperandPlan plan = detail::plan_dot_operand(shape, side, is_lhs, out_batch);
  p.data = data;
  if (!plan.sum_flag.empty()) {
    void* dst = p.keep_sum.take(device, static_cast<std::size_t>(elements(plan.shape)) * isz);
    sum_dims(dtype, data, shape, plan.sum_flag, dst);
    p.data = dst;
  }
  if (!plan.permute.empty()) {
    void* dst = p.keep_perm.take(device, static_cast<std::size_t>(elements(plan.shape)) * isz);
    permute(p.data, plan.shape, plan.permute, dst, isz);
    p.data = dst;
  }
  p.trans = plan.trans;
  p.matrix = plan.matrix;
  p.batch_stride = std::move(plan.batch_stride);
}

// The batch dims of the result with the operands' strides, merged into the
// fewest dims: size-1 dims dropped, and a dim folded into the one before it
// when both operands step through the pair as one run (the result always
// does: it is contiguous).
struct Batch {
  std::vector<int64_t> size, a_stride, b_stride;
};

Batch merged_batch(const std::vector<int64_t>& sizes, const Prepared& pa, const Prepared& pb) {
  Batch m;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    const int64_t sa = pa.batch_stride[i], sb = pb.batch_stride[i];
    if (!m.size.empty() && m.a_stride.back() == sa * sizes[i] && m.b_stride.back() == sb * sizes[i]) {
      m.size.back() *= sizes[i];
      m.a_stride.back() = sa;
      m.b_stride.back() = sb;
      continue;
    }
    m.size.push_back(sizes[i]);
    m.a_stride.push_back(sa);
    m.b_stride.push_back(sb);
  }
  return m;
}

// An operand's matrices gathered into one contiguous batch (one matrix per
// result batch element, broadcasts repeated), for batch dims that no single
// stride describes.
void expand(Prepared& p, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType dtype,
            int device) {
  const std::size_t isz = itemsize(dtype);
  Shape shape = sizes;
  std::vector<int64_t> st = strides;
  shape.push_back(p.matrix);
  st.push_back(1);
  void* dst = p.keep_expand.take(device, static_cast<std::size_t>(elements(shape)) * isz);
  gather(p.data, shape, st, dst, isz);
  p.data = dst;
}

}  // namespace

// The steps of cpu::dot_general (backend/cpu/dot.cpp), each on the GPU; see
// gemm.hpp. Where the CPU loops over a multi-dim batch, one strided-batched
// GEMM runs here, after the operands' batches are expanded when their
// strides do not merge into one.
void dot_general(const detail::Contraction& c, DType dtype, const void* a, const Shape& sa, const void* b,
                 const Shape& sb, void* out, const Shape& out_shape, int device) {
  const std::size_t isz = itemsize(dtype);
  const int64_t total = elements(out_shape);
  if (total == 0) return;
  const detail::DotResultPlan r = detail::plan_dot_result(c, sa, out_shape);
  if (r.k == 0) {
    const std::uint64_t zero = 0;  // zero in every dtype
    fill(dtype, out, total, &zero);
    return;
  }
  Scratch canon_mem;
  void* cbuf = r.in_place ? out : canon_mem.take(device, static_cast<std::size_t>(total) * isz);
  const std::vector<int64_t>& bl = r.batch;
  Prepared pa, pb;
  prepare(pa, a, sa, dtype, device, c.lhs, true, bl);
  prepare(pb, b, sb, dtype, device, c.rhs, false, bl);
  StridedGemm g;
  g.dtype = dtype;
  g.m = r.m;
  g.n = r.n;
  g.k = r.k;
  g.trans_a = pa.trans;
  g.trans_b = pb.trans;
  Batch batch = merged_batch(bl, pa, pb);
  if (batch.size.size() > 1) {
    expand(pa, batch.size, batch.a_stride, dtype, device);
    expand(pb, batch.size, batch.b_stride, dtype, device);
    batch.size = {shape_product(batch.size, 0, batch.size.size())};
    batch.a_stride = {pa.matrix};
    batch.b_stride = {pb.matrix};
  }
  if (!batch.size.empty()) {
    g.batch = batch.size[0];
    g.stride_a = batch.a_stride[0];
    g.stride_b = batch.b_stride[0];
  }
  // rhs shared by the whole batch and lhs contiguous over it: one GEMM with
  // the batch as more rows (as the CPU merges it).
  if (g.batch > 1 && !g.trans_a && g.stride_b == 0 && g.stride_a == g.m * g.k) {
    g.m *= g.batch;
    g.batch = 1;
    g.stride_a = 0;
  }
  gemm(g, pa.data, pb.data, cbuf);
  if (!r.in_place) permute(cbuf, r.local, r.perm, out, isz);
}

}  // namespace tessera::cuda
