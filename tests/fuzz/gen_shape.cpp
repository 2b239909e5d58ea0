// Generating shape ops, resharding, stencils, scans and indexing.
#include <numeric>

#include "fuzz/generator.hpp"

namespace tessera::fuzz::gen {

// ------------------------------------------------------------------ shape
bool Gen::shape_op() {
  const int x = operand(0);
  if (x < 0) return false;
  const Shape sx = shape(x);
  const int r = rank(x);
  const double e = st(x).err;
  auto done = [&](int o) {
    set_err(o, e);
    return true;
  };
  switch (uni(0, 11)) {
    case 0: {  // reshape
      const std::int64_t n = numel(sx);
      Shape to;
      std::int64_t rest = n;
      const int nr = uni(0, 4);
      for (int i = 0; i < nr - 1; ++i) {
        if (rest == 0) {
          to.push_back(uni(0, 3));
          continue;
        }
        std::vector<std::int64_t> divs;
        for (std::int64_t d = 1; d <= rest; ++d)
          if (rest % d == 0) divs.push_back(d);
        const std::int64_t d = pick(divs);
        to.push_back(d);
        rest /= d;
      }
      if (nr > 0) to.push_back(rest);
      if (n == 0 && nr > 0 && std::find(to.begin(), to.end(), 0) == to.end()) to[0] = 0;
      if (nr == 0 && n != 1) to.push_back(n);
      if (!to.empty() && n > 0 && coin(0.15)) to[static_cast<std::size_t>(uni(0, static_cast<int>(to.size()) - 1))] = -1;
      if (coin(0.03)) to.push_back(2);  // wrong element count
      // Explicit axes: whether the layout can be kept depends on the block
      // sizes, so without out_sharding only the sharded run may raise.
      const auto out = explicit_ || coin(0.1) ? std::optional<PartitionSpec>(spec(static_cast<int>(to.size())))
                                              : std::nullopt;
      return done(emit("reshape", "reshape(" + vn(x) + ", " + shape_str(to) + out_text(out) + ")", {x},
                       [to, out](const Mesh&, const Args& a) { return reshape(a[0], to, {.out_sharding = out}); }));
    }
    case 1: {  // transpose
      std::vector<int> perm(static_cast<std::size_t>(r));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng_);
      if (coin(0.3)) perm.clear();
      if (coin(0.02)) perm.push_back(r);
      return done(emit("transpose", "transpose(" + vn(x) + ", " + ints_text(perm) + ")", {x},
                       [perm](const Mesh&, const Args& a) { return transpose(a[0], perm); }));
    }
    case 2: {
      if (r == 0) return false;
      const int a1 = uni(-r, r - 1), a2 = uni(-r, r - 1);
      return done(emit("swapaxes", "swapaxes(" + vn(x) + ", " + std::to_string(a1) + ", " + std::to_string(a2) + ")",
                       {x}, [a1, a2](const Mesh&, const Args& a) { return swapaxes(a[0], a1, a2); }));
    }
    case 3: {
      if (coin(0.5)) {
        const int ax = uni(-r - 1, r);
        return done(emit("expand_dims", "expand_dims(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                         [ax](const Mesh&, const Args& a) { return expand_dims(a[0], ax); }));
      }
      std::vector<int> ax;
      for (int d = 0; d < r; ++d)
        if ((sx[static_cast<std::size_t>(d)] == 1 || coin(0.02)) && coin(0.7)) ax.push_back(coin(0.3) ? d - r : d);
      return done(emit("squeeze", "squeeze(" + vn(x) + ", " + ints_text(ax) + ")", {x},
                       [ax](const Mesh&, const Args& a) { return squeeze(a[0], ax); }));
    }
    case 4: {  // broadcast_to
      Shape to;
      for (int i = coin(0.5) ? uni(1, 2) : 0; i > 0; --i) to.push_back(uni(1, 4));
      for (auto d : sx) to.push_back(d == 1 && coin(0.5) ? uni(0, 5) : d);
      if (coin(0.03) && !to.empty()) to.back() += 1;
      if (numel(to) > kMaxResult) return false;
      return done(emit("broadcast_to", "broadcast_to(" + vn(x) + ", " + shape_str(to) + ")", {x},
                       [to](const Mesh&, const Args& a) { return broadcast_to(a[0], to); }));
    }
    case 5: {  // slice
      std::vector<SliceSpec> sl;
      std::string t;
      const int ns = coin(0.8) ? r : uni(0, r);
      for (int d = 0; d < ns; ++d) {
        const std::int64_t n = sx[static_cast<std::size_t>(d)];
        SliceSpec s;
        if (coin(0.6)) s.start = uni(static_cast<int>(-n - 2), static_cast<int>(n + 2));
        if (coin(0.6)) s.stop = uni(static_cast<int>(-n - 2), static_cast<int>(n + 2));
        s.step = pick(std::vector<std::int64_t>{1, 1, 1, 2, 3, -1, -2});
        if (coin(0.01)) s.step = 0;
        sl.push_back(s);
        if (d) t += ", ";
        t += (s.start ? std::to_string(*s.start) : "") + ":" +
             (s.stop ? std::to_string(*s.stop) : "") + ":" + std::to_string(s.step);
      }
      return done(emit("slice", vn(x) + "[" + t + "]", {x}, [sl](const Mesh&, const Args& a) { return slice(a[0], sl); }));
    }
    case 6: case 7: {  // concatenate / stack
      const bool stack_op = coin(0.35);
      if (!stack_op && r == 0) return false;
      const int axis = stack_op ? uni(-r - 1, r) : uni(-r, r - 1);
      const int ad = axis < 0 ? axis + r : axis;
      std::vector<int> ids{x};
      double err = e;
      for (int i = uni(0, 2); i > 0; --i) {
        if (coin(0.25)) {
          ids.push_back(x);
          continue;
        }
        Shape ps = sx;
        if (!stack_op && ad >= 0 && ad < r) ps[static_cast<std::size_t>(ad)] = uni(0, 4);
        if (coin(0.02) && !ps.empty()) ps[0] += 1;
        const int p = source(ps, coin(0.8) ? dtype(x) : random_dtype(), true, partner_spec(x, ps));
        if (p < 0) return false;
        ids.push_back(p);
      }
      std::shuffle(ids.begin(), ids.end(), rng_);
      std::string t;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i) t += ", ";
        t += vn(ids[i]);
      }
      const char* name = stack_op ? "stack" : "concatenate";
      const int o = emit(name, std::string(name) + "({" + t + "}, " + std::to_string(axis) + ")", ids,
                         [stack_op, axis](const Mesh&, const Args& a) {
                           return stack_op ? stack(a, axis) : concatenate(a, axis);
                         });
      set_err(o, err);
      return true;
    }
    case 8: {  // pad
      std::vector<std::pair<std::int64_t, std::int64_t>> w;
      std::string t;
      for (int d = 0; d < r; ++d) {
        w.emplace_back(uni(0, 3), uni(0, 3));
        if (coin(0.01)) w.back().first = -1;
        if (d) t += ", ";
        t += "(" + std::to_string(w.back().first) + "," + std::to_string(w.back().second) + ")";
      }
      if (coin(0.02)) w.emplace_back(1, 1);
      const Sc c = random_scalar();
      std::int64_t out = 1;
      for (int d = 0; d < r; ++d) out *= sx[static_cast<std::size_t>(d)] + 6;
      if (out > kMaxResult * 4) return false;
      return done(emit("pad", "pad(" + vn(x) + ", {" + t + "}, " + c.text + ")", {x},
                       [w, c](const Mesh&, const Args& a) { return pad(a[0], w, c.value); }));
    }
    case 9: case 10: {
      if (r == 0) return false;
      const int ax = uni(-r, r - 1);
      if (coin(0.5)) {
        const std::int64_t n = sx[static_cast<std::size_t>((ax + r) % r)];
        const std::int64_t shift = uni(static_cast<int>(-2 * n - 1), static_cast<int>(2 * n + 1));
        return done(emit("roll", "roll(" + vn(x) + ", " + std::to_string(shift) + ", " + std::to_string(ax) + ")", {x},
                         [shift, ax](const Mesh&, const Args& a) { return roll(a[0], shift, ax); }));
      }
      return done(emit("flip", "flip(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                       [ax](const Mesh&, const Args& a) { return flip(a[0], ax); }));
    }
    default: {  // reshard / with_sharding_constraint / device_put
      const PartitionSpec sp = spec(r);
      if (coin(0.05)) {
        // Operands on different meshes: every layout must refuse.
        return done(emit("device_put.other_mesh",
                         "add(device_put(" + vn(x) + ", NamedSharding(other devices, " + spec_text(sp) + ")), " +
                             vn(x) + ")",
                         {x}, [sp](const Mesh& m, const Args& a) {
                           return add(device_put(a[0], NamedSharding(shifted_mesh(m), sp)), a[0]);
                         }));
      }
      if (coin(0.25)) {
        // Through a mesh of other devices (moved via the host) and back.
        const PartitionSpec there = spec(r);
        return done(emit("device_put.other_mesh",
                         "device_put(device_put(" + vn(x) + ", NamedSharding(other devices, " + spec_text(there) +
                             ")), " + spec_text(sp) + ")",
                         {x}, [there, sp](const Mesh& m, const Args& a) {
                           return device_put(device_put(a[0], NamedSharding(shifted_mesh(m), there)),
                                             NamedSharding(m, sp));
                         }));
      }
      const int how = uni(0, 2);
      const char* names[] = {"reshard", "with_sharding_constraint", "device_put"};
      return done(emit(names[how], std::string(names[how]) + "(" + vn(x) + ", " + spec_text(sp) + ")", {x},
                       [how, sp](const Mesh& m, const Args& a) {
                         if (how == 0) return reshard(a[0], sp);
                         if (how == 1) return with_sharding_constraint(a[0], NamedSharding(m, sp));
                         return device_put(a[0], NamedSharding(m, sp));
                       }));
    }
  }
}

// ------------------------------------------------------ stencils and scans
bool Gen::stencil() {
  const int kind = uni(0, 4);
  if (kind == 4) return interp_op();
  const int x = operand(kind == 3 ? 2 : 1);
  if (x < 0) return false;
  const Shape sx = shape(x);
  const int r = rank(x);
  const Stats s = stats(x);
  const int ax = r == 0 ? 0 : uni(-r, r - 1);
  const int ad = r == 0 ? 0 : (ax + r) % r;
  const std::int64_t len = r == 0 ? 1 : sx[static_cast<std::size_t>(ad)];
  if (kind == 0) {  // diff
    const int n = pick(std::vector<int>{0, 1, 1, 1, 2, 3});
    std::vector<int> args{x};
    int pre = -1, app = -1;
    for (int side = 0; side < 2; ++side) {
      if (!coin(0.3)) continue;
      Shape ps = sx;
      if (r > 0) ps[static_cast<std::size_t>(ad)] = uni(0, 2);
      const int id = source(ps, coin(0.8) ? dtype(x) : random_dtype(), true, partner_spec(x, ps));
      if (id < 0) return false;
      (side == 0 ? pre : app) = id;
      args.push_back(id);
    }
    std::string text = "diff(" + vn(x) + ", " + std::to_string(n) + ", " + std::to_string(ax) +
                       (pre >= 0 ? ", prepend=" + vn(pre) : "") + (app >= 0 ? ", append=" + vn(app) : "") + ")";
    const bool hp = pre >= 0, ha = app >= 0;
    const int o = emit("diff", text, args, [n, ax, hp, ha](const Mesh&, const Args& a) {
      DiffOptions opt;
      if (hp) opt.prepend = a[1];
      if (ha) opt.append = a[hp ? 2 : 1];
      return diff(a[0], n, ax, opt);
    });
    double e = s.err;
    for (int id : args) e = std::max(e, st(id).err);
    if (o >= 0 && e > 0) set_err(o, std::ldexp(e, n) + 2 * n * slack(o) + 2 * slack(o));
    return true;
  }
  if (kind == 1) {  // cumsum
    const int o = emit("cumsum", "cumsum(" + vn(x) + ", " + std::to_string(ax) + ")", {x},
                       [ax](const Mesh&, const Args& a) { return cumsum(a[0], ax); });
    if (o >= 0) set_sum_err(o, static_cast<double>(len), s.maxabs, s.grid, static_cast<double>(len) * s.err);
    return true;
  }
  if (kind == 2) {  // convolve
    const std::int64_t kl = coin(0.03) ? 0 : uni(1, 5);
    const int k = source({kl}, coin(0.8) ? dtype(x) : random_dtype(), true, spec(1));
    if (k < 0) return false;
    const int o = emit("convolve", "convolve(" + vn(x) + ", " + vn(k) + ", " + std::to_string(ax) + ")", {x, k},
                       [ax](const Mesh&, const Args& a) { return convolve(a[0], a[1], ax); });
    // Each output sums its taps in a fixed order, whatever the layout.
    if (o >= 0 && (!exact(x) || !exact(k))) set_dot_err(o, x, k, static_cast<double>(kl));
    return true;
  }
  const Shape ks{uni(1, 4), uni(1, 4)};
  const int k = source(coin(0.03) ? Shape{3} : ks, coin(0.8) ? dtype(x) : random_dtype(), true, spec(2));
  if (k < 0) return false;
  const int o = emit("convolve2d", "convolve2d(" + vn(x) + ", " + vn(k) + ")", {x, k},
                     [](const Mesh&, const Args& a) { return convolve2d(a[0], a[1]); });
  if (o >= 0 && (!exact(x) || !exact(k))) set_dot_err(o, x, k, static_cast<double>(numel(ks)));
  return true;
}

bool Gen::interp_op() {
  const int x = operand(0, true);
  if (x < 0) return false;
  const int n = coin(0.03) ? 0 : uni(1, 8);
  std::vector<double> xp, fp;
  double at = uni(-6, 0) / 2.0;
  for (int i = 0; i < n; ++i) {
    xp.push_back(at);
    at += uni(1, 6) / 4.0;
    fp.push_back(uni(-16, 16) / 4.0);
  }
  const DType t = coin(0.8) ? DType::f32 : random_dtype();
  const int a = source_data({n}, t, xp, spec(1), "xp");
  const int b = source_data({n}, t, fp, spec(1), "fp");
  if (a < 0 || b < 0) return false;
  emit("interp", "interp(" + vn(x) + ", " + vn(a) + ", " + vn(b) + ")", {x, a, b},
       [](const Mesh&, const Args& v) { return interp(v[0], v[1], v[2]); });
  return true;
}

// --------------------------------------------------------------- indexing
int Gen::index_source(std::int64_t len, std::int64_t lo, std::int64_t hi) {
  std::vector<double> ix;
  for (std::int64_t i = 0; i < len; ++i) ix.push_back(static_cast<double>(hi > lo ? uni(static_cast<int>(lo), static_cast<int>(hi - 1)) : lo));
  const DType t = coin(0.97) ? pick(std::vector<DType>{DType::i32, DType::i64}) : random_dtype();
  return source_data({len}, t, ix, spec(1), "indices");
}

bool Gen::indexing() {
  const int kind = uni(0, 2);
  const int x = operand(1);
  if (x < 0) return false;
  const Shape sx = shape(x);
  const int r = rank(x);
  if (kind == 0) {  // take
    const int ax = uni(-r, r - 1);
    const std::int64_t n = sx[static_cast<std::size_t>((ax + r) % r)];
    const std::int64_t len = uni(0, 8);
    // Rarely out of range, which raises on every layout.
    const int idx = index_source(n == 0 ? (coin(0.9) ? 0 : len) : len, coin(0.03) ? -n - 1 : 0, coin(0.03) ? n + 1 : n);
    if (idx < 0) return false;
    const int o = emit("take", "take(" + vn(x) + ", " + vn(idx) + ", " + std::to_string(ax) + ")", {x, idx},
                       [ax](const Mesh&, const Args& a) { return take(a[0], a[1], ax); });
    set_err(o, st(x).err);
    return true;
  }
  const std::int64_t len = kind == 1 ? uni(0, 9) : sx[0];
  if (kind == 1) {  // scatter_add; out-of-range rows are dropped
    const int idx = index_source(len, -1, sx[0] + 1);
    Shape us = sx;
    us[0] = len;
    if (coin(0.02)) us[0] += 1;
    const int u = source(us, coin(0.8) ? dtype(x) : random_dtype(), true, spec(r));
    if (idx < 0 || u < 0) return false;
    const auto out = maybe_out(r);
    const int o = emit("scatter_add", "scatter_add(" + vn(x) + ", " + vn(idx) + ", " + vn(u) + out_text(out) + ")",
                       {x, idx, u}, [out](const Mesh&, const Args& a) {
                         return scatter_add(a[0], a[1], a[2], {.out_sharding = out});
                       });
    if (o >= 0) {
      const Step &sx_ = st(x), &su = st(u);
      const int g = sx_.grid >= 0 && su.grid >= 0 ? std::max(sx_.grid, su.grid) : -1;
      set_sum_err(o, static_cast<double>(len + 1), std::max(sx_.maxabs, su.maxabs), g,
                  sx_.err + static_cast<double>(len) * su.err);
    }
    return true;
  }
  const std::int64_t ns = uni(0, 6);
  const int ids = index_source(len + (coin(0.02) ? 1 : 0), -1, ns + 1);
  if (ids < 0) return false;
  const auto out = maybe_out(r);
  const int o = emit("segment_sum", "segment_sum(" + vn(x) + ", " + vn(ids) + ", " + std::to_string(ns) + out_text(out) + ")",
                     {x, ids}, [ns, out](const Mesh&, const Args& a) {
                       return segment_sum(a[0], a[1], ns, {.out_sharding = out});
                     });
  if (o >= 0) set_sum_err(o, static_cast<double>(len), st(x).maxabs, st(x).grid, static_cast<double>(len) * st(x).err);
  return true;
}

}  // namespace tessera::fuzz::gen
