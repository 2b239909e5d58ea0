// Box arithmetic and the strided block copy every data movement uses.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "core/array_impl.hpp"
#include "core/checked.hpp"
#include "core/nd_index.hpp"

namespace tessera::detail {

void throw_too_many_elements(const char* op, const std::string& what) {
  throw ShapeError(std::string("[") + op + "] " + what + " has more elements than fit in int64");
}

namespace {
// Product of the nonzero dims of `shape`. Like NumPy, the nonzero dims must
// fit even when another dim is 0: the product of any subset of dims (a
// block, a batch, the rows of a GEMM) then fits too, so no later
// computation on the shape can overflow.
std::int64_t nonzero_product(const Shape& shape, const char* op) {
  for (auto s : shape)
    if (s < 0) throw ShapeError(std::string("[") + op + "] dimensions must be >= 0, got shape " + shape_str(shape));
  std::int64_t n = 1;
  for (auto s : shape)
    if (s != 0) n = checked_mul(n, s, op, [&] { return "shape " + shape_str(shape); });
  return n;
}
bool has_zero(const Shape& shape) { return std::find(shape.begin(), shape.end(), 0) != shape.end(); }
}  // namespace

std::int64_t checked_numel(const Shape& shape, const char* op) {
  const std::int64_t n = nonzero_product(shape, op);
  return has_zero(shape) ? 0 : n;
}

std::int64_t checked_nbytes(const Shape& shape, DType dtype, const char* op) {
  const std::int64_t n = nonzero_product(shape, op);
  std::int64_t bytes;
  if (__builtin_mul_overflow(n, static_cast<std::int64_t>(itemsize(dtype)), &bytes))
    throw ShapeError(std::string("[") + op + "] shape " + shape_str(shape) + " of " + dtype_name(dtype) + " needs " +
                     std::to_string(n) + " x " + std::to_string(itemsize(dtype)) +
                     " bytes, more than fit in int64");
  return has_zero(shape) ? 0 : bytes;
}

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

Shape box_shape(const std::vector<Slice>& box) {
  Shape s(box.size());
  for (size_t i = 0; i < box.size(); ++i) s[i] = box[i].size();
  return s;
}

std::vector<Slice> whole_box(const Shape& shape) {
  std::vector<Slice> b(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) b[d] = {0, shape[d]};
  return b;
}

std::vector<Slice> intersect(const std::vector<Slice>& a, const std::vector<Slice>& b) {
  std::vector<Slice> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    r[i].start = std::max(a[i].start, b[i].start);
    r[i].stop = std::max(r[i].start, std::min(a[i].stop, b[i].stop));
  }
  return r;
}

bool box_empty(const std::vector<Slice>& box) {
  for (const auto& s : box)
    if (s.size() <= 0) return true;
  return false;
}

void for_each_run(const std::vector<Slice>& src_box, const std::vector<Slice>& dst_box, const std::vector<Slice>& box,
                  std::size_t itemsize, const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  const int r = static_cast<int>(box.size());
  if (box_empty(box)) return;
  if (r == 0) {
    fn(0, 0, static_cast<std::int64_t>(itemsize));
    return;
  }
  // Row-major strides (in bytes) of the source and destination blocks, and
  // the offset of the box's first element in each.
  std::vector<std::int64_t> ss(r), ds(r);
  std::int64_t s_acc = static_cast<std::int64_t>(itemsize), d_acc = s_acc;
  std::int64_t s_off = 0, d_off = 0;
  for (int i = r - 1; i >= 0; --i) {
    ss[i] = s_acc;
    ds[i] = d_acc;
    s_off += (box[i].start - src_box[i].start) * s_acc;
    d_off += (box[i].start - dst_box[i].start) * d_acc;
    s_acc *= src_box[i].size();
    d_acc *= dst_box[i].size();
  }
  // Merge trailing dims that are whole in both blocks: the run grows to one
  // contiguous range. `inner` is the first dim of the contiguous run.
  int inner = r - 1;
  std::int64_t run = box[r - 1].size() * static_cast<std::int64_t>(itemsize);
  while (inner > 0 && box[inner].size() == src_box[inner].size() && box[inner].size() == dst_box[inner].size()) {
    --inner;
    run *= box[inner].size();
  }
  const Shape outer = box_shape(box);
  for (NdIndex it(first_dims(outer, inner), ss, ds); !it.done(); it.next())
    fn(s_off + it.offset(0), d_off + it.offset(1), run);
}

