#include "ifu/cosmology.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ifu/errors.hpp"

namespace tessera::ifu {

Cosmology cosmology(const std::string& name) {
  // Planck 2015 (Planck Collaboration XIII 2016, TT,TE,EE+lowP+lensing+ext),
  // with the parameters Rubix uses; Tcmb0, Neff and the neutrino masses are
  // astropy's Planck15, whose lookback time Rubix's SFTtoAge takes ages from.
  if (name == "PLANCK15") return Cosmology{"PLANCK15", 0.3075, -1.0, 0.0, 0.6774, 2.7255, 3.046, {0.0, 0.0, 0.06}};
  std::string text = "[ifu config] cosmology.name '";
  text += name;
  text += "' is not supported (known: PLANCK15)";
  throw InputError(text);
}

double hubble_ratio(const Cosmology& c, double z) {
  const double a = 1.0 / (1.0 + z);
  return std::sqrt(c.Om0 * std::pow(1.0 + z, 3.0) +
                   (1.0 - c.Om0) * std::pow(a, -3.0 * (1.0 + c.w0 + c.wa)) * std::exp(-3.0 * c.wa * (1.0 - a)));
}

double comoving_distance_mpc(const Cosmology& c, double z) {
  constexpr int kPoints = 256;
  const double hubble_distance = 2.99792458e5 / (100.0 * c.h);  // c / H0 in Mpc
  double integral = 0.0;
  const double dz = z / (kPoints - 1);
  double prev = 1.0 / hubble_ratio(c, 0.0);
  for (int i = 1; i < kPoints; ++i) {
    const double cur = 1.0 / hubble_ratio(c, dz * i);
    integral += 0.5 * (prev + cur) * dz;
    prev = cur;
  }
  return hubble_distance * integral;
}

double angular_diameter_distance_mpc(const Cosmology& c, double z) { return comoving_distance_mpc(c, z) / (1.0 + z); }

double kpc_per_arcsec(const Cosmology& c, double z) {
  const double arcsec = M_PI / (180.0 * 3600.0);
  return angular_diameter_distance_mpc(c, z) * arcsec * 1e3;
}

namespace {

// The lookback time is integrated in u = ln a, where dt = du / H(a): there the
// integrand 1/E is smooth down to a -> 0 (it decays like a^2), and its
// complex singularities stay more than 1.5 away from the real axis, so
// Gauss-Legendre rules on short pieces are exact to rounding.
class Lookback {
 public:
  explicit Lookback(const Cosmology& c) : c_(c) {
    // astropy's constants (CODATA 2018, IAU 2015) in cgs, as its FLRW uses them.
    constexpr double kSigmaSb = 5.6703744191844314e-05;  // erg s^-1 cm^-2 K^-4
    constexpr double kC = 2.99792458e10;                 // cm/s
    constexpr double kG = 6.6743e-08;                    // cm^3 g^-1 s^-2
    constexpr double kMpcKm = 3.0856775814913673e19;
    constexpr double kGyrS = 3.15576e16;  // Julian years
    constexpr double kBoltzmannEvK = 1.380649e-23 / 1.602176634e-19;
    const double h0 = 100.0 * c.h;  // km/s/Mpc
    const double h0_s = h0 / kMpcKm;
    const double rho_crit = 3.0 * h0_s * h0_s / (8.0 * M_PI * kG);  // g/cm^3
    ogamma0_ = 4.0 * kSigmaSb / (kC * kC * kC) * std::pow(c.Tcmb0, 4) / rho_crit;
    hubble_time_gyr_ = kMpcKm / h0 / kGyrS;
    // floor(Neff) species share Neff; the massive ones have y = m / (k_B T_nu0),
    // T_nu0 = (4/11)^(1/3) Tcmb0.
    n_nu_ = std::floor(c.Neff);
    neff_per_nu_ = n_nu_ > 0 ? c.Neff / n_nu_ : 0.0;
    const double tnu0 = 0.7137658555036082 * c.Tcmb0;
    for (double m : c.m_nu_ev)
      if (m > 0 && tnu0 > 0) nu_y_.push_back(m / (kBoltzmannEvK * tnu0));
    ode0_ = 1.0 - c.Om0 - ogamma0_ * (1.0 + nu_relative_density(1.0));
  }

  double hubble_time_gyr() const { return hubble_time_gyr_; }

  // Neutrino over photon energy density at scale factor a (astropy's
  // nu_relative_density: Komatsu et al. 2011, eq. 26, per massive species).
  double nu_relative_density(double a) const {
    constexpr double kFermiDirac = 0.22710731766;  // 7/8 (4/11)^(4/3)
    constexpr double kP = 1.83, kInvP = 0.54644808743, kK = 0.3173;
    if (nu_y_.empty()) return kFermiDirac * c_.Neff;
    double rel = n_nu_ - static_cast<double>(nu_y_.size());
    for (double y : nu_y_) rel += std::pow(1.0 + std::pow(kK * y * a, kP), kInvP);
    return kFermiDirac * neff_per_nu_ * rel;
  }

