// Interpolation on a 2-d rectilinear grid of tabulated rows.
//
// interp2d evaluates, at query points (xq, yq), a function tabulated on the
// grid x (nx,) by y (ny,) whose value at each knot is a row f[i, j, ...] of
// any shape. It follows interpax.interp2d (methods "linear" and "cubic"),
// and is elementwise over the queries: the result keeps the queries' layout
// on the mesh, while the grid and the table are brought whole to every
// device.
#pragma once

#include <limits>
#include <optional>
#include <source_location>
#include <string>

#include "tessera/array.hpp"

namespace tessera {

struct Interp2dOptions {
  /// "linear": bilinear on the cell holding the query. "cubic": interpax's
  /// C1 local bicubic spline, a Hermite patch per cell whose knot
  /// derivatives are finite differences: along an axis with secants
  /// d_k = (f[k+1] - f[k]) / (x[k+1] - x[k]), f'[0] = d_0,
  /// f'[n-1] = d_{n-2} and f'[k] = (d_{k-1} + d_k) / 2 inside (an unweighted
  /// mean, also on non-uniform grids); the cross derivative fxy applies the
  /// same rule along y to fx.
  std::string method = "cubic";
  /// The value of every element of a result row whose query lies outside
  /// the grid (xq < x[0], xq > x[nx-1], likewise for y, or a NaN
  /// coordinate); points on the boundary are inside. NaN (the default) is
  /// interpax's extrap=False; 0 is its extrap=0 (except for NaN coordinates,
  /// which interpax leaves NaN whatever extrap). std::nullopt extrapolates
  /// instead (interpax's extrap=True): the edge cell's polynomial evaluated
  /// beyond the edge (a NaN coordinate then gives NaN).
  std::optional<double> fill = std::numeric_limits<double>::quiet_NaN();
};

/// Interpolates the table f (nx, ny, *rest) given on the knots x (nx,) and
/// y (ny,) at the points (xq[q], yq[q]) (interpax.interp2d).
///
/// - x and y are 1-d with at least 2 points each and strictly increasing
///   (not checked: that would read the data; spacing may be non-uniform).
/// - xq and yq have one shape Q (any rank); the result has shape
///   Q + rest, where result[q, ...] = interpolant(xq[q], yq[q])[...].
/// - The query's cell is i = clip(searchsorted(x, xq, 'right'), 1, nx-1),
///   and likewise j; each result row is a weighted sum of the table rows of
///   that cell's 2 x 2 corners (linear) or of its 4 x 4 neighbourhood
///   (cubic: the corners' values and finite-difference derivatives). A NaN
///   in those rows propagates.
/// - dtype: f's, with integers and bool promoted to f32 (f32 stays f32);
///   coordinates of any real dtype; weights are computed in f64.
/// - Sharding: elementwise over Q (xq and yq are brought to one layout as
///   for a binary elementwise op); x, y and f are made whole on every
///   device; the rest dims of the result are unsharded.
/// - Transformations: vmap over the queries stays one call. Derivatives
///   (jvp, grad) in xq and yq are the slopes of the query's cell polynomial
///   (the cell chosen as above, so at a knot the cell to its right, as JAX
///   differentiates interpax) and 0 where `fill` replaces the value; in f
///   the op is linear (reverse mode scatters the cotangent back to the
///   table with the same weights; sharded queries are summed into partial
///   tables, not gathered). Tangents of the grid x, y raise Error
///   ("[interp2d] is not differentiable with respect to the grid x/y");
///   second derivatives in xq, yq raise likewise.
///
/// Errors: ShapeError for ranks and sizes (x or y not 1-d or with fewer
/// than 2 points, f not (nx, ny, ...), xq and yq of different shapes), ValueError
/// for an unknown method, ShardingError for operands on different meshes.
Array interp2d(const Array& xq, const Array& yq, const Array& x, const Array& y, const Array& f,
               const Interp2dOptions& opt = {}, std::source_location loc = std::source_location::current());

}  // namespace tessera
