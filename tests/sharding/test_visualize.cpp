// visualize_sharding: golden text for hand-picked layouts (each checked by
// hand against the layout rule: labels name the devices holding the block,
// widths and heights follow block sizes), the same text from an Array, a
// structural property test over random layouts, and the errors.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/array.hpp"
#include "tessera/device.hpp"
#include "tessera/mesh.hpp"
#include "tessera/sharding.hpp"

namespace ts = tessera;
using ts::testing::expect_error;

namespace {

ts::Mesh mesh4() {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>(d.begin(), d.begin() + 4), {4}, {"x"});
}
ts::Mesh mesh8() { return ts::make_mesh({8}, {"x"}); }
ts::Mesh mesh2x4() { return ts::make_mesh({2, 4}, {"x", "y"}); }
// Devices 7, 5, 6, 4 as a 2x2 mesh: positions and ids differ.
ts::Mesh odd_mesh() {
  auto d = ts::devices();
  return ts::Mesh(std::vector<ts::Device>{d[7], d[5], d[6], d[4]}, {2, 2}, {"a", "b"});
}

// Compares with a golden raw string (whose first newline is layout only) and
// checks that visualize_sharding on an Array with that layout prints the same.
void check_golden(const ts::Shape& shape, const ts::NamedSharding& sharding, const char* golden) {
  std::string expected(golden);
  if (!expected.empty() && expected[0] == '\n') expected.erase(0, 1);
  const std::string text = ts::visualize_sharding_str(shape, sharding);
  EXPECT_EQ(text, expected) << "actual output:\n" << text;
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  ts::Array a = ts::device_put(std::vector<float>(static_cast<std::size_t>(n), 1.f), shape, sharding);
  std::ostringstream os;
  ts::visualize_sharding(a, os);
  EXPECT_EQ(os.str(), text);
}

// 8 elements over 'x' on 4 devices: four equal blocks in a row.
TEST(VisualizeGolden, OneDimOverFourDevices) {
  check_golden({8}, ts::NamedSharding(mesh4(), ts::P("x")), R"TXT(
┌───────────────────┬───────────────────┬───────────────────┬───────────────────┐
│       CPU 0       │       CPU 1       │       CPU 2       │       CPU 3       │
└───────────────────┴───────────────────┴───────────────────┴───────────────────┘
)TXT");
}

// (8, 8) over P('x', 'y') on 2x4: rows follow x, columns follow y.
TEST(VisualizeGolden, TwoDimOverTwoByFour) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P("x", "y")), R"TXT(
┌───────────────────┬───────────────────┬───────────────────┬───────────────────┐
│                   │                   │                   │                   │
│       CPU 0       │       CPU 1       │       CPU 2       │       CPU 3       │
│                   │                   │                   │                   │
├───────────────────┼───────────────────┼───────────────────┼───────────────────┤
│                   │                   │                   │                   │
│       CPU 4       │       CPU 5       │       CPU 6       │       CPU 7       │
│                   │                   │                   │                   │
└───────────────────┴───────────────────┴───────────────────┴───────────────────┘
)TXT");
}

// Replicated: one block held by every device.
TEST(VisualizeGolden, TwoDimReplicated) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P()), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                             CPU 0,1,2,3,4,5,6,7                              │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// P('x') on 2x4: two row blocks, each held by the four devices of one x.
TEST(VisualizeGolden, PartiallyReplicatedRows) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P("x")), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                 CPU 0,1,2,3                                  │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                 CPU 4,5,6,7                                  │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// P(None, 'y') on 2x4: four column blocks, each held by the two devices of one y.
TEST(VisualizeGolden, PartiallyReplicatedColumns) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P(ts::none, "y")), R"TXT(
┌───────────────────┬───────────────────┬───────────────────┬───────────────────┐
│                   │                   │                   │                   │
│      CPU 0,4      │      CPU 1,5      │      CPU 2,6      │      CPU 3,7      │
│                   │                   │                   │                   │
└───────────────────┴───────────────────┴───────────────────┴───────────────────┘
)TXT");
}

