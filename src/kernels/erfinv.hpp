// The inverse error function as JAX evaluates it, so that random::normal
// gives JAX's values to within rounding of the logarithm.
//
// JAX lowers lax.erf_inv to chlo.erf_inv, which XLA expands into Giles'
// polynomial approximations ("Approximating the erfinv function", GPU
// Computing Gems Jade Edition, 2011), evaluated in the operand's own
// precision: one pair of degree-8 polynomials in w = -log1p(-x^2) for f32 (and
// narrower types, upcast), three for f64. XLA's CPU code generator contracts
// each Horner step into a fused multiply-add, and its log1p is a Cephes
// rational function below |x| = sqrt(2) - 1 and log(1 + x) above; both are
// reproduced here step for step, so the bits agree wherever the logarithm
// rounds as XLA's does. The tests bound the difference at 2 ulp against
// values recorded from JAX, tails included. (A more accurate erfinv would
// make Tessera's normals differ from JAX's in the tails by up to 6e-5.)
//
// __host__ __device__ (kernels/portable.hpp), shared by the CPU's and the
// GPU's samplers (kernels/random.hpp): the arithmetic is the same source on
// both, the logarithm too (kernels/libm.hpp's, as the elementwise log's; f32
// through f64, rounded once).
#pragma once

#include "kernels/libm.hpp"
#include "kernels/portable.hpp"

namespace tessera::detail {

/// log1p as XLA's CPU backend evaluates it (see above), in T.
template <class T>
TESSERA_HD T log1p_xla(T x) {
  static constexpr double kNum[7] = {4.5270000862445199635215E-5, 4.9854102823193375972212E-1, 6.5787325942061044846969E0,
                              2.9911919328553073277375E1,  6.0949667980987787057556E1,  5.7112963590585538103336E1,
                              2.0039553499201281259648E1};
  static constexpr double kDen[7] = {1.,
                              1.5062909083469192043167E1,
                              8.3047565967967209469434E1,
                              2.2176239823732856465394E2,
                              3.0909872225312059774938E2,
                              2.1642788614495947685003E2,
                              6.0118660497603843919306E1};
  if (!(lm::fabs(x) < static_cast<T>(0.41421356237309504880)))
    return static_cast<T>(math::log_f64(static_cast<double>(x + T(1))));
  T num = 0, den = 0;
  for (int i = 0; i < 7; ++i) {
    num = lm::fma(num, x, static_cast<T>(kNum[i]));
    den = lm::fma(den, x, static_cast<T>(kDen[i]));
  }
  const T x2 = x * x;
  const T r = (x * x2) * (num / den);
  return x + lm::fma(T(-0.5), x2, r);
}

/// erfinv(x) for f32, as XLA computes it; +-inf at +-1, NaN outside [-1, 1].
TESSERA_HD inline float erfinv_f32(float x) {
  static constexpr float kBelow5[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f, 0.00021858087f,
                                -0.00125372503f, -0.00417768164f, 0.246640727f,     1.50140941f};
  static constexpr float kAbove5[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f, -0.00367342844f, 0.00573950773f,
                                -0.0076224613f,   0.00943887047f,  1.00167406f,    2.83297682f};
  float w = -log1p_xla(x * -x);
  const bool below = w < 5.0f;
  const float* c = below ? kBelow5 : kAbove5;
  w = below ? w - 2.5f : lm::sqrt(w) - 3.0f;
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = lm::fma(p, w, c[i]);
  if (lm::fabs(x) == 1.0f) return x * TESSERA_STD::numeric_limits<float>::infinity();
  return p * x;
}

/// erfinv(x) for f64, as XLA computes it (three ranges of w).
TESSERA_HD inline double erfinv_f64(double x) {
  static constexpr double kBelow625[23] = {
      -3.6444120640178196996e-21, -1.685059138182016589e-19,  1.2858480715256400167e-18, 1.115787767802518096e-17,
      -1.333171662854620906e-16,  2.0972767875968561637e-17,  6.6376381343583238325e-15, -4.0545662729752068639e-14,
      -8.1519341976054721522e-14, 2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08, 4.2347877827932403518e-07,
      -1.3654692000834678645e-06, -1.3882523362786468719e-05, 0.0001867342080340571352,   -0.00074070253416626697512,
      -0.0060336708714301490533,  0.24015818242558961693,     1.6536545626831027356};
  static constexpr double kBelow16[19] = {
      2.2137376921775787049e-09,  9.0756561938885390979e-08,  -2.7517406297064545428e-07, 1.8239629214389227755e-08,
      1.5027403968909827627e-06,  -4.013867526981545969e-06,  2.9234449089955446044e-06,  1.2475304481671778723e-05,
      -4.7318229009055733981e-05, 6.8284851459573175448e-05,  2.4031110387097893999e-05,  -0.0003550375203628474796,
      0.00095328937973738049703,  -0.0016882755560235047313,  0.0024914420961078508066,   -0.0037512085075692412107,
      0.005370914553590063617,    1.0052589676941592334,      3.0838856104922207635};
  static constexpr double kAbove16[17] = {
      -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,  -3.7894654401267369937e-09,
      7.6157012080783393804e-09,  -1.4960026627149240478e-08, 2.9147953450901080826e-08,  -6.7711997758452339498e-08,
      2.2900482228026654717e-07,  -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
      7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026, 1.0103004648645343977,
      4.8499064014085844221};
  double w = -log1p_xla(x * -x);
  const double* c;
  int degree;
  if (w < 6.25) {
    c = kBelow625, degree = 23, w -= 3.125;
  } else if (w < 16.0) {
    c = kBelow16, degree = 19, w = lm::sqrt(w) - 3.25;
  } else {
    c = kAbove16, degree = 17, w = lm::sqrt(w) - 5.0;
  }
  double p = c[0];
  for (int i = 1; i < degree; ++i) p = lm::fma(p, w, c[i]);
  if (lm::fabs(x) == 1.0) return x * TESSERA_STD::numeric_limits<double>::infinity();
  return p * x;
}

}  // namespace tessera::detail
