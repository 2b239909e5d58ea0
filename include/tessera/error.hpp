// Error types. Every user-facing error is a tessera::Error subclass whose
// message starts with the op in brackets, then says what was expected and what
// was given, e.g. "[matmul] contracting dims differ: lhs (8, 16) vs rhs (12, 4)".
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace tessera {

/// Base of all Tessera errors.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  const char* what() const noexcept override { return text_ ? text_->c_str() : std::runtime_error::what(); }
  /// Appends `more` to the message, keeping the exception's type (jit adds
  /// where the failing op was called from while tracing).
  void append(const std::string& more) { text_ = std::make_shared<const std::string>(what() + more); }

 private:
  std::shared_ptr<const std::string> text_;  // shared: copying an exception must not throw
};

/// A shape (rank, sizes, element count) does not fit the op.
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// A dtype is not supported by the op or does not match.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// A mesh, partition spec or sharding is invalid or ambiguous.
class ShardingError : public Error {
 public:
  using Error::Error;
};

/// A collective failed: mismatch, timeout, or a failed participant.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// A value does not fit the op: out of the range it supports (a term larger
/// than an exact accumulator's bound, a negative count).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A device or runtime problem: bad device count, configuration too late.
class DeviceError : public Error {
 public:
  using Error::Error;
};

}  // namespace tessera
