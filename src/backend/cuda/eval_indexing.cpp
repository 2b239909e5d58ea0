// The per-block kernels of the indexing primitives (primitives/indexing.hpp)
// on a CUDA device, which their eval_global (spmd/lower_indexing.cpp) runs
// on each device's blocks, with the kernels of backend/cuda/indexing.hpp;
// the CPU's are backend/cpu/eval_indexing.cpp. Each waits for the device
// before it returns, as eval_kernel does after an eval_cuda.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/indexing.hpp"
#include "core/array_impl.hpp"
#include "core/validate.hpp"
#include "primitives/indexing.hpp"
#include "runtime/gpus.hpp"
#include "runtime/runtime.hpp"

namespace tessera::detail {

namespace {

const GpuHandle& this_gpu() { return *Runtime::get().gpu(current_device()); }

/// Index value v as i64 as the CPU reads it (backend/cpu/indexing.cpp): u64
/// values past the i64 range become the i64 maximum, out of range for every
/// array.
template <class I>
std::int64_t index_value(I v) {
  if constexpr (std::is_same_v<I, std::uint64_t>)
    return v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
  else
    return static_cast<std::int64_t>(v);
}

template <class I>
void load(const unsigned char* raw, std::int64_t n, std::vector<std::int64_t>& out) {
  for (std::int64_t i = 0; i < n; ++i) {
    I v;
    std::memcpy(&v, raw + i * static_cast<std::int64_t>(sizeof(I)), sizeof(I));
    out[static_cast<std::size_t>(i)] = index_value(v);
  }
}

/// The n values of the integer block `ids` (device memory) on the host, as i64.
std::vector<std::int64_t> ids_on_host(const LocalIn& ids, std::int64_t n, const char* op) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  std::vector<unsigned char> raw(static_cast<std::size_t>(n) * itemsize(ids.dtype));
  gpu_copy(this_gpu(), raw.data(), ids.data, raw.size(), CopyKind::DeviceToHost, op);
  switch (ids.dtype) {
    case DType::u8: load<std::uint8_t>(raw.data(), n, out); break;
    case DType::i8: load<std::int8_t>(raw.data(), n, out); break;
    case DType::u32: load<std::uint32_t>(raw.data(), n, out); break;
    case DType::i32: load<std::int32_t>(raw.data(), n, out); break;
    case DType::u64: load<std::uint64_t>(raw.data(), n, out); break;
    default: load<std::int64_t>(raw.data(), n, out); break;
  }
  return out;
}

}  // namespace

void IndexingGlobal::eval_cuda(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(std::string(name()).c_str(), "internal: runs on whole arrays (eval_global)"));
}

void Take::take_block_cuda(const LocalIn& x, const std::vector<std::int64_t>& idx, void* out) const {
  const int rank = static_cast<int>(x.shape.size());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis_; ++d) outer *= x.shape[d];
  for (int d = axis_ + 1; d < rank; ++d) inner *= x.shape[d];
  const auto nidx = static_cast<std::int64_t>(idx.size());
  if (nidx == 0 || outer * inner == 0) return;
  // The indices (checked and wrapped on the host by the lowering) go to
  // the device for the gather.
  Buffer dev_idx(current_device(), idx.size() * sizeof(std::int64_t));
  write_buffer(dev_idx, idx.data(), dev_idx.nbytes(), "take");
  cuda::take(x.data, outer, x.shape[axis_], inner, itemsize(x.dtype),
             static_cast<const std::int64_t*>(dev_idx.device_data()), nidx, out);
  gpu_wait(this_gpu(), "take");
}

void IndexingScatter::scatter_block_cuda(const LocalIn& updates, const LocalIn& ids, const LocalOut& partial,
                                         std::int64_t n, bool wrap_negative) const {
  const std::string op_name(name());
  const char* op = op_name.c_str();
  const std::int64_t rows = partial.shape[0];
  std::int64_t inner = 1;
  for (std::size_t d = 1; d < partial.shape.size(); ++d) inner *= partial.shape[d];
  if (rows * inner == 0) return;
  const std::int64_t nrows = updates.shape[0];
  const std::vector<std::int64_t> id = ids_on_host(ids, nrows, op);

  // The update rows landing on each row of the block, in increasing order
  // (a stable counting sort by target row): csr = [row_start (rows + 1),
  // order (row_start[rows] entries)]. Rows outside the block (another
  // device's, or out of range) are dropped, as the CPU drops them.
  const Slice rb = partial.box[0];
  std::vector<std::int64_t> target(static_cast<std::size_t>(nrows), -1);
  std::vector<std::int64_t> csr(static_cast<std::size_t>(rows + 1), 0);
  for (std::int64_t i = 0; i < nrows; ++i) {
    std::int64_t r = id[static_cast<std::size_t>(i)];
    if (wrap_negative && r < 0) r += n;
    if (r < rb.start || r >= rb.stop) continue;
    target[static_cast<std::size_t>(i)] = r - rb.start;
    ++csr[static_cast<std::size_t>(r - rb.start + 1)];
  }
  for (std::int64_t r = 0; r < rows; ++r) csr[static_cast<std::size_t>(r + 1)] += csr[static_cast<std::size_t>(r)];
  const std::int64_t landed = csr[static_cast<std::size_t>(rows)];
  csr.resize(static_cast<std::size_t>(rows + 1 + landed));
  std::vector<std::int64_t> next(csr.begin(), csr.begin() + rows);
  for (std::int64_t i = 0; i < nrows; ++i)
    if (const std::int64_t t = target[static_cast<std::size_t>(i)]; t >= 0)
      csr[static_cast<std::size_t>(rows + 1 + next[static_cast<std::size_t>(t)]++)] = i;

  Buffer dev_csr(current_device(), csr.size() * sizeof(std::int64_t));
  write_buffer(dev_csr, csr.data(), dev_csr.nbytes(), op);
  const auto* row_start = static_cast<const std::int64_t*>(dev_csr.device_data());
  cuda::scatter_rows(partial.dtype, partial.data, rows, inner, row_start, row_start + rows + 1, updates.data);
  gpu_wait(this_gpu(), op);
}

void IndexingScatter::add_block_cuda(DType t, const void* a, const void* b, void* out, std::int64_t n) const {
  cuda::add(t, a, b, out, n);
  gpu_wait(this_gpu(), std::string(name()).c_str());
}

}  // namespace tessera::detail
