// Fitting (fit.hpp): the reparameterised fields, Adam and L-BFGS, the
// observed cube's reader and the gradient's writer.
#include "ifu/fit.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "ifu/errors.hpp"
#include "ifu/fits.hpp"
#include "ifu/h5.hpp"
#include "ifu/loss.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {

namespace {

constexpr double kAgeMax = 20.0;  // Gyr
constexpr double kMetalMax = 0.05;

struct Names {
  Fittable f;
  const char* name;
};
constexpr Names kNames[] = {{Fittable::age, "age"},
                            {Fittable::metallicity, "metallicity"},
                            {Fittable::mass, "mass"},
                            {Fittable::velocity, "velocity"},
                            {Fittable::velocity_offset, "velocity_offset"},
                            {Fittable::mass_scale, "mass_scale"}};

bool per_particle(Fittable f) { return f != Fittable::velocity_offset && f != Fittable::mass_scale; }

// ---- the unconstrained parameters

/// One fitted quantity: its unconstrained value (an array for a particle
/// field, a host number for a global parameter).
struct Param {
  Fittable f;
  Array u;        // per-particle fields
  double s = 0;   // global parameters
};

/// The box of a field in u: x = hi * sigmoid(u).
double box_of(Fittable f) { return f == Fittable::age ? kAgeMax : kMetalMax; }

Array to_u(Fittable f, const Array& x) {
  switch (f) {
    case Fittable::age:
    case Fittable::metallicity: {
      // logit(x / hi), with x kept strictly inside the box (a value on its
      // edge would sit where the sigmoid is flat).
      const double hi = box_of(f);
      const Array t = clip(divide(x, hi), 1e-6, 1 - 1e-6);
      return log(divide(t, subtract(1.0, t)));
    }
    case Fittable::mass: return log(x);
    default: return x;
  }
}

Array from_u(Fittable f, const Array& u) {
  switch (f) {
    case Fittable::age:
    case Fittable::metallicity: return multiply(sigmoid(u), box_of(f));
    case Fittable::mass: return exp(u);
    default: return u;
  }
}

/// d loss / d u from d loss / d x, at u.
Array chain(Fittable f, const Array& u, const Array& dx) {
  switch (f) {
    case Fittable::age:
    case Fittable::metallicity: {
      const Array s = sigmoid(u);
      return multiply(dx, multiply(multiply(s, subtract(1.0, s)), box_of(f)));
    }
    case Fittable::mass: return multiply(dx, exp(u));
    default: return dx;
  }
}

/// The particles and globals the parameters stand for.
void apply(const std::vector<Param>& ps, const Particles& base, const GlobalParams& g0, Particles& p, GlobalParams& g) {
  p = base;
  g = g0;
  for (const Param& q : ps) switch (q.f) {
      case Fittable::age: p.age = from_u(q.f, q.u); break;
      case Fittable::metallicity: p.metallicity = from_u(q.f, q.u); break;
      case Fittable::mass: p.mass = from_u(q.f, q.u); break;
      case Fittable::velocity: p.velocity = from_u(q.f, q.u); break;
      case Fittable::velocity_offset: g.velocity_offset = q.s; break;
      case Fittable::mass_scale: g.mass_scale = std::exp(q.s); break;
    }
}

/// The loss and its gradient in u.
struct Eval {
  double loss = 0;
  std::vector<Param> grad;  // same order as the parameters
  Array model;
};

Eval evaluate(const Pipeline& pipe, const std::vector<Param>& ps, const Particles& base, const GlobalParams& g0,
              const Observation& obs, LossKind kind) {
  Particles p;
  GlobalParams g;
  apply(ps, base, g0, p, g);
  const Gradient gr = pipe.value_and_grad(p, obs, kind, g);
  Eval e;
  e.loss = gr.loss;
  e.model = gr.model;
  for (const Param& q : ps) {
    Param d{q.f, Array(), 0};
    switch (q.f) {
      case Fittable::age: d.u = chain(q.f, q.u, gr.age); break;
      case Fittable::metallicity: d.u = chain(q.f, q.u, gr.metallicity); break;
      case Fittable::mass: d.u = chain(q.f, q.u, gr.mass); break;
      case Fittable::velocity: d.u = gr.velocity; break;
      case Fittable::velocity_offset: d.s = gr.velocity_offset; break;
      case Fittable::mass_scale: d.s = gr.mass_scale * g.mass_scale; break;  // d/du of exp(u)
    }
    e.grad.push_back(d);
  }
  return e;
}

/// sum over every parameter of a_k b_k, exactly (the same bits on every mesh).
double dot(const std::vector<Param>& a, const std::vector<Param>& b) {
  double total = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (!per_particle(a[k].f)) {
      total += a[k].s * b[k].s;
      continue;
    }
    total += exact_sum(multiply(astype(a[k].u, DType::f64), astype(b[k].u, DType::f64)));
  }
  return total;
}

