// Errors of the IFU application.
#pragma once

#include "tessera/error.hpp"

namespace tessera::ifu {

/// Bad config, input file or option. Messages start with the context in
/// brackets, then the file and what was expected and what was given:
/// "[ifu config] rubix_config.yml: unknown key 'telescope.psf.sgima' (known: name, size, sigma)".
class InputError : public tessera::Error {
 public:
  using Error::Error;
};

}  // namespace tessera::ifu
