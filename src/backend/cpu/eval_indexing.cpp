// The per-block kernels of the indexing primitives (primitives/indexing.hpp),
// which their eval_global (spmd/lower_indexing.cpp) runs on each device's
// blocks, by the kernels of backend/cpu/indexing.hpp.
#include <cstring>

#include "backend/cpu/indexing.hpp"
#include "core/array_impl.hpp"
#include "core/validate.hpp"
#include "primitives/indexing.hpp"

namespace tessera::detail {

void IndexingGlobal::eval_cpu(const LocalArgs&, LocalOuts&) const {
  throw Error(msg(std::string(name()).c_str(), "internal: runs on whole arrays (eval_global)"));
}

std::vector<std::int64_t> Take::load_indices(const void* data, DType dtype, std::int64_t n) const {
  return cpu::load_indices(data, dtype, n);
}

void Take::take_block(const LocalIn& x, const std::vector<std::int64_t>& idx, void* out) const {
  const int rank = static_cast<int>(x.shape.size());
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis_; ++d) outer *= x.shape[d];
  for (int d = axis_ + 1; d < rank; ++d) inner *= x.shape[d];
  cpu::take(x.data, outer, x.shape[axis_], inner * static_cast<std::int64_t>(itemsize(x.dtype)), idx, out);
}

void IndexingScatter::scatter_block(const LocalIn& updates, const LocalIn& ids, const LocalOut& partial,
                                    std::int64_t n, bool wrap_negative) const {
  std::memset(partial.data, 0, static_cast<std::size_t>(num_elements(partial.shape)) * itemsize(partial.dtype));
  std::int64_t inner = 1;
  for (std::size_t d = 1; d < partial.shape.size(); ++d) inner *= partial.shape[d];
  cpu::scatter_rows(partial.dtype, partial.data, partial.box[0], inner, ids.dtype, ids.data, updates.data,
                    updates.shape[0], n, wrap_negative);
}

void IndexingScatter::add_block(DType t, const void* a, const void* b, void* out, std::int64_t n) const {
  cpu::add(t, a, b, out, n);
}

}  // namespace tessera::detail