/// a + c b, per parameter.
std::vector<Param> axpy(const std::vector<Param>& a, double c, const std::vector<Param>& b) {
  std::vector<Param> out = a;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (per_particle(a[k].f)) out[k].u = add(a[k].u, multiply(b[k].u, c));
    else out[k].s = a[k].s + c * b[k].s;
  }
  return out;
}

std::vector<Param> scaled(const std::vector<Param>& a, double c) {
  std::vector<Param> out = a;
  for (auto& q : out) {
    if (per_particle(q.f)) q.u = multiply(q.u, c);
    else q.s *= c;
  }
  return out;
}

}  // namespace

std::vector<Fittable> parse_fit_params(const std::string& csv) {
  std::vector<Fittable> out;
  std::size_t pos = 0;
  while (pos <= csv.size()) {
    const std::size_t end = std::min(csv.find(',', pos), csv.size());
    const std::string name = csv.substr(pos, end - pos);
    pos = end + 1;
    if (name.empty()) continue;
    const Names* hit = nullptr;
    for (const Names& n : kNames)
      if (name == n.name) hit = &n;
    if (!hit) {
      std::string text = "[ifu-fit] '" + name + "' is not a fittable field (fittable: age, metallicity, mass, "
                                                "velocity, velocity_offset, mass_scale";
      if (name == "coords" || name == "coordinates")
        text += "; positions enter only through the spaxel and the aperture, whose derivative is zero";
      throw InputError(text + ")");
    }
    if (std::find(out.begin(), out.end(), hit->f) != out.end())
      throw InputError("[ifu-fit] '" + name + "' is listed twice in the fitted fields");
    out.push_back(hit->f);
  }
  if (out.empty()) throw InputError("[ifu-fit] no field to fit (give e.g. age,metallicity)");
  return out;
}

const char* fittable_name(Fittable f) {
  for (const Names& n : kNames)
    if (n.f == f) return n.name;
  return "?";
}

