// Operand values that are not arrays: weakly typed scalars and axis lists.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace tessera {

// ------------------------------------------------------------------ scalars

/// A C++ number used as an operand. Scalars are weakly typed (as in JAX): a
/// float scalar with an f32 array stays f32; an int scalar with an integer
/// array keeps the array's dtype (DTypeError when the value does not fit
/// it, as JAX raises OverflowError); a float scalar with an integer or bool
/// array gives f32.
class Scalar {
 public:
  Scalar(bool v) : f_(v), i_(v), kind_(Kind::Bool) {}
  Scalar(int v) : f_(v), i_(v), kind_(Kind::Int) {}
  Scalar(long v) : f_(static_cast<double>(v)), i_(v), kind_(Kind::Int) {}
  Scalar(long long v) : f_(static_cast<double>(v)), i_(v), kind_(Kind::Int) {}
  Scalar(unsigned v) : f_(v), i_(v), kind_(Kind::Int) {}
  Scalar(unsigned long v) : Scalar(static_cast<unsigned long long>(v)) {}
  Scalar(unsigned long long v)
      : f_(static_cast<double>(v)), i_(static_cast<std::int64_t>(v)), kind_(Kind::Int), above_i64_(v > kMaxI64) {}
  Scalar(float v) : f_(v), i_(static_cast<std::int64_t>(v)), kind_(Kind::Float) {}
  Scalar(double v) : f_(v), i_(static_cast<std::int64_t>(v)), kind_(Kind::Float) {}

  enum class Kind { Bool, Int, Float };
  Kind kind() const { return kind_; }
  double as_double() const { return f_; }
  /// The integer value; above the i64 range (a u64 value) it is the value
  /// minus 2^64, so that converting it to u64 gives the value back.
  std::int64_t as_int() const { return i_; }
  /// True for an unsigned value above the i64 range (only u64 holds it).
  bool above_i64() const { return above_i64_; }

 private:
  static constexpr unsigned long long kMaxI64 = 0x7fffffffffffffffULL;
  double f_;
  std::int64_t i_;
  Kind kind_;
  bool above_i64_ = false;
};

/// Axes to reduce over: all by default, one (`0`), or several (`{0, 2}`).
/// Negative axes count from the end.
class Axes {
 public:
  Axes() = default;
  Axes(int axis) : axes_{axis}, all_(false) {}
  Axes(std::initializer_list<int> axes) : axes_(axes), all_(false) {}
  Axes(std::vector<int> axes) : axes_(std::move(axes)), all_(false) {}
  bool all() const { return all_; }
  const std::vector<int>& axes() const { return axes_; }

 private:
  std::vector<int> axes_;
  bool all_ = true;
};

}  // namespace tessera