  // 1/E at a = exp(u).
  double inv_e(double u) const {
    const double a = std::exp(u), zp1 = 1.0 / a;
    const double orad = ogamma0_ * (1.0 + nu_relative_density(a));
    const double de = std::pow(a, -3.0 * (1.0 + c_.w0 + c_.wa)) * std::exp(-3.0 * c_.wa * (1.0 - a));
    return 1.0 / std::sqrt(zp1 * zp1 * zp1 * (orad * zp1 + c_.Om0) + ode0_ * de);
  }

  // t_H * integral_{u0}^{u1} du / E: 8-point Gauss-Legendre on pieces of at most 1/8.
  double integral(double u0, double u1) const {
    static constexpr double x[4] = {0.18343464249564980, 0.52553240991632899, 0.79666647741362674,
                                    0.96028985649753623};
    static constexpr double w[4] = {0.36268378337836198, 0.31370664587788729, 0.22238103445337447,
                                    0.10122853629037626};
    const int pieces = std::max(1, static_cast<int>(std::ceil(std::abs(u1 - u0) * 8.0)));
    const double step = (u1 - u0) / pieces, half = 0.5 * step;
    double sum = 0;
    for (int p = 0; p < pieces; ++p) {
      const double mid = u0 + (p + 0.5) * step;
      double s = 0;
      for (int k = 0; k < 4; ++k) s += w[k] * (inv_e(mid - half * x[k]) + inv_e(mid + half * x[k]));
      sum += s * half;
    }
    return hubble_time_gyr_ * sum;
  }

 private:
  Cosmology c_;
  double ogamma0_ = 0, ode0_ = 0, hubble_time_gyr_ = 0, n_nu_ = 0, neff_per_nu_ = 0;
  std::vector<double> nu_y_;
};

}  // namespace

double lookback_time_gyr(const Cosmology& c, double z) {
  const Lookback lb(c);
  return lb.integral(-std::log1p(z), 0.0);
}

std::vector<double> lookback_times_from_scale_factors_gyr(const Cosmology& c, const std::vector<double>& a) {
  std::vector<double> out(a.size());
  if (a.empty()) return out;
  for (double v : a)
    if (!(v > 0) || !std::isfinite(v))
      throw InputError("[ifu] a formation scale factor must be positive and finite, got " + std::to_string(v));
  const Lookback lb(c);
  // F(u) = t_H integral_u^0 du' / E on the nodes u_k = k h (h = 1/2048) that
  // cover every ln a and 0, then cubic Hermite interpolation with
  // F'(u) = -t_H / E(u): its error is below h^4/384 max|F''''|, ~1e-15 Gyr.
  constexpr double kStep = 1.0 / 2048.0;
  const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
  const auto k0 = static_cast<std::int64_t>(std::floor(std::min(0.0, std::log(*lo)) / kStep));
  const auto k1 = static_cast<std::int64_t>(std::ceil(std::max(0.0, std::log(*hi)) / kStep)) + 1;
  const auto nodes = static_cast<std::size_t>(k1 - k0 + 1);
  auto u_at = [&](std::size_t i) { return static_cast<double>(k0 + static_cast<std::int64_t>(i)) * kStep; };
  std::vector<double> f(nodes), df(nodes);
  const auto zero = static_cast<std::size_t>(-k0);  // the node at u = 0
  f[zero] = 0;
  for (std::size_t i = zero; i-- > 0;) f[i] = f[i + 1] + lb.integral(u_at(i), u_at(i + 1));
  for (std::size_t i = zero + 1; i < nodes; ++i) f[i] = f[i - 1] - lb.integral(u_at(i - 1), u_at(i));
  for (std::size_t i = 0; i < nodes; ++i) df[i] = -lb.hubble_time_gyr() * lb.inv_e(u_at(i));
  for (std::size_t j = 0; j < a.size(); ++j) {
    const double pos = std::log(a[j]) / kStep - static_cast<double>(k0);
    const auto i = std::min(static_cast<std::size_t>(std::max(0.0, pos)), nodes - 2);
    const double t = pos - static_cast<double>(i), t2 = t * t, t3 = t2 * t;
    out[j] = (2 * t3 - 3 * t2 + 1) * f[i] + (t3 - 2 * t2 + t) * kStep * df[i] + (3 * t2 - 2 * t3) * f[i + 1] +
             (t3 - t2) * kStep * df[i + 1];
  }
  return out;
}

}  // namespace tessera::ifu
