// The pipeline's intermediate results, shared by the forward pass
// (pipeline.cpp) and the gradient (gradient.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "ifu/pipeline.hpp"

namespace tessera::ifu {

inline constexpr double kSpeedOfLight = 299792.458;  // km/s
// The smallest bound an exact accumulator takes (2^-900): any positive bound
// keeps all-zero terms exact.
inline constexpr double kTiny = 0x1p-900;

/// The global stages' results.
struct Pipeline::Frame {
  Array center;                  // (3,) f32, replicated
  Array near;                    // (n,) bool: within 10 kpc of the center (the systemic velocity's particles)
  Array vsys;                    // (3,) f32: the systemic velocity, subtracted
  std::array<double, 3> vs{};    // the same on the host
  std::array<double, 9> rot{};   // new = old @ rot
  Array rmat;                    // rot, (3, 3) f32
  double mass_max = 0;           // max |mass| (before the mass scale)
  // IllustrisTNG's alignment (aligned): rot = eigenvectors(inertia) @ the
  // Euler rotation, the inertia tensor of the particles align_inside.
  bool aligned = false;
  std::array<double, 9> inertia{};
  Array align_inside;            // (n,) bool: within the half-mass radius
  double vmax = 0;               // bounds |line-of-sight velocity|
  // calc_dusty_ifu (invalid otherwise): A_V of every star, computed once
  // per run from the gas in the final frame, and -0.4 A(lambda)/A(V) at the
  // telescope's wavelengths (dust.hpp).
  Array av;                      // (n,) f32, laid out like the stars
  Array curve;                   // (nwave,) f32, replicated
  // The shard_map argument that brings each device its block of av: {av}
  // with dust, else nothing (an empty tree, no input).
  std::vector<Array> dust_args() const { return av.valid() ? std::vector<Array>{av} : std::vector<Array>{}; }
};

/// One chunk of a device's rows, the parts no derivative flows through but
/// the line-of-sight velocity and the masses.
struct Pipeline::ChunkGeometry {
  Array pix;     // (rows,) i32: spaxel
  Array inside;  // (rows,) bool: within the aperture
  Array vz;      // (rows,) f32: line-of-sight velocity, the offset added
  Array mass;    // (rows,) f32: the masses times the mass scale
  Array transmission;  // (rows, nwave) f32: the dust's, 10^(curve * A_V); invalid without dust
};

/// Rows [lo, hi) of a block.
inline Array rows(const Array& x, std::int64_t lo, std::int64_t hi) { return slice(x, {SliceSpec{lo, hi}}); }

/// Column k of an (n, 3) array, as (n,).
inline Array column(const Array& x, std::int64_t k) {
  return reshape(slice(x, {SliceSpec{}, SliceSpec{k, k + 1}}), {x.shape()[0]});
}

/// The sum of every element of x, exactly, in f64 (loss.cpp): the same bits
/// on every mesh and layout, where a float sum of the devices' parts would
/// differ. NaN if x holds one.
double exact_sum(const Array& x);

/// fn(lo, hi) for the chunks [lo, hi) of n rows, at least once (a device
/// without particles still takes one, empty, step: its share of a psum).
template <class F>
void for_each_chunk(std::int64_t n, std::int64_t chunk, F&& fn) {
  std::int64_t lo = 0;
  do {
    const std::int64_t hi = std::min(n, lo + chunk);
    fn(lo, hi);
    lo = hi;
  } while (lo < n);
}

/// The particle stage's sums, exact, over all particles.
struct Pipeline::Partial {
  Array acc;  // the cube's exact accumulator (3, spaxels^2, nwave)
  Array mv;   // sum m v_z per spaxel, limbs
  Array ms;   // sum m per spaxel, limbs
  std::int64_t in_aperture = 0;
};

}  // namespace tessera::ifu