void copy_box(const void* src, const std::vector<Slice>& src_box, void* dst, const std::vector<Slice>& dst_box,
              const std::vector<Slice>& box, std::size_t itemsize) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for_each_run(src_box, dst_box, box, itemsize, [&](std::int64_t so, std::int64_t dof, std::int64_t bytes) {
    std::memcpy(d + dof, s + so, static_cast<std::size_t>(bytes));
  });
}

namespace {
// The GPU whose stream copies between `a` and `b` (either may be host memory).
const GpuHandle* copier(const Buffer* a, const Buffer* b) {
  Runtime& rt = Runtime::get();
  if (a && !a->on_host()) return rt.gpu(a->device_id());
  if (b && !b->on_host()) return rt.gpu(b->device_id());
  return nullptr;
}
// Which way bytes go between two buffers, one of them at least on a GPU.
CopyKind copy_kind(const Buffer& src, const Buffer& dst) {
  return src.on_host() ? CopyKind::HostToDevice : dst.on_host() ? CopyKind::DeviceToHost : CopyKind::DeviceToDevice;
}
}  // namespace

void copy_box(const Buffer& src, const std::vector<Slice>& src_box, const Buffer& dst,
              const std::vector<Slice>& dst_box, const std::vector<Slice>& box, std::size_t itemsize, const char* op) {
  const GpuHandle* g = copier(&src, &dst);
  if (g == nullptr) return copy_box(src.data(), src_box, dst.data(), dst_box, box, itemsize);
  const auto* s = static_cast<const unsigned char*>(src.device_data());
  auto* d = static_cast<unsigned char*>(dst.device_data());
  const CopyKind kind = copy_kind(src, dst);
  // One copy per contiguous run, queued, and one wait at the end.
  for_each_run(src_box, dst_box, box, itemsize, [&](std::int64_t so, std::int64_t dof, std::int64_t bytes) {
    gpu_copy(*g, d + dof, s + so, static_cast<std::size_t>(bytes), kind, op, false);
  });
  gpu_wait(*g, op);
}

namespace {
// The one run of `box` between blocks covering `a_box` and `b_box`, as
// (offset in a, offset in b, bytes); nullopt when it takes several.
std::optional<std::array<std::int64_t, 3>> single_run(const std::vector<Slice>& a_box,
                                                      const std::vector<Slice>& b_box,
                                                      const std::vector<Slice>& box, std::size_t itemsize) {
  std::optional<std::array<std::int64_t, 3>> one;
  int runs = 0;
  for_each_run(a_box, b_box, box, itemsize, [&](std::int64_t ao, std::int64_t bo, std::int64_t bytes) {
    if (++runs == 1) one = std::array<std::int64_t, 3>{ao, bo, bytes};
  });
  if (runs != 1) return std::nullopt;
  return one;
}
}  // namespace