// 10 rows over 4: blocks of 3, 3, 2, 2 rows; the first two are taller.
TEST(VisualizeGolden, UnevenRows) {
  check_golden({10, 4}, ts::NamedSharding(mesh4(), ts::P("x")), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                    CPU 0                                     │
│                                                                              │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 1                                     │
│                                                                              │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                    CPU 2                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                    CPU 3                                     │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// 10 over 4 in 1-d: blocks 3, 3, 2, 2; the first two are wider.
TEST(VisualizeGolden, UnevenColumns1d) {
  check_golden({10}, ts::NamedSharding(mesh4(), ts::P("x")), R"TXT(
┌───────────────────────┬───────────────────────┬───────────────┬───────────────┐
│         CPU 0         │         CPU 1         │     CPU 2     │     CPU 3     │
└───────────────────────┴───────────────────────┴───────────────┴───────────────┘
)TXT");
}

// (5, 7) over P('x', 'y'): rows 3, 2 and columns 2, 2, 2, 1.
TEST(VisualizeGolden, UnevenBothDims) {
  check_golden({5, 7}, ts::NamedSharding(mesh2x4(), ts::P("x", "y")), R"TXT(
┌─────────────────────┬─────────────────────┬─────────────────────┬───────────┐
│                     │                     │                     │           │
│        CPU 0        │        CPU 1        │        CPU 2        │   CPU 3   │
│                     │                     │                     │           │
│                     │                     │                     │           │
├─────────────────────┼─────────────────────┼─────────────────────┼───────────┤
│        CPU 4        │        CPU 5        │        CPU 6        │   CPU 7   │
│                     │                     │                     │           │
└─────────────────────┴─────────────────────┴─────────────────────┴───────────┘
)TXT");
}

// 3 elements over 8 devices: devices 3..7 hold empty blocks.
TEST(VisualizeGolden, FewerElementsThanDevices) {
  check_golden({3}, ts::NamedSharding(mesh8(), ts::P("x")), R"TXT(
┌─────────────────────────┬─────────────────────────┬─────────────────────────┐
│          CPU 0          │          CPU 1          │          CPU 2          │
└─────────────────────────┴─────────────────────────┴─────────────────────────┘
empty blocks: CPU 3,4,5,6,7
)TXT");
}

// 3 rows over 8 devices, 2-d.
TEST(VisualizeGolden, FewerRowsThanDevices) {
  check_golden({3, 8}, ts::NamedSharding(mesh8(), ts::P("x")), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                    CPU 0                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 1                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 2                                     │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
empty blocks: CPU 3,4,5,6,7
)TXT");
}

// Rows over ('x', 'y'): part = x * 4 + y, the mesh position itself.
TEST(VisualizeGolden, RowsOverTwoAxesXY) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P({"x", "y"})), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                    CPU 0                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 1                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 2                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 3                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 4                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 5                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 6                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 7                                     │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// Rows over ('y', 'x'): part = y * 2 + x, so the order is 0, 4, 1, 5, 2, 6, 3, 7.
TEST(VisualizeGolden, RowsOverTwoAxesYX) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P({"y", "x"})), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                    CPU 0                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 4                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 1                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 5                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 2                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 6                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 3                                     │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                    CPU 7                                     │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// P('y', 'x'): rows follow y (4 parts), columns follow x (2 parts).
TEST(VisualizeGolden, TransposedAxes) {
  check_golden({8, 8}, ts::NamedSharding(mesh2x4(), ts::P("y", "x")), R"TXT(
┌───────────────────────────────────────┬───────────────────────────────────────┐
│                                       │                                       │
│                 CPU 0                 │                 CPU 4                 │
│                                       │                                       │
├───────────────────────────────────────┼───────────────────────────────────────┤
│                                       │                                       │
│                 CPU 1                 │                 CPU 5                 │
│                                       │                                       │
├───────────────────────────────────────┼───────────────────────────────────────┤
│                                       │                                       │
│                 CPU 2                 │                 CPU 6                 │
│                                       │                                       │
├───────────────────────────────────────┼───────────────────────────────────────┤
│                                       │                                       │
│                 CPU 3                 │                 CPU 7                 │
│                                       │                                       │
└───────────────────────────────────────┴───────────────────────────────────────┘
)TXT");
}

