// dot_general on a CUDA GPU (gemm.hpp): the layout decisions of the CPU's
// kernel (backend/cpu/dot.cpp), with every data movement a kernel on the
// GPU. Plain C++: the kernels it calls are gemm.cu's.
#include "backend/cuda/gemm.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/kernels.hpp"
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

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

int64_t elements(const Shape& s) { return product(s, 0, s.size()); }

// True when the dims of `order` whose size is not 1 are increasing: the
// row-major block of `shape` is then already laid out in that order.
bool already_ordered(const Shape& shape, const std::vector<int>& order) {
  int last = -1;
  for (int d : order) {
    if (shape[d] == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// Row-major strides (elements) of `shape` permuted by `order`, indexed by
// the original dim.
std::vector<int64_t> strides_in(const Shape& shape, const std::vector<int>& order) {
  std::vector<int64_t> st(shape.size(), 0);
  int64_t acc = 1;
  for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
    st[order[i]] = acc;
    acc *= shape[order[i]];
  }
  return st;
}

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

// One operand's block prepared for the GEMM (as the CPU's prepare): summed
// dims summed away, and permuted when neither the plain nor the transposed
// form matches its layout. Its matrix (rows x cols) is contiguous; batch
// dim i starts every batch_stride[i] elements (0: broadcast).
struct Prepared {
  const void* data = nullptr;
  bool trans = false;
  int64_t matrix = 0;  // elements of one matrix
  std::vector<int64_t> batch_stride;
  Scratch keep_sum, keep_perm, keep_expand;
};

// Dims ordered (batch, summed, m, k) for the lhs and (batch, summed, k, n)
// for the rhs, or the transposed form; `out_batch` are the result's batch
// sizes (a size-1 operand dim against a larger one is broadcast).
void prepare(Prepared& p, const void* data, Shape shape, DType dtype, int device, const detail::DotSide& side,
             bool is_lhs, const std::vector<int64_t>& out_batch) {
  const std::size_t isz = itemsize(dtype);
  p.data = data;
  if (!side.summed.empty()) {
    std::vector<bool> flag(shape.size(), false);
    for (int d : side.summed) flag[d] = true;
    Shape kept = shape;
    for (int d : side.summed) kept[d] = 1;
    void* dst = p.keep_sum.take(device, static_cast<std::size_t>(elements(kept)) * isz);
    sum_dims(dtype, data, shape, flag, dst);
    p.data = dst;
    shape = kept;
  }
  std::vector<int> head;
  for (int d : side.batch)
    if (d >= 0) head.push_back(d);
  head.insert(head.end(), side.summed.begin(), side.summed.end());
  // lhs: (m, k) plain, (k, m) transposed; rhs: (k, n) plain, (n, k) transposed.
  std::vector<int> plain = head, trans = head;
  const auto& first = is_lhs ? side.free : side.contract;
  const auto& second = is_lhs ? side.contract : side.free;
  plain.insert(plain.end(), first.begin(), first.end());
  plain.insert(plain.end(), second.begin(), second.end());
  trans.insert(trans.end(), second.begin(), second.end());
  trans.insert(trans.end(), first.begin(), first.end());
  std::vector<int> order = plain;
  if (!already_ordered(shape, plain)) {
    if (already_ordered(shape, trans)) {
      order = trans;
      p.trans = true;
    } else {
      void* dst = p.keep_perm.take(device, static_cast<std::size_t>(elements(shape)) * isz);
      permute(p.data, shape, plain, dst, isz);
      p.data = dst;
    }
  }
  p.matrix = 1;
  for (int d : side.free) p.matrix *= shape[d];
  for (int d : side.contract) p.matrix *= shape[d];
  const auto st = strides_in(shape, order);
  for (size_t i = 0; i < side.batch.size(); ++i) {
    const int d = side.batch[i];
    p.batch_stride.push_back(d < 0 || (shape[d] == 1 && out_batch[i] != 1) ? 0 : st[d]);
  }
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
  const int rank = static_cast<int>(out_shape.size());
  std::vector<int> perm = c.out_perm;
  if (perm.empty())
    for (int i = 0; i < rank; ++i) perm.push_back(i);
  // The block in canonical order: output dim i is canonical dim perm[i].
  Shape local(rank);
  for (int i = 0; i < rank; ++i) local[perm[i]] = out_shape[i];
  // A permutation that keeps the dims of size > 1 in order moves no data:
  // the canonical block is the output block.
  const bool in_place = already_ordered(local, perm);

  int64_t k = 1;
  for (int d : c.lhs.contract) k *= sa[d];
  if (k == 0) {
    const std::uint64_t zero = 0;  // zero in every dtype
    fill(dtype, out, total, &zero);
    return;
  }
  Scratch canon_mem;
  void* cbuf = in_place ? out : canon_mem.take(device, static_cast<std::size_t>(total) * isz);
  const size_t nb = c.lhs.batch.size();
  const std::vector<int64_t> bl(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(nb));
  Prepared pa, pb;
  prepare(pa, a, sa, dtype, device, c.lhs, true, bl);
  prepare(pb, b, sb, dtype, device, c.rhs, false, bl);
  StridedGemm g;
  g.dtype = dtype;
  const size_t nlf = c.lhs.free.size();
  g.m = product(local, nb, nb + nlf);
  g.n = product(local, nb + nlf, local.size());
  g.k = k;
  g.trans_a = pa.trans;
  g.trans_b = pb.trans;
  Batch batch = merged_batch(bl, pa, pb);
  if (batch.size.size() > 1) {
    expand(pa, batch.size, batch.a_stride, dtype, device);
    expand(pb, batch.size, batch.b_stride, dtype, device);
    batch.size = {product(batch.size, 0, batch.size.size())};
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
  if (!in_place) permute(cbuf, local, perm, out, isz);
}

}  // namespace tessera::cuda