FitResult fit(const Pipeline& pipe, const Particles& start, const Observation& obs, const FitOptions& opt,
              const GlobalParams& g0) {
  if (opt.optimizer != "adam" && opt.optimizer != "lbfgs")
    throw InputError("[ifu-fit] unknown optimizer '" + opt.optimizer + "' (expected adam or lbfgs)");
  if (opt.steps < 0) throw InputError("[ifu-fit] the number of steps must be >= 0, got " + std::to_string(opt.steps));
  if (!(opt.lr > 0) || !std::isfinite(opt.lr))
    throw InputError("[ifu-fit] the learning rate must be a positive number, got " + std::to_string(opt.lr));
  if (opt.params.empty()) throw InputError("[ifu-fit] no field to fit");
  std::vector<Param> ps;
  for (Fittable f : opt.params) {
    Param q{f, Array(), 0};
    switch (f) {
      case Fittable::age: q.u = to_u(f, start.age); break;
      case Fittable::metallicity: q.u = to_u(f, start.metallicity); break;
      case Fittable::mass: q.u = to_u(f, start.mass); break;
      case Fittable::velocity: q.u = start.velocity; break;
      case Fittable::velocity_offset: q.s = g0.velocity_offset; break;
      case Fittable::mass_scale:
        if (!(g0.mass_scale > 0)) throw InputError("[ifu-fit] the starting mass scale must be positive");
        q.s = std::log(g0.mass_scale);
        break;
    }
    ps.push_back(q);
  }
  FitResult r;
  Eval e = evaluate(pipe, ps, start, g0, obs, opt.loss);
  if (opt.optimizer == "adam") {
    // Adam (Kingma & Ba), optax's defaults but the step.
    constexpr double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    std::vector<Param> m = scaled(e.grad, 0.0), v = m;
    for (int t = 1; t <= opt.steps; ++t) {
      r.losses.push_back(e.loss);
      const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
      for (std::size_t k = 0; k < ps.size(); ++k) {
        if (per_particle(ps[k].f)) {
          const Array& gk = e.grad[k].u;
          m[k].u = add(multiply(m[k].u, b1), multiply(gk, 1 - b1));
          v[k].u = add(multiply(v[k].u, b2), multiply(multiply(gk, gk), 1 - b2));
          const Array step = divide(divide(m[k].u, c1), add(sqrt(divide(v[k].u, c2)), eps));
          ps[k].u = subtract(ps[k].u, multiply(step, opt.lr));
        } else {
          const double gk = e.grad[k].s;
          m[k].s = b1 * m[k].s + (1 - b1) * gk;
          v[k].s = b2 * v[k].s + (1 - b2) * gk * gk;
          ps[k].s -= opt.lr * (m[k].s / c1) / (std::sqrt(v[k].s / c2) + eps);
        }
      }
      if (opt.on_step) opt.on_step(t, r.losses.back());
      e = evaluate(pipe, ps, start, g0, obs, opt.loss);
    }
  } else {
    // L-BFGS (Nocedal & Wright, algorithm 7.4) with a backtracking line
    // search on the sufficient decrease (Armijo) condition; the first step
    // has length lr, later ones start at 1.
    constexpr int history = 10;
    std::deque<std::pair<std::vector<Param>, std::vector<Param>>> sy;  // (s, y)
    std::deque<double> rho;
    for (int t = 1; t <= opt.steps; ++t) {
      r.losses.push_back(e.loss);
      std::vector<Param> q = e.grad;
      std::vector<double> alpha(sy.size());
      for (std::size_t i = sy.size(); i-- > 0;) {
        alpha[i] = rho[i] * dot(sy[i].first, q);
        q = axpy(q, -alpha[i], sy[i].second);
      }
      double gamma;
      if (sy.empty()) {
        const double gg = dot(e.grad, e.grad);
        gamma = gg > 0 ? opt.lr / std::sqrt(gg) : 0.0;
      } else {
        gamma = dot(sy.back().first, sy.back().second) / dot(sy.back().second, sy.back().second);
      }
      q = scaled(q, gamma);
      for (std::size_t i = 0; i < sy.size(); ++i) {
        const double beta = rho[i] * dot(sy[i].second, q);
        q = axpy(q, alpha[i] - beta, sy[i].first);
      }
      // q approximates H g: the direction is -q.
      const double slope = -dot(e.grad, q);
      if (!(slope < 0)) break;  // no descent direction left (converged or a flat gradient)
      double step = 1.0;
      Eval next;
      std::vector<Param> trial;
      bool accepted = false;
      for (int tries = 0; tries < 20; ++tries, step *= 0.5) {
        trial = axpy(ps, -step, q);
        next = evaluate(pipe, trial, start, g0, obs, opt.loss);
        if (std::isfinite(next.loss) && next.loss <= e.loss + 1e-4 * step * slope) {
          accepted = true;
          break;
        }
      }
      if (!accepted) break;
      std::vector<Param> s = axpy(trial, -1.0, ps), y = axpy(next.grad, -1.0, e.grad);
      const double sy_dot = dot(s, y);
      if (sy_dot > 0) {  // curvature condition: keep the pair only when it holds
        sy.emplace_back(std::move(s), std::move(y));
        rho.push_back(1.0 / sy_dot);
        if (static_cast<int>(sy.size()) > history) sy.pop_front(), rho.pop_front();
      }
      ps = std::move(trial);
      e = std::move(next);
      if (opt.on_step) opt.on_step(t, r.losses.back());
    }
  }
  r.losses.push_back(e.loss);
  r.model = e.model;
  apply(ps, start, g0, r.particles, r.globals);
  return r;
}