// A mesh over devices 7, 5, 6, 4: labels name device ids, sorted within a block.
TEST(VisualizeGolden, LabelsAreDeviceIdsNotPositions) {
  check_golden({4, 6}, ts::NamedSharding(odd_mesh(), ts::P("b")), R"TXT(
┌──────────────────────────────────────────────────────────────────────────────┐
│                                                                              │
│                                   CPU 6,7                                    │
│                                                                              │
├──────────────────────────────────────────────────────────────────────────────┤
│                                                                              │
│                                   CPU 4,5                                    │
│                                                                              │
└──────────────────────────────────────────────────────────────────────────────┘
)TXT");
}

// Same mesh, P('a', 'b'): one device per block, in mesh order.
TEST(VisualizeGolden, LabelsAreDeviceIdsNotPositions2d) {
  check_golden({4, 6}, ts::NamedSharding(odd_mesh(), ts::P("a", "b")), R"TXT(
┌───────────────────────────────────────┬───────────────────────────────────────┐
│                                       │                                       │
│                 CPU 7                 │                 CPU 5                 │
│                                       │                                       │
├───────────────────────────────────────┼───────────────────────────────────────┤
│                                       │                                       │
│                 CPU 6                 │                 CPU 4                 │
│                                       │                                       │
└───────────────────────────────────────┴───────────────────────────────────────┘
)TXT");
}

// (5,) over ('b', 'a') on devices 7, 5, 6, 4: parts are positions 0, 2, 1, 3.
TEST(VisualizeGolden, LabelsAreDeviceIdsNotPositions1d) {
  check_golden({5}, ts::NamedSharding(odd_mesh(), ts::P({"b", "a"})), R"TXT(
┌──────────────────────────────┬───────────────┬───────────────┬───────────────┐
│            CPU 7             │     CPU 6     │     CPU 5     │     CPU 4     │
└──────────────────────────────┴───────────────┴───────────────┴───────────────┘
)TXT");
}

// No elements at all: every device holds an empty block; no grid.
TEST(VisualizeGolden, ZeroRows) {
  check_golden({0, 4}, ts::NamedSharding(mesh4(), ts::P("x")), R"TXT(
empty blocks: CPU 0,1,2,3
)TXT");
}

// ------------------------------------------------------------- the Array form

TEST(Visualize, ArrayFormPrintsToStdoutToo) {
  ts::NamedSharding s(mesh2x4(), ts::P("x", "y"));
  ts::Array a = ts::device_put(std::vector<std::int32_t>(6 * 9, 3), {6, 9}, s);
  testing::internal::CaptureStdout();
  ts::visualize_sharding(a);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out, ts::visualize_sharding_str({6, 9}, s));
  EXPECT_NE(out.find("CPU 7"), std::string::npos);
}

// ------------------------------------------------ structure over random layouts

// Number of UTF-8 code points (all box characters are one column wide).
int columns(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

// "CPU 1,5" -> {1, 5}.
std::vector<int> parse_ids(const std::string& list) {
  std::vector<int> ids;
  std::istringstream is(list);
  for (std::string tok; std::getline(is, tok, ',');) ids.push_back(std::stoi(tok));
  return ids;
}

// Widths of the cells of a rule line like "┌───┬──┐" (in columns).
std::vector<int> rule_widths(const std::string& line) {
  std::vector<int> w;
  int cur = -1;
  for (size_t i = 0; i < line.size();) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    std::string ch = line.substr(i, len);
    if (ch == "─") {
      ++cur;
    } else {
      if (cur >= 0) w.push_back(cur + 1);
      cur = -1;
    }
    i += len;
  }
  return w;
}

