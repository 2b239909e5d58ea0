// Errors of the IFU application.
#pragma once

#include <string>

#include "tessera/error.hpp"

namespace tessera::ifu {

/// Bad config, input file or option. Messages start with the context in
/// brackets, then the file and what was expected and what was given:
/// "[ifu config] rubix_config.yml: unknown key 'telescope.psf.sgima' (known: name, size, sigma)".
class InputError : public tessera::Error {
 public:
  using Error::Error;
};

/// Raises InputError "[ctx] path: what".
[[noreturn]] inline void fail_input(const char* ctx, const std::string& path, const std::string& what) {
  std::string msg = "[";
  msg += ctx;
  msg += "] ";
  msg += path;
  msg += ": ";
  msg += what;
  throw InputError(msg);
}

}  // namespace tessera::ifu
