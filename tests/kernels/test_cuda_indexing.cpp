// The CUDA backend's indexing kernels (backend/cuda/indexing.hpp) against
// the CPU's (backend/cpu/indexing.hpp), bit for bit, on an emulated GPU:
// take in every item width, scatter's per-row sums in every dtype (in the
// CPU's order: duplicates, sums whose float result depends on the order,
// -0.0, rows out of the block), and add. The scatter kernel takes the rows'
// update lists as the CUDA per-block method builds them (a stable bucketing
// by target row, backend/cuda/eval_indexing.cpp); the whole path, ids read
// back and all, runs in the emulated suites (test_indexing with
// TESSERA_PLATFORM=cuda TESSERA_CUDA_EMULATE=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/indexing.hpp"
#include "backend/cuda/indexing.hpp"
#include "backend/cuda/stream.hpp"
#include "core/dispatch.hpp"
#include "tessera/error.hpp"
#include "kernels/cuda_test_util.hpp"

namespace ts = tessera;
namespace cpu = tessera::detail::cpu;
namespace cu = tessera::cuda;

using ts::DType;
using ts::Slice;

using namespace tessera::testing::cuda;

namespace {

class CudaIndexing : public EmulatedGpu {};

// Values of dtype t: for floats a mix of magnitudes (so a sum's bits depend
// on its order), signed zeros and infinities; for integers values that
// wrap; for bools 0 and 1.
Bytes values(DType t, std::int64_t n, unsigned seed) {
  Bytes out(static_cast<std::size_t>(n) * ts::itemsize(t));
  ts::detail::dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t i = 0; i < n; ++i) {
      const unsigned h = (static_cast<unsigned>(i) + seed) * 2654435761u;
      T v;
      if constexpr (std::is_same_v<T, bool>) {
        v = (h >> 7) % 3 == 0;
      } else if constexpr (std::is_floating_point_v<T>) {
        const double mags[] = {1e-8, 1.0, 3.0, 1e8, 0.1, 7.25e3};
        v = static_cast<T>(((h >> 3) & 1 ? -1.0 : 1.0) * mags[(h >> 5) % 6] * (1.0 + (h % 1000) / 997.0));
        if (h % 53 == 0) v = static_cast<T>(-0.0);
        if (h % 211 == 0) v = std::numeric_limits<T>::infinity();
      } else {
        v = static_cast<T>(std::numeric_limits<T>::max() - static_cast<T>(h % 5));
        if (h % 2) v = static_cast<T>(h);
      }
      std::memcpy(out.data() + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
    }
  });
  return out;
}

TEST_F(CudaIndexing, TakeMatchesCpu) {
  for (DType t : kDTypes)
    for (std::int64_t outer : {1, 3})
      for (std::int64_t inner : {1, 5})
        for (std::int64_t n_axis : {1, 7}) {
          const Bytes x = values(t, outer * n_axis * inner, 1);
          std::vector<std::int64_t> idx;
          for (std::int64_t j = 0; j < 11; ++j) idx.push_back((j * 5 + 3) % n_axis);
          const std::int64_t nidx = static_cast<std::int64_t>(idx.size());
          const std::size_t nbytes = static_cast<std::size_t>(outer * nidx * inner) * ts::itemsize(t);
          Bytes want = garbage(nbytes), got = garbage(nbytes);
          cpu::take(x.data(), outer, n_axis, inner * static_cast<std::int64_t>(ts::itemsize(t)), idx, want.data());
          cu::take(x.data(), outer, n_axis, inner, ts::itemsize(t), idx.data(), nidx, got.data());
          EXPECT_TRUE(want == got) << ts::dtype_name(t) << " outer " << outer << " inner " << inner << " n_axis "
                                   << n_axis;
        }
}

// The update rows landing on each row of `rows`, as backend/cuda/
// eval_indexing.cpp lists them: [row_start (rows + 1), order].
std::vector<std::int64_t> bucket(const std::vector<std::int64_t>& ids, Slice rows, std::int64_t n, bool wrap) {
  const std::int64_t nr = rows.size();
  std::vector<std::vector<std::int64_t>> lists(static_cast<std::size_t>(nr));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::int64_t r = ids[i];
    if (wrap && r < 0) r += n;
    if (r >= rows.start && r < rows.stop) lists[static_cast<std::size_t>(r - rows.start)].push_back(static_cast<std::int64_t>(i));
  }
  std::vector<std::int64_t> csr(1, 0);
  for (const auto& l : lists) csr.push_back(csr.back() + static_cast<std::int64_t>(l.size()));
  for (const auto& l : lists) csr.insert(csr.end(), l.begin(), l.end());
  return csr;
}

TEST_F(CudaIndexing, ScatterRowsMatchCpu) {
  const std::int64_t n = 9;  // the output's rows
  // Duplicates (row 2 many times), negatives (wrapped or dropped), rows out
  // of range, rows outside the block.
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < 60; ++i) ids.push_back((i % 4 == 0) ? 2 : (i * 7) % 13 - 3);
  ids.push_back(-10);
  ids.push_back(9);
  ids.push_back(std::numeric_limits<std::int64_t>::max());
  const auto nrows = static_cast<std::int64_t>(ids.size());
  for (DType t : kDTypes)
    for (std::int64_t inner : {1, 3})
      for (Slice rows : {Slice{0, 9}, Slice{2, 5}, Slice{8, 9}})
        for (bool wrap : {true, false}) {
          const Bytes upd = values(t, nrows * inner, 3);
          const std::size_t nbytes = static_cast<std::size_t>(rows.size() * inner) * ts::itemsize(t);
          Bytes want(nbytes, 0), got = garbage(nbytes);  // the CPU's partial starts zeroed
          cpu::scatter_rows(t, want.data(), rows, inner, DType::i64, ids.data(), upd.data(), nrows, n, wrap);
          const auto csr = bucket(ids, rows, n, wrap);
          cu::scatter_rows(t, got.data(), rows.size(), inner, csr.data(), csr.data() + rows.size() + 1, upd.data());
          EXPECT_TRUE(want == got) << ts::dtype_name(t) << " inner " << inner << " rows [" << rows.start << ", "
                                   << rows.stop << ") wrap " << wrap;
        }
}

TEST_F(CudaIndexing, AddMatchesCpu) {
  for (DType t : kDTypes) {
    const std::int64_t n = 1000;
    const Bytes a = values(t, n, 5), b = values(t, n, 11);
    const std::size_t nbytes = static_cast<std::size_t>(n) * ts::itemsize(t);
    Bytes want = garbage(nbytes), got = garbage(nbytes);
    cpu::add(t, a.data(), b.data(), want.data(), n);
    cu::add(t, a.data(), b.data(), got.data(), n);
    EXPECT_TRUE(want == got) << ts::dtype_name(t);
  }
}

}  // namespace
