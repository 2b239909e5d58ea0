// NdIndex, the N-d walk under the kernels: visiting order, offsets against a
// plain recomputation, and the edge extents (rank 0, a zero dim).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/nd_index.hpp"

namespace {

using tessera::detail::first_dims;
using tessera::detail::NdIndex;

TEST(NdIndex, RowMajorOrderAndOffsetsMatchRecomputation) {
  // Strides of every kind: positive, negative (a flip), zero (a broadcast).
  const std::vector<std::int64_t> extent{2, 3, 4}, a{12, 4, 1}, b{-5, 0, 7};
  NdIndex it(extent, a, b);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t k = 0; k < 4; ++k) {
        ASSERT_FALSE(it.done());
        EXPECT_EQ(it.offset(0), i * 12 + j * 4 + k);
        EXPECT_EQ(it.offset(1), -5 * i + 7 * k);
        EXPECT_EQ(it.index(0), i);
        EXPECT_EQ(it.index(1), j);
        EXPECT_EQ(it.index(2), k);
        it.next();
      }
  EXPECT_TRUE(it.done());
}

// Without offsets it is a plain counter over mixed radices (the sharding
// engine's walk over factor assignments).
TEST(NdIndex, CountsWithoutOffsets) {
  std::vector<std::int64_t> seen;
  for (NdIndex<0> it(std::vector<std::int64_t>{3, 1, 2}); !it.done(); it.next())
    seen.push_back(it.index(0) * 100 + it.index(1) * 10 + it.index(2));
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 100, 101, 200, 201}));
}

TEST(NdIndex, RankZeroIsVisitedOnce) {
  int visits = 0;
  for (NdIndex it(std::vector<std::int64_t>{}, std::vector<std::int64_t>{}); !it.done(); it.next()) {
    EXPECT_EQ(it.offset(0), 0);
    ++visits;
  }
  EXPECT_EQ(visits, 1);
}

TEST(NdIndex, ZeroDimIsNotVisited) {
  int visits = 0;
  for (NdIndex it(std::vector<std::int64_t>{3, 0, 2}, std::vector<std::int64_t>{1, 1, 1}); !it.done(); it.next())
    ++visits;
  EXPECT_EQ(visits, 0);
}

TEST(NdIndex, OuterDimsOfFullRankStrides) {
  // The kernels' shape: walk all dims but the last, reading only the first
  // entries of full-rank strides.
  const std::vector<std::int64_t> shape{3, 2, 5}, strides{10, 5, 1};
  std::vector<std::int64_t> seen;
  for (NdIndex it(first_dims(shape, 2), strides); !it.done(); it.next()) seen.push_back(it.offset(0));
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 5, 10, 15, 20, 25}));
}

}  // namespace