// Bigger blocks are drawn at least as big; equal blocks equally big.
void check_monotone(const std::vector<std::int64_t>& sizes, const std::vector<int>& drawn, const char* what) {
  ASSERT_EQ(sizes.size(), drawn.size()) << what;
  for (size_t i = 0; i < sizes.size(); ++i)
    for (size_t j = 0; j < sizes.size(); ++j) {
      if (sizes[i] == sizes[j]) {
        EXPECT_EQ(drawn[i], drawn[j]) << what << " " << i << " vs " << j;
      }
      if (sizes[i] > sizes[j]) {
        EXPECT_GE(drawn[i], drawn[j]) << what << " " << i << " vs " << j;
      }
    }
}

// Checks the text against the layout rule: cell labels in reading order name
// exactly the holders of each nonempty block, every device appears once, and
// the grid is rectangular with sizes following the blocks.
void check_structure(const ts::Shape& shape, const ts::NamedSharding& s) {
  const std::string text = ts::visualize_sharding_str(shape, s);
  SCOPED_TRACE("output:\n" + text);
  const ts::Mesh& mesh = s.mesh();
  const int rank = static_cast<int>(shape.size());
  const std::int64_t nr = rank == 2 ? shape[0] : 1, nc = shape[rank - 1];
  const int kr = rank == 2 ? s.num_parts(0) : 1, kc = s.num_parts(rank - 1);
  // Expected labels, row-major over nonempty blocks; and the empty holders.
  std::map<std::pair<int, int>, std::vector<int>> holders;
  std::vector<int> empty;
  for (int pos = 0; pos < mesh.size(); ++pos) {
    auto idx = s.shard_index(shape, pos);
    bool is_empty = false;
    for (auto& sl : idx) is_empty = is_empty || sl.size() == 0;
    int r = rank == 2 ? s.part_index(0, pos) : 0, c = s.part_index(rank - 1, pos);
    if (is_empty)
      empty.push_back(mesh.devices()[pos].id());
    else
      holders[{r, c}].push_back(mesh.devices()[pos].id());
  }
  std::vector<std::vector<int>> expect_labels;
  std::vector<std::int64_t> rsz, csz;
  for (int r = 0; r < kr; ++r)
    if (ts::block_size(nr, kr, r) > 0) rsz.push_back(ts::block_size(nr, kr, r));
  for (int c = 0; c < kc; ++c)
    if (ts::block_size(nc, kc, c) > 0) csz.push_back(ts::block_size(nc, kc, c));
  for (auto& [rc, ids] : holders) {
    std::sort(ids.begin(), ids.end());
    expect_labels.push_back(ids);
  }
  std::sort(empty.begin(), empty.end());

  std::vector<std::vector<int>> labels;
  std::vector<int> empty_seen;
  std::vector<std::string> grid;
  for (const auto& line : split_lines(text)) {
    if (line.rfind("empty blocks: CPU ", 0) == 0) {
      empty_seen = parse_ids(line.substr(18));
      continue;
    }
    grid.push_back(line);
    for (size_t p = line.find("CPU "); p != std::string::npos; p = line.find("CPU ", p + 4)) {
      size_t e = line.find(' ', p + 4);
      labels.push_back(parse_ids(line.substr(p + 4, e - p - 4)));
    }
  }
  EXPECT_EQ(labels, expect_labels);
  EXPECT_EQ(empty_seen, empty);
  if (expect_labels.empty()) {
    EXPECT_TRUE(grid.empty());
    return;
  }
  ASSERT_GE(grid.size(), 3u);
  const int width = columns(grid[0]);
  // Nominally 80 columns; per-column rounding and minimum label widths can
  // push it a little past that (see the report: cosmetic, not a contract).
  EXPECT_LE(width, 100);
  for (const auto& l : grid) EXPECT_EQ(columns(l), width) << l;
  EXPECT_EQ(grid.front().rfind("┌", 0), 0u);
  EXPECT_EQ(grid.back().rfind("└", 0), 0u);
  // Column widths from the top rule; row heights from the separators.
  check_monotone(csz, rule_widths(grid[0]), "column widths");
  std::vector<int> heights;
  int h = 0;
  for (size_t i = 1; i < grid.size(); ++i) {
    if (grid[i].rfind("│", 0) == 0) {
      ++h;
    } else {
      EXPECT_TRUE(grid[i].rfind("├", 0) == 0 || grid[i].rfind("└", 0) == 0) << grid[i];
      EXPECT_EQ(rule_widths(grid[i]), rule_widths(grid[0]));
      heights.push_back(h);
      h = 0;
    }
  }
  if (rank == 2) {
    check_monotone(rsz, heights, "row heights");
  } else {
    EXPECT_EQ(heights, std::vector<int>{1});
  }
}

