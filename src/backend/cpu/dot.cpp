// The dot_general kernel (see dot.hpp).
#include "backend/cpu/dot.hpp"

#include <cstddef>
#include <cstring>

#include "backend/cpu/gemm.hpp"
#include "core/array_impl.hpp"
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

std::int64_t product(const Shape& s, size_t from, size_t to) {
  std::int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

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
std::vector<std::int64_t> strides_in(const Shape& shape, const std::vector<int>& order) {
  std::vector<std::int64_t> st(shape.size(), 0);
  std::int64_t acc = 1;
  for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
    st[order[i]] = acc;
    acc *= shape[order[i]];
  }
  return st;
}

// One operand's block prepared for the GEMM: pre-summed, and permuted when
// neither the plain nor the transposed form matches its layout.
struct Prepared {
  const void* data = nullptr;
  bool trans = false;
  std::vector<std::int64_t> batch_stride;
  Scratch keep_sum, keep_perm;
};

// Dims ordered (batch, summed, m, k) for the lhs and (batch, summed, k, n)
// for the rhs, or the transposed form; `out_batch` are the result's batch
// sizes (a size-1 operand dim against a larger one is broadcast).
void prepare(Prepared& p, const void* data, Shape shape, DType dtype, int device, const DotSide& side, bool is_lhs,
             const std::vector<std::int64_t>& out_batch) {
  const std::size_t isz = itemsize(dtype);
  p.data = data;
  if (!side.summed.empty()) {
    std::vector<bool> flag(shape.size(), false);
    for (int d : side.summed) flag[d] = true;
    Shape kept = shape;
    for (int d : side.summed) kept[d] = 1;
    void* dst = p.keep_sum.take(device, static_cast<std::size_t>(num_elements(kept)) * isz);
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
      void* dst = p.keep_perm.take(device, static_cast<std::size_t>(num_elements(shape)) * isz);
      permute(p.data, shape, plain, dst, isz);
      p.data = dst;
    }
  }
  const auto st = strides_in(shape, order);
  for (size_t i = 0; i < side.batch.size(); ++i) {
    const int d = side.batch[i];
    p.batch_stride.push_back(d < 0 || (shape[d] == 1 && out_batch[i] != 1) ? 0 : st[d]);
  }
}

}  // namespace

void dot_general(const Contraction& c, DType dtype, const void* a, const Shape& sa, const void* b, const Shape& sb,
                 void* out, const Shape& out_shape, int device) {
  const std::size_t isz = itemsize(dtype);
  const std::size_t nbytes = static_cast<std::size_t>(num_elements(out_shape)) * isz;
  if (nbytes == 0) return;
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
  Scratch canon_mem;
  void* cbuf = in_place ? out : canon_mem.take(device, nbytes);

  std::int64_t k = 1;
  for (int d : c.lhs.contract) k *= sa[d];
  if (k == 0) {
    std::memset(out, 0, nbytes);
    return;
  }
  const size_t nb = c.lhs.batch.size();
  const std::vector<std::int64_t> bl(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(nb));
  Prepared pa, pb;
  prepare(pa, a, sa, dtype, device, c.lhs, true, bl);
  prepare(pb, b, sb, dtype, device, c.rhs, false, bl);
  GemmBatch g;
  g.dtype = dtype;
  g.batch = bl;
  g.a_stride = pa.batch_stride;
  g.b_stride = pb.batch_stride;
  const size_t nlf = c.lhs.free.size();
  g.m = product(local, nb, nb + nlf);
  g.n = product(local, nb + nlf, local.size());
  g.k = k;
  g.trans_a = pa.trans;
  g.trans_b = pb.trans;
  // rhs shared by the whole batch and lhs contiguous over it: one GEMM.
  bool merge = !pa.trans;
  std::int64_t expect = g.m * g.k;
  for (int i = static_cast<int>(nb) - 1; i >= 0 && merge; --i) {
    if (bl[i] == 1) continue;
    merge = pb.batch_stride[i] == 0 && pa.batch_stride[i] == expect;
    expect *= bl[i];
  }
  if (merge) {
    g.m *= product(local, 0, nb);
    g.batch.clear();
    g.a_stride.clear();
    g.b_stride.clear();
  }
  batched_gemm(g, pa.data, pb.data, cbuf);
  if (!in_place) permute(cbuf, local, perm, out, isz);
}

}  // namespace tessera::detail::cpu