void write_box(const void* src, const std::vector<Slice>& src_box, const Buffer& dst,
               const std::vector<Slice>& dst_box, const std::vector<Slice>& box, std::size_t itemsize,
               const char* op) {
  if (dst.on_host()) return copy_box(src, src_box, dst.data(), dst_box, box, itemsize);
  if (const auto run = single_run(src_box, dst_box, box, itemsize)) {
    const auto [so, dof, bytes] = *run;
    if (bytes > 0)
      write_buffer(dst.view(static_cast<std::size_t>(dof), static_cast<std::size_t>(bytes)),
                   static_cast<const unsigned char*>(src) + so, static_cast<std::size_t>(bytes), op);
    return;
  }
  // Gathered into page-locked memory, which the GPU reads directly.
  const std::size_t n = static_cast<std::size_t>(num_elements(box_shape(box))) * itemsize;
  if (n == 0) return;
  const Buffer staging = Buffer::host_staging(dst.device_id(), n);
  copy_box(src, src_box, staging.data(), box, box, itemsize);
  copy_box(staging, box, dst, dst_box, box, itemsize, op);
}

void read_box(const Buffer& src, const std::vector<Slice>& src_box, void* dst, const std::vector<Slice>& dst_box,
              const std::vector<Slice>& box, std::size_t itemsize, const char* op) {
  if (src.on_host()) return copy_box(src.data(), src_box, dst, dst_box, box, itemsize);
  if (const auto run = single_run(src_box, dst_box, box, itemsize)) {
    const auto [so, dof, bytes] = *run;
    if (bytes > 0)
      read_buffer(src.view(static_cast<std::size_t>(so), static_cast<std::size_t>(bytes)),
                  static_cast<unsigned char*>(dst) + dof, static_cast<std::size_t>(bytes), op);
    return;
  }
  const std::size_t n = static_cast<std::size_t>(num_elements(box_shape(box))) * itemsize;
  if (n == 0) return;
  const Buffer staging = Buffer::host_staging(src.device_id(), n);
  copy_box(src, src_box, staging, box, box, itemsize, op);
  copy_box(staging.data(), box, dst, dst_box, box, itemsize);
}

void write_buffer(const Buffer& dst, const void* host, std::size_t nbytes, const char* op) {
  if (nbytes == 0) return;
  if (dst.on_host()) {
    std::memcpy(dst.data(), host, nbytes);
    return;
  }
  gpu_copy(*Runtime::get().gpu(dst.device_id()), dst.device_data(), host, nbytes, CopyKind::HostToDevice, op);
}

void read_buffer(const Buffer& src, void* host, std::size_t nbytes, const char* op) {
  if (nbytes == 0) return;
  if (src.on_host()) {
    std::memcpy(host, src.data(), nbytes);
    return;
  }
  gpu_copy(*Runtime::get().gpu(src.device_id()), host, src.device_data(), nbytes, CopyKind::DeviceToHost, op);
}

void copy_buffer(const Buffer& dst, const Buffer& src, std::size_t nbytes, const char* op) {
  if (nbytes == 0) return;
  if (dst.on_host() && src.on_host()) {
    std::memcpy(dst.data(), src.data(), nbytes);
    return;
  }
  gpu_copy(*copier(&dst, &src), dst.device_data(), src.device_data(), nbytes, copy_kind(src, dst), op);
}

Buffer contiguous_view(const Buffer& buffer, const std::vector<Slice>& block, const std::vector<Slice>& box,
                       std::size_t itemsize) {
  const size_t rank = block.size();
  size_t first = 0;  // the first dim where the box is narrower than the block
  while (first < rank && box[first] == block[first]) ++first;
  for (size_t d = first + 1; d < rank; ++d)
    if (!(box[d] == block[d])) return Buffer();
  for (size_t d = 0; d < first; ++d)
    if (box[d].size() != 1 && first < rank) return Buffer();
  // Offset of the box's first element, and its size, in elements.
  std::int64_t offset = 0, count = 1;
  for (size_t d = 0; d < rank; ++d) {
    offset = offset * block[d].size() + (box[d].start - block[d].start);
    count *= box[d].size();
  }
  if (count == 0) return Buffer();
  return buffer.view(static_cast<std::size_t>(offset) * itemsize, static_cast<std::size_t>(count) * itemsize);
}

}  // namespace tessera::detail