TEST(VisualizeStructure, RandomLayouts) {
  std::mt19937 rng(4242u);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<ts::Mesh> meshes = {mesh4(), mesh8(), mesh2x4(), odd_mesh(),
                                        ts::make_mesh({2, 2, 2}, {"p", "q", "r"})};
  for (int iter = 0; iter < 1000; ++iter) {
    const ts::Mesh& mesh = meshes[uni(0, static_cast<int>(meshes.size()) - 1)];
    const int rank = uni(1, 2);
    ts::NamedSharding s(mesh, ts::testing::random_spec(rng, mesh, rank, /*mixed_forms=*/false));
    ts::Shape shape(rank);
    for (auto& n : shape) n = uni(0, 5) == 0 ? uni(0, 3) : uni(1, 40);
    SCOPED_TRACE("case " + std::to_string(iter) + ": " + s.str() + " shape " + ts::shape_str(shape));
    check_structure(shape, s);
    if (HasFailure()) return;
  }
}

TEST(VisualizeStructure, UnevenRowsHaveDifferentHeights) {
  const std::string text = ts::visualize_sharding_str({10, 4}, ts::NamedSharding(mesh4(), ts::P("x")));
  std::vector<int> heights;
  int h = 0;
  for (const auto& l : split_lines(text)) {
    if (l.rfind("│", 0) == 0) {
      ++h;
    } else if (l.rfind("├", 0) == 0 || l.rfind("└", 0) == 0) {
      heights.push_back(h);
      h = 0;
    }
  }
  ASSERT_EQ(heights.size(), 4u);
  EXPECT_EQ(heights[0], heights[1]);
  EXPECT_EQ(heights[2], heights[3]);
  EXPECT_GT(heights[0], heights[2]);  // 3 rows drawn taller than 2 rows
}

// --------------------------------------------------------------------- errors

TEST(VisualizeErrors, RankThreeIsAShapeError) {
  ts::NamedSharding s(mesh2x4(), ts::P("x"));
  expect_error<ts::ShapeError>([&] { ts::visualize_sharding_str({2, 2, 2}, s); }, "[visualize_sharding]",
                               {"1-d or 2-d", "(2, 2, 2)"});
  ts::Array a = ts::device_put(std::vector<float>(8, 0.f), {2, 2, 2}, s);
  std::ostringstream os;
  expect_error<ts::ShapeError>([&] { ts::visualize_sharding(a, os); }, "[visualize_sharding]",
                               {"1-d or 2-d", "(2, 2, 2)"});
  EXPECT_TRUE(os.str().empty());
}

TEST(VisualizeErrors, ScalarIsAShapeError) {
  expect_error<ts::ShapeError>([&] { ts::visualize_sharding_str({}, ts::NamedSharding(mesh2x4(), ts::P())); },
                               "[visualize_sharding]", {"1-d or 2-d", "()"});
}

TEST(VisualizeErrors, SpecLongerThanRankIsAShardingError) {
  expect_error<ts::ShardingError>(
      [&] { ts::visualize_sharding_str({8}, ts::NamedSharding(mesh2x4(), ts::P("x", "y"))); },
      "[visualize_sharding]", {"2 entries", "rank 1"});
}

}  // namespace
