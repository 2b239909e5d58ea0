// Generating shard_map bodies with collectives. Every body's global result
// is independent of the mesh, so the one-device run is the reference: each
// undoes its own distribution (psum of local sums, all_gather of the blocks,
// ppermute there and back, psum_scatter of x and zeros, ...), and collectives
// that need equal shapes only see layouts that give them. The one exception,
// a single ppermute (a shift of the blocks), is checked inside its step
// against the global roll it must equal (see ppermute_roll).
#include <numeric>

#include "fuzz/generator.hpp"

namespace tessera::fuzz::gen {

// Number of parts dim `d` is split into on the sharded mesh.
int Gen::parts(const PartitionSpec& sp, int d) const {
  int n = 1;
  for (const auto& a : sp[d].axes()) n *= p_.mesh.axis_size(a);
  return n;
}

std::vector<std::string> Gen::spec_axes(const PartitionSpec& sp, int r) const {
  std::vector<std::string> out;
  for (int d = 0; d < r; ++d)
    for (const auto& a : sp[d].axes()) out.push_back(a);
  return out;
}

// Two inputs with the same spec have the same blocks: an elementwise body
// gives the global result (each input resharded to the spec first).
bool Gen::shard_map_two_inputs(int x, const PartitionSpec& in) {
  const int y = source(shape(x), coin(0.7) ? dtype(x) : random_dtype(), true, spec(rank(x)));
  if (y < 0) return false;
  const int f = uni(0, 2);
  const char* texts[] = {"xl + yl", "maximum(xl, yl)", "xl * yl"};
  const std::string text = std::string("shard_map([](xl, yl) { return ") + texts[f] + "; }, in={" + spec_text(in) +
                           ", " + spec_text(in) + "}, out=" + spec_text(in) + ")(" + vn(x) + ", " + vn(y) + ")";
  const int o = emit("shard_map.two_inputs", text, {x, y}, [in, f](const Mesh& m, const Args& a) {
    auto g = shard_map(
        [f](Array xl, Array yl) { return f == 0 ? xl + yl : f == 1 ? maximum(xl, yl) : xl * yl; }, m, {in, in}, in);
    return g(a[0], a[1]);
  });
  if (o >= 0 && (!exact(x) || !exact(y))) {
    const double ex = st(x).err, ey = st(y).err;
    set_err(o, (f == 0 ? ex + ey : f == 1 ? std::max(ex, ey) : ex * (st(y).maxabs + ey) + ey * st(x).maxabs) +
                   2 * slack(o));
  }
  return true;
}

// One ppermute, a shift by k along mesh axis `a`, of an array whose dim `d`
// is split evenly with `a` as its major axis: the device at coordinate c on
// `a` receives block c - k, so the global result is roll(x, k * len / |a|, d)
// (the other axes of the entry only subdivide each of `a`'s blocks). Unlike
// the there-and-back body, this pins down the direction: a ppermute that
// sent each block the wrong way (source and destination swapped) still
// undoes itself, but shifts by -k here. The shift depends on the mesh, so
// the step compares the two inside the program and returns equal(ppermute
// body, roll): all true on the sharded mesh and on the reference (where
// |a| = 1 makes both the identity), except where x is NaN on both.
bool Gen::ppermute_roll() {
  // Read exactly, and values of more than one magnitude (never an earlier
  // comparison's all-true result, zeros or ones): a constant input cannot
  // tell one shift from another.
  // No NaN either: a NaN moved by the shift compares unequal on the sharded
  // mesh but not on the reference, where nothing moves. (A new source made
  // by operand() need not satisfy the predicate: checked again here.)
  auto fits = [&](int i) { return st(i).finite && st(i).maxabs > st(i).minabs && st(i).minabs > 0; };
  const int x = operand(fits, 1, true);
  if (x < 0 || !fits(x) || numel(shape(x)) == 0) return false;
  const Shape sx = shape(x);
  const int r = rank(x);
  PartitionSpec in = testing::random_spec(rng_, p_.mesh, r);
  // The longest axes first: on 2 devices a shift either way is the same
  // permutation, so the direction goes unchecked, and on 1 nothing moves.
  std::vector<std::string> axes_by_size[3];  // sizes 1, 2, 3 or more
  for (const auto& b : p_.mesh.axis_names()) axes_by_size[std::min(p_.mesh.axis_size(b), 3) - 1].push_back(b);
  int size_class = 2;
  while (axes_by_size[size_class].empty()) --size_class;
  const std::string a = pick(axes_by_size[size_class]);
  const int n = p_.mesh.axis_size(a);
  // Dim d (mostly a non-empty one that `a` splits evenly) gets `a` as its
  // major axis, with some of its other axes after it; no other dim names `a`.
  std::vector<int> dims;
  for (int i = 0; i < r; ++i)
    if (sx[static_cast<std::size_t>(i)] > 0 && sx[static_cast<std::size_t>(i)] % n == 0) dims.push_back(i);
  const int d = !dims.empty() && coin(0.9) ? pick(dims) : uni(0, r - 1);
  std::vector<PartitionSpec::Entry> e;
  for (int i = 0; i < r; ++i) {
    std::vector<std::string> ax;
    if (i == d) ax.push_back(a);
    for (const auto& b : in[i].axes())
      if (b != a && (i != d || coin(0.5))) ax.push_back(b);
    e.push_back(ax.empty() ? PartitionSpec::Entry(none) : PartitionSpec::Entry(ax));
  }
  in = PartitionSpec(e);
  const std::int64_t len = sx[static_cast<std::size_t>(d)];
  if (len % parts(in, d) != 0) {
    // The minor axes split it unevenly: `a` alone, then.
    in = with_entry(in, r, d, PartitionSpec::Entry(a));
    if (len % n != 0) return false;
  }
  // A k with 2k != 0 mod n, where there is one, so that a shift the wrong
  // way round differs from the right one.
  int k = n > 1 ? uni(1, n - 1) : 0;
  if (n > 2 && 2 * k == n) k = coin(0.5) ? 1 : n - 1;
  const std::string text = "equal(shard_map([](xl) { return ppermute(xl, '" + a + "', shift by " + std::to_string(k) +
                           "); }, in=" + spec_text(in) + ", out=" + spec_text(in) + ")(" + vn(x) + "), roll(reshard(" +
                           vn(x) + ", " + spec_text(in) + "), " + std::to_string(k) + " * len / |" + a + "|, " +
                           std::to_string(d) + "))";
  emit("ppermute.roll", text, {x}, [a, k, d, len, in](const Mesh& m, const Args& args) {
    const Array xs = reshard(args[0], in);  // both sides share one layout (Explicit meshes need that)
    const Array moved = shard_map(
        [a, k](Array xl) {
          // Built from the axis size here, so the one-device run gets its own
          // (trivial) permutation.
          const int size = axis_size(a);
          std::vector<std::pair<int, int>> perm;
          for (int i = 0; i < size; ++i) perm.emplace_back(i, (i + k) % size);
          return ppermute(xl, a, perm);
        },
        m, {in}, in)(xs);
    const int size = m.axis_size(a);
    return equal(moved, roll(xs, (k % size) * (len / size), d));
  });
  return true;
}

bool Gen::shard_map_op() {
  const int kind = uni(0, 8);
  if (kind == 8) return ppermute_roll();  // one ppermute against the global roll
  const int x = operand(kind == 0 || kind == 2 ? 0 : 1, kind == 2);
  if (x < 0) return false;
  const Shape sx = shape(x);
  const int r = rank(x);
  const Stats s = stats(x);
  PartitionSpec in = testing::random_spec(rng_, p_.mesh, r);
  const auto axes = spec_axes(in, r);
  switch (kind) {
    case 0: {  // local work: out_specs = in_specs
      std::vector<int> whole;  // dims the spec leaves whole
      for (int d = 0; d < r; ++d)
        if (in[d].is_none()) whole.push_back(d);
      if (!whole.empty() && coin(0.4)) {
        const int d = pick(whole), f = uni(0, 2);
        const char* texts[] = {"cumsum(xl, D)", "sum(xl, D, keepdims)", "flip(xl, D)"};
        std::string t = texts[f];
        t.replace(t.find('D'), 1, std::to_string(d));
        const int o = smap("shard_map.local", "[](xl) { return " + t + "; }", x, in, in, [f, d](Array xl) {
          return f == 0 ? cumsum(xl, d) : f == 1 ? sum(xl, d, {.keepdims = true}) : flip(xl, d);
        });
        const double len = static_cast<double>(sx[static_cast<std::size_t>(d)]);
        if (f == 2) set_err(o, s.err);
        else set_sum_err(o, len, s.maxabs, s.grid, len * s.err);
        return true;
      }
      if (coin(0.3)) return shard_map_two_inputs(x, in);
      const int f = uni(0, 2);
      const char* texts[] = {"[](xl) { return 2 * sin(xl) + 1; }", "[](xl) { return xl * xl - xl; }",
                             "[](xl) { return abs(negative(xl)); }"};
      const int o = smap("shard_map.local", texts[f], x, in, in, [f](Array xl) {
        return f == 0 ? 2.0 * sin(xl) + 1.0 : f == 1 ? xl * xl - xl : abs(negative(xl));
      });
      if (o >= 0 && !exact(x)) set_err(o, (f == 1 ? s.err * (2 * s.maxabs + 1 + s.err) : 2 * s.err) + 4 * slack(o));
      return true;
    }
    case 1: {  // psum of local sums: the global sum
      const int o = smap("psum", "[](xl) { return psum(sum(xl), " + names_text(axes) + "); }", x, in, P(),
                         [axes](Array xl) { return axes.empty() ? sum(xl) : psum(sum(xl), axes); });
      set_sum_err(o, static_cast<double>(numel(sx)), s.maxabs, s.grid, static_cast<double>(numel(sx)) * s.err);
      return true;
    }
    case 2: {  // pmax / pmin of local max / min: needs every block non-empty
      if (numel(sx) == 0 || axes.empty()) return false;
      for (int d = 0; d < r; ++d)
        if (sx[static_cast<std::size_t>(d)] < parts(in, d)) return false;
      const bool is_max = coin(0.5);
      const int o = smap(is_max ? "pmax" : "pmin",
                         std::string("[](xl) { return ") + (is_max ? "pmax(max" : "pmin(min") + "(xl), " +
                             names_text(axes) + "); }",
                         x, in, P(), [axes, is_max](Array xl) { return is_max ? pmax(max(xl), axes) : pmin(min(xl), axes); });
      set_err(o, s.err);
      return true;
    }
    case 3: {  // pmean of local sums, times the group size: the global sum
      if (axes.empty() || !is_float(dtype(x))) return false;
      const int o = smap("pmean",
                         "[](xl) { return pmean(sum(xl), " + names_text(axes) + ") * group size; }", x, in, P(),
                         [axes](Array xl) {
                           int n = 1;
                           for (const auto& a : axes) n *= axis_size(a);
                           return pmean(sum(xl), axes) * n;
                         });
      if (o >= 0) {
        const double m = static_cast<double>(numel(sx));
        set_err(o, m * s.err + 2 * m * m * unit_roundoff(dtype(o)) * s.maxabs + 8 * slack(o));
      }
      return true;
    }
    case 4: {  // all_gather, tiled, along a sharded dim: the whole dim back
      std::vector<int> dims;
      for (int d = 0; d < r; ++d)
        if (!in[d].is_none()) dims.push_back(d);
      if (dims.empty()) return false;
      const int d = pick(dims);
      const auto ga = in[d].axes();
      const PartitionSpec out = with_entry(in, r, d, none);
      if (coin(0.3)) {
        // Untiled gather of the local sums, then their sum.
        if (spec_axes(in, r).size() != ga.size()) return false;
        const int o = smap("all_gather", "[](xl) { return sum(all_gather(sum(xl), " + names_text(ga) + ")); }", x, in,
                           P(), [ga](Array xl) { return sum(all_gather(sum(xl), ga, 0, false)); });
        set_sum_err(o, static_cast<double>(numel(sx)), s.maxabs, s.grid, static_cast<double>(numel(sx)) * s.err);
        return true;
      }
      const int o = smap("all_gather",
                         "[](xl) { return all_gather(xl, " + names_text(ga) + ", " + std::to_string(d) + ", tiled); }",
                         x, in, out, [ga, d](Array xl) { return all_gather(xl, ga, d, true); });
      set_err(o, s.err);
      return true;
    }
    case 5: {  // psum_scatter of (x on the group's first device, zeros elsewhere)
      if (dtype(x) == DType::bool_) return false;
      std::vector<int> dims;
      for (int d = 0; d < r; ++d)
        if (in[d].is_none()) dims.push_back(d);
      std::vector<std::string> free_axes;
      for (const auto& a : p_.mesh.axis_names())
        if (std::find(axes.begin(), axes.end(), a) == axes.end() && coin(0.7)) free_axes.push_back(a);
      if (dims.empty() || free_axes.empty()) return false;
      const int d = pick(dims);
      const PartitionSpec out = with_entry(in, r, d, PartitionSpec::Entry(free_axes));
      const int o = smap("psum_scatter",
                         "[](xl) { return psum_scatter(where(all axis_index(a) == 0 for a in " + names_text(free_axes) +
                             ", xl, -0.0), " + names_text(free_axes) + ", " + std::to_string(d) + ", tiled); }",
                         x, in, out, [free_axes, d](Array xl) {
                           Array first = axis_index(free_axes[0]) == 0;
                           for (std::size_t i = 1; i < free_axes.size(); ++i)
                             first = logical_and(first, axis_index(free_axes[i]) == 0);
                           // -0.0 is the exact identity of float addition (x + -0.0 keeps
                           // the sign of a zero x), so the sum is x bit for bit.
                           const Scalar zero = is_float(xl.dtype()) ? Scalar(-0.0) : Scalar(0);
                           return psum_scatter(where(first, xl, zero), free_axes, d, true);
                         });
      set_err(o, s.err);
      return true;
    }
    case 6: {  // ppermute there and back: needs equal blocks along the axis
      const auto& names = p_.mesh.axis_names();
      // Mostly an axis the input varies over (ppermute keeps it varying).
      const std::string a = !axes.empty() && coin(0.8) ? pick(axes) : pick(names);
      for (int d = 0; d < r; ++d) {
        const auto& e = in[d].axes();
        if (std::find(e.begin(), e.end(), a) != e.end() && sx[static_cast<std::size_t>(d)] % parts(in, d) != 0) return false;
      }
      // The permutation is built inside the body from the axis size, so the
      // one-device run gets its own (trivial) one.
      const bool rotate = coin(0.5);
      const unsigned perm_seed = static_cast<unsigned>(uni(0, 1 << 20));
      const std::string pt = rotate ? "rotate by 1" : "shuffle(" + std::to_string(perm_seed) + ")";
      const int o = smap("ppermute",
                         "[](xl) { return ppermute(ppermute(xl, '" + a + "', " + pt + "), '" + a + "', inverse); }",
                         x, in, in, [a, rotate, perm_seed](Array xl) {
                           const int n = axis_size(a);
                           std::vector<int> to(static_cast<std::size_t>(n));
                           std::iota(to.begin(), to.end(), 0);
                           if (rotate) std::rotate(to.begin(), to.begin() + 1, to.end());
                           else std::shuffle(to.begin(), to.end(), std::mt19937(perm_seed));
                           std::vector<std::pair<int, int>> fwd, back;
                           for (int i = 0; i < n; ++i) {
                             fwd.emplace_back(i, to[static_cast<std::size_t>(i)]);
                             back.emplace_back(to[static_cast<std::size_t>(i)], i);
                           }
                           return ppermute(ppermute(xl, a, fwd), a, back);
                         },
                         // ppermute marks its result varying over the axis, even when
                         // the input was the same on every device of it.
                         std::find(axes.begin(), axes.end(), a) != axes.end());
      set_err(o, s.err);
      return true;
    }
    default: {  // all_to_all: rows sharded over one axis -> columns sharded over it
      if (r < 2) return false;
      const int d0 = uni(0, r - 1);
      int d1 = uni(0, r - 2);
      if (d1 >= d0) ++d1;
      const std::string a = pick(p_.mesh.axis_names());
      std::vector<PartitionSpec::Entry> e;
      for (int d = 0; d < r; ++d) {
        const auto& ax = in[d].axes();
        const bool uses_a = std::find(ax.begin(), ax.end(), a) != ax.end();
        e.push_back(d == d0 ? PartitionSpec::Entry(a) : d == d1 || uses_a ? PartitionSpec::Entry(none) : in[d]);
      }
      in = PartitionSpec(e);
      if (sx[static_cast<std::size_t>(d0)] % p_.mesh.axis_size(a) != 0) return false;
      const PartitionSpec out = with_entry(with_entry(in, r, d0, none), r, d1, PartitionSpec::Entry(a));
      const int o = smap("all_to_all",
                         "[](xl) { return all_to_all(xl, '" + a + "', " + std::to_string(d1) + ", " +
                             std::to_string(d0) + ", tiled); }",
                         x, in, out, [a, d0, d1](Array xl) { return all_to_all(xl, a, d1, d0, true); });
      set_err(o, s.err);
      return true;
    }
  }
}

}  // namespace tessera::fuzz::gen
