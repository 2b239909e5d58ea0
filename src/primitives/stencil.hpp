// Stencil and scan primitives: diff, cumsum, convolve, convolve2d, interp.
//
// diff, cumsum, convolve and convolve2d partition themselves (their
// communication is a halo exchange or a carry of per-device totals, which
// the factor engine cannot express): their results keep the layout of x,
// and their rules describe them with Halo factors. interp is elementwise in
// x with its tables whole on every device, which the engine expresses.
#pragma once

#include "backend/cpu/stencil.hpp"
#include "primitives/primitive.hpp"

namespace tessera::detail {

/// The n-th difference along `axis` (n >= 1) of the sequence prepend | x |
/// append. Operands: x, then prepend and append when present, all of the
/// result dtype; a rank-0 prepend or append is one row.
PrimitivePtr make_diff(int n, int axis, bool prepend, bool append);
/// The inclusive sum along `axis`, in sum_dtype(x).
PrimitivePtr make_cumsum(int axis);
/// 'same' convolution of x with the 1-d kernel (operands x, kernel) along
/// `axis`, in the inexact promoted dtype.
PrimitivePtr make_convolve(int axis);
/// 'same' convolution of x's last two dims with the 2-d kernel.
PrimitivePtr make_convolve2d();
/// jnp.interp(x, xp, fp) (operands x, xp, fp).
PrimitivePtr make_interp();

}  // namespace tessera::detail
