// The instrument table. The numbers are the published instrument parameters
// Rubix 0.0.5 uses (fov, spaxel size, wavelength range and step, LSF FWHM,
// aperture and pixel shape), so a Rubix config naming an instrument gets the
// same grid here.
#include "ifu/telescope.hpp"

#include "ifu/errors.hpp"

namespace tessera::ifu {

namespace {

const std::vector<Telescope>& table() {
  static const std::vector<Telescope> t = {
      {"MUSE", 5.0, 0.2, 4700.15, 9351.4, 1.25, 2.51, "square", "square"},
      {"MUSE_WFM", 60.0, 0.2, 4700.15, 9351.4, 1.25, 2.51, "square", "square"},
      {"MUSE_ultraWFM", 180.0, 0.2, 4700.15, 9351.4, 1.25, 2.51, "square", "square"},
      {"NIRSpec_PRISM_CLEAR", 3.0, 0.1, 6000, 53000, 114.36, 471.00, "square", "square"},
      {"NIRSpec_G140M_F070LP", 3.0, 0.1, 7000, 12600, 6.38, 15.02, "square", "square"},
      {"NIRSpec_G140M_F100LP", 3.0, 0.1, 9800, 18800, 6.38, 15.02, "square", "square"},
      {"NIRSpec_G235M_F170LP", 3.0, 0.1, 17000, 31500, 10.69, 25.20, "square", "square"},
      {"NIRSpec_G395M_F290LP", 3.0, 0.1, 28800, 52000, 17.98, 42.39, "square", "square"},
      {"NIRSpec_G140H_F070LP", 3.0, 0.1, 7000, 12600, 2.41, 5.65, "square", "square"},
      {"NIRSpec_G140H_F100LP", 3.0, 0.1, 9800, 18700, 2.37, 5.65, "square", "square"},
      {"NIRSpec_G235H_F170LP", 3.0, 0.1, 17000, 31500, 3.98, 9.42, "square", "square"},
      {"NIRSpec_G395H_F290LP", 3.0, 0.1, 28800, 52000, 6.69, 15.78, "square", "square"},
      {"MaNGA_12", 12, 0.5, 3622, 10354, 1.04, 2.85, "hexagonal", "square"},
      {"MaNGA_32", 32, 0.5, 3622, 10354, 1.04, 2.85, "hexagonal", "square"},
      {"SAMI", 15, 0.5, 3750, 5750, 1.04, 2.65, "circular", "square"},
      {"HECTOR", 30, 0.1, 3720, 5910, 1.6, 1.3, "hexagonal", "square"},
      {"CALIFA", 74, 1.0, 3700, 4750, 2.7, 2.7, "hexagonal", "square"},
      // Rubix's own test instrument: a single 2" spaxel.
      {"TESTGRADIENT", 2.0, 2.0, 4700.15, 9351.4, 10.0, 2.51, "square", "square"},
  };
  return t;
}

bool supported(const Telescope& t) { return t.aperture_type == "square" && t.pixel_type == "square"; }

std::string join_names(bool only_supported) {
  std::string out;
  for (const auto& t : table()) {
    if (only_supported && !supported(t)) continue;
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

}  // namespace

const Telescope& telescope(const std::string& name) {
  for (const auto& t : table()) {
    if (t.name != name) continue;
    if (!supported(t)) {
      std::string msg = "[ifu telescope] ";
      msg += name;
      msg += " has a ";
      msg += t.aperture_type;
      msg += " aperture; only square apertures are supported yet (supported: ";
      msg += join_names(true);
      msg += ")";
      throw InputError(msg);
    }
    return t;
  }
  std::string msg = "[ifu telescope] unknown telescope '";
  msg += name;
  msg += "' (known: ";
  msg += join_names(false);
  msg += ")";
  throw InputError(msg);
}

std::vector<std::string> telescope_names() {
  std::vector<std::string> out;
  for (const auto& t : table()) out.push_back(t.name);
  return out;
}

}  // namespace tessera::ifu