Array put_observed(const Pipeline& pipe, const std::vector<float>& data, std::int64_t ny, std::int64_t nx,
                   std::int64_t nwave, const std::string& source, const char* what) {
  const std::int64_t nb = pipe.geometry().spaxels;
  const auto nw = static_cast<std::int64_t>(pipe.geometry().wave.size());
  if (ny != nb || nx != nb || nwave != nw) {
    std::string text = "[ifu] " + source + ": the " + what + " is " + std::to_string(ny) + " x " + std::to_string(nx) +
                       " spaxels x " + std::to_string(nwave) + " wavelengths, but " + pipe.config().telescope +
                       " makes " + std::to_string(nb) + " x " + std::to_string(nb) + " x " + std::to_string(nw);
    throw InputError(text);
  }
  std::int64_t bad = 0;
  for (float v : data) bad += !std::isfinite(v);
  if (bad)
    throw InputError("[ifu] " + source + ": " + std::to_string(bad) + " elements of the " + what +
                     " are not finite (the loss needs finite values everywhere)");
  return device_put(data, {nb, nb, nw}, NamedSharding(pipe.mesh(), P(none, none, "data")));
}

Observation read_observation(const Pipeline& pipe, const std::string& cube_path, const std::string& variance_path,
                             double snr) {
  auto read = [&](const std::string& path, const char* what) {
    const FitsCube c = read_cube_fits(path);
    // The shape first (put_observed), then the wavelength grid where the
    // file states it.
    if (c.ny != pipe.geometry().spaxels || c.nx != pipe.geometry().spaxels ||
        c.nwave != static_cast<std::int64_t>(pipe.geometry().wave.size()))
      return put_observed(pipe, c.data, c.ny, c.nx, c.nwave, path, what);
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(1.0, std::abs(b)); };
    if (c.header.count("CRVAL3") && !near(c.number("CRVAL3"), pipe.wave0()))
      throw InputError("[ifu] " + path + ": the " + what + " starts at " + c.text("CRVAL3") + " Angstrom (CRVAL3), the " +
                       "telescope's grid at " + std::to_string(pipe.wave0()));
    if (c.header.count("CDELT3") && !near(c.number("CDELT3"), pipe.dwave()))
      throw InputError("[ifu] " + path + ": the " + what + " has a wavelength step of " + c.text("CDELT3") +
                       " Angstrom (CDELT3), the telescope's is " + std::to_string(pipe.dwave()));
    return put_observed(pipe, c.data, c.ny, c.nx, c.nwave, path, what);
  };
  Observation o;
  o.source = cube_path;
  o.cube = read(cube_path, "observed cube");
  if (!variance_path.empty()) {
    o.variance = read(variance_path, "variance cube");
    o.source = cube_path + " (variance " + variance_path + ")";
  }
  o.snr = snr;
  return o;
}

GalaxyData to_galaxy(const Particles& p, const GalaxyData& like) {
  // Gathered from every process (a collective under mpirun).
  auto host = [](const Array& a) { return process_allgather<float>(astype(a, DType::f32)); };
  GalaxyData g = like;
  g.n = p.n;
  g.coords = host(p.coords);
  g.velocity = host(p.velocity);
  g.mass = host(p.mass);
  g.age = host(p.age);
  g.metallicity = host(p.metallicity);
  return g;
}

void write_gradient_h5(const std::string& path, const Gradient& gr, LossKind loss, const GalaxyData& like,
                       bool write) {
  using namespace h5;
  const GalaxyData d = to_galaxy(Particles{gr.coords, gr.velocity, gr.mass, gr.age, gr.metallicity, like.center,
                                           like.halfmassrad_stars, like.n},
                                 like);
  if (!write) return;
  GalaxyData stars = d;
  stars.gas = GasData{};  // a gradient of the stars only
  write_galaxy_h5(path, stars, StarUnits{"1/kpc", "s/km", "1/Msun", "1/Gyr", ""}, [&](const H5File& f) {
    const Id g = make_group(f, "gradient");
    write_dataset<double>(f, "gradient/loss", {}, &gr.loss, "");
    write_dataset<double>(f, "gradient/velocity_offset", {}, &gr.velocity_offset, "s/km");
    write_dataset<double>(f, "gradient/mass_scale", {}, &gr.mass_scale, "");
    write_attr_string(f, g.get(), "loss", loss_name(loss));
    write_attr_string(f, g.get(), "meaning",
                      "particles/stars/<field> holds d loss / d field (units: loss per the field's unit)");
  });
}

}  // namespace tessera::ifu
