// visualize_sharding: the layout of a 1-d or 2-d array as a text grid.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "tessera/array.hpp"

namespace tessera {

namespace {

constexpr int kMaxWidth = 80;

std::string repeat(const char* s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Sizes proportional to `sizes`, summing to about `total`, each >= its minimum.
std::vector<int> proportional(const std::vector<std::int64_t>& sizes, int total, const std::vector<int>& minimum) {
  std::int64_t sum = 0;
  for (auto s : sizes) sum += s;
  std::vector<int> out(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    int w = static_cast<int>(std::lround(static_cast<double>(total) * static_cast<double>(sizes[i]) /
                                         static_cast<double>(std::max<std::int64_t>(sum, 1))));
    out[i] = std::max(w, minimum[i]);
  }
  return out;
}

}  // namespace

std::string visualize_sharding_str(const Shape& shape, const NamedSharding& sharding) {
  const int rank = static_cast<int>(shape.size());
  if (rank != 1 && rank != 2)
    throw ShapeError("[visualize_sharding] expected a 1-d or 2-d array, got shape " + shape_str(shape));
  sharding.check_rank(rank, "visualize_sharding");
  const Mesh& mesh = sharding.mesh();
  const int rdim = rank == 2 ? 0 : -1, cdim = rank - 1;
  const int kr = rank == 2 ? sharding.num_parts(0) : 1, kc = sharding.num_parts(cdim);
  const std::int64_t nr = rank == 2 ? shape[0] : 1, nc = shape[cdim];

  // Nonempty parts along each axis of the grid, and each cell's holders.
  std::vector<int> rows, cols;
  for (int r = 0; r < kr; ++r)
    if (block_size(nr, kr, r) > 0) rows.push_back(r);
  for (int c = 0; c < kc; ++c)
    if (block_size(nc, kc, c) > 0) cols.push_back(c);
  std::vector<std::vector<std::vector<int>>> ids(kr, std::vector<std::vector<int>>(kc));
  std::vector<int> empty_ids;
  for (int pos = 0; pos < mesh.size(); ++pos) {
    int r = rdim >= 0 ? sharding.part_index(rdim, pos) : 0, c = sharding.part_index(cdim, pos);
    int id = mesh.devices()[pos].id();
    if (block_size(nr, kr, r) == 0 || block_size(nc, kc, c) == 0)
      empty_ids.push_back(id);
    else
      ids[r][c].push_back(id);
  }
  // "CPU 0,1" or, as JAX prints GPUs, "GPU 0,1".
  const std::string kind = mesh.devices()[0].kind() == "cuda" ? "GPU " : "CPU ";
  auto label = [&](int r, int c) {
    auto v = ids[r][c];
    std::sort(v.begin(), v.end());
    std::string s = kind;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) s += ',';
      s += std::to_string(v[i]);
    }
    return s;
  };

  std::ostringstream os;
  if (!rows.empty() && !cols.empty()) {
    std::vector<std::int64_t> csz, rsz;
    std::vector<int> cmin(cols.size(), 0), rmin(rows.size(), 1);
    for (size_t j = 0; j < cols.size(); ++j) {
      csz.push_back(block_size(nc, kc, cols[j]));
      for (int r : rows) cmin[j] = std::max(cmin[j], static_cast<int>(label(r, cols[j]).size()) + 2);
    }
    for (int r : rows) rsz.push_back(block_size(nr, kr, r));
    const int ncol = static_cast<int>(cols.size()), nrow = static_cast<int>(rows.size());
    std::vector<int> w = proportional(csz, kMaxWidth - (ncol + 1), cmin);
    std::vector<int> h = rank == 1 ? std::vector<int>{1} : proportional(rsz, std::min(3 * nrow, std::max(24, nrow)), rmin);
    auto rule = [&](const char* l, const char* m, const char* r) {
      os << l;
      for (int j = 0; j < ncol; ++j) os << repeat("─", w[j]) << (j + 1 < ncol ? m : r);
      os << "\n";
    };
    rule("┌", "┬", "┐");
    for (int i = 0; i < nrow; ++i) {
      for (int line = 0; line < h[i]; ++line) {
        os << "│";
        for (int j = 0; j < ncol; ++j) {
          std::string text = line == (h[i] - 1) / 2 ? label(rows[i], cols[j]) : "";
          int left = (w[j] - static_cast<int>(text.size())) / 2;
          os << std::string(left, ' ') << text << std::string(w[j] - left - text.size(), ' ') << "│";
        }
        os << "\n";
      }
      if (i + 1 < nrow) rule("├", "┼", "┤");
    }
    rule("└", "┴", "┘");
  }
  if (!empty_ids.empty()) {
    std::sort(empty_ids.begin(), empty_ids.end());
    os << "empty blocks: " << kind;
    for (size_t i = 0; i < empty_ids.size(); ++i) os << (i ? "," : "") << empty_ids[i];
    os << "\n";
  }
  return os.str();
}

void visualize_sharding(const Array& array, std::ostream& os) {
  os << visualize_sharding_str(array.shape(), array.sharding());
}

void visualize_sharding(const Array& array) { visualize_sharding(array, std::cout); }

}  // namespace tessera
