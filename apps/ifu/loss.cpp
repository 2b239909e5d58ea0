// The losses (loss.hpp has the formulas).
#include "ifu/loss.hpp"

#include <cmath>
#include <numbers>
#include <numeric>

#include "ifu/errors.hpp"
#include "ifu/stages.hpp"

namespace tessera::ifu {

namespace {

std::string shape_str(const Shape& s) {
  std::string t = "(";
  for (std::size_t k = 0; k < s.size(); ++k) t += (k ? ", " : "") + std::to_string(s[k]);
  return t + ")";
}


void check_like(const Array& a, const Array& model, const Observation& obs, const char* what) {
  if (a.shape() != model.shape()) {
    std::string text = "[ifu] ";
    text += obs.source + ": the " + what + " has shape " + shape_str(a.shape()) + " but the telescope's cube is " +
            shape_str(model.shape()) + " (spaxels, spaxels, wavelengths)";
    throw InputError(text);
  }
}

}  // namespace

double exact_sum(const Array& x) {
  const double bound = max(abs(x)).item<double>();
  if (!(bound > 0)) return bound == 0 ? 0.0 : bound;  // all zero, or a NaN
  std::vector<int> axes(static_cast<std::size_t>(x.ndim()));
  std::iota(axes.begin(), axes.end(), 1);
  return exact_total(sum(exact_limbs(x, bound), Axes(axes)), DType::f64).item<double>();
}

LossKind parse_loss(const std::string& name) {
  if (name == "nll") return LossKind::nll;
  if (name == "cosine") return LossKind::cosine;
  if (name == "mse") return LossKind::mse;
  throw InputError("[ifu] unknown loss '" + name + "' (expected nll, cosine or mse)");
}

const char* loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::nll: return "nll";
    case LossKind::cosine: return "cosine";
    case LossKind::mse: return "mse";
  }
  return "?";
}

LossResult loss_value_and_grad(LossKind kind, const Array& model_in, const Observation& obs) {
  if (!obs.cube.valid()) throw InputError("[ifu] " + obs.source + ": no observed cube given");
  check_like(obs.cube, model_in, obs, "observed cube");
  // The observation laid out as the model, so that every step below is
  // elementwise on each device's block.
  const NamedSharding& layout = model_in.sharding();
  const Array o = astype(device_put(obs.cube, layout), DType::f64);
  const Array m = astype(model_in, DType::f64);
  {
    const auto bad = sum(astype(logical_not(isfinite(o)), DType::i64)).item<std::int64_t>();
    if (bad)
      throw InputError("[ifu] " + obs.source + ": " + std::to_string(bad) +
                       " elements of the observed cube are not finite (mask them out of the file or replace them)");
  }
  Array w = ones(m.shape(), DType::f64, layout);
  if (obs.mask.valid()) {
    check_like(obs.mask, model_in, obs, "mask");
    w = astype(device_put(obs.mask, layout), DType::f64);
  }
  const Array d = subtract(m, o);
  LossResult r;
  switch (kind) {
    case LossKind::mse: {
      const double count = exact_sum(w);
      if (!(count > 0)) throw InputError("[ifu] " + obs.source + ": the mask leaves no element for the loss");
      r.value = exact_sum(multiply(w, multiply(d, d))) / count;
      r.grad = multiply(w, multiply(d, 2.0 / count));
      break;
    }
    case LossKind::nll: {
      Array var;
      if (obs.variance.valid()) {
        check_like(obs.variance, model_in, obs, "variance");
        var = astype(device_put(obs.variance, layout), DType::f64);
        const auto bad = sum(astype(logical_not(isfinite(var)), DType::i64)).item<std::int64_t>();
        if (bad)
          throw InputError("[ifu] " + obs.source + ": " + std::to_string(bad) + " elements of the variance are not finite");
      } else {
        if (!(obs.snr > 0) || !std::isfinite(obs.snr))
          throw InputError("[ifu] the nll loss needs a variance cube or a signal-to-noise ratio > 0, got S/N " +
                           std::to_string(obs.snr));
        const Array sigma = divide(abs(o), obs.snr);
        var = multiply(sigma, sigma);
      }
      // Elements without a positive variance carry no information.
      const Array pos = greater(var, 0.0);
      w = where(pos, w, 0.0);
      const Array safe = where(pos, var, 1.0);
      if (!(exact_sum(w) > 0)) throw InputError("[ifu] " + obs.source + ": no element has both the mask and a positive variance");
      const Array terms = multiply(w, add(divide(multiply(d, d), safe), log(multiply(safe, 2.0 * std::numbers::pi))));
      r.value = 0.5 * exact_sum(terms);
      r.grad = multiply(w, divide(d, safe));
      break;
    }
    case LossKind::cosine: {
      const double mo = exact_sum(multiply(w, multiply(m, o)));
      const double mm = exact_sum(multiply(w, multiply(m, m)));
      const double oo = exact_sum(multiply(w, multiply(o, o)));
      if (!(mm > 0) || !(oo > 0))
        throw InputError(std::string("[ifu] the cosine loss is undefined: the ") + (mm > 0 ? "observed" : "model") +
                         " cube is zero wherever the mask counts");
      const double norm = std::sqrt(mm * oo), c = mo / norm;
      r.value = 1.0 - c;
      r.grad = multiply(w, subtract(multiply(m, c / mm), divide(o, norm)));
      break;
    }
  }
  r.grad = astype(r.grad, model_in.dtype());
  return r;
}

}  // namespace tessera::ifu
