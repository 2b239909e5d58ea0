// SSP grid files.
#include "ifu/ssp.hpp"

#include <cmath>

#include "ifu/errors.hpp"
#include "tessera/sharding.hpp"
#include "ifu/galaxy_io.hpp"

namespace tessera::ifu {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { fail_input("ifu ssp", path, what); }

std::string shape_text(const std::vector<std::int64_t>& s) { return tessera::shape_str(s); }

// An interpolation axis: at least 2 finite values, strictly increasing.
void check_axis(const std::string& path, const char* name, const std::vector<double>& v) {
  if (v.size() < 2) {
    std::string w = "'";
    w += name;
    w += "' must hold at least 2 values, it holds ";
    w += std::to_string(v.size());
    fail(path, w);
  }
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (!std::isfinite(v[k])) {
      std::string w = "'";
      w += name;
      w += "' holds a non-finite value at index ";
      w += std::to_string(k);
      fail(path, w);
    }
    if (k > 0 && !(v[k] > v[k - 1])) {
      std::string w = "'";
      w += name;
      w += "' must be strictly increasing, but value ";
      w += std::to_string(k);
      w += " (";
      w += std::to_string(v[k]);
      w += ") follows ";
      w += std::to_string(v[k - 1]);
      fail(path, w);
    }
  }
}

void check_grid(const std::string& path, const SspGrid& g, const std::vector<std::int64_t>& flux_shape) {
  check_axis(path, "age", g.age);
  check_axis(path, "metallicity", g.metallicity);
  check_axis(path, "wavelength", g.wavelength);
  const std::vector<std::int64_t> want = {static_cast<std::int64_t>(g.metallicity.size()),
                                          static_cast<std::int64_t>(g.age.size()),
                                          static_cast<std::int64_t>(g.wavelength.size())};
  if (flux_shape != want) {
    std::string w = "'flux' must have shape (metallicity, age, wavelength) = ";
    w += shape_text(want);
    w += ", it has ";
    w += shape_text(flux_shape);
    fail(path, w);
  }
  for (std::size_t k = 0; k < g.flux.size(); ++k) {
    if (!std::isfinite(g.flux[k])) {
      std::string w = "'flux' holds a non-finite value at flat index ";
      w += std::to_string(k);
      fail(path, w);
    }
  }
}

void check_rank1(const std::string& path, const char* name, const std::vector<std::int64_t>& shape) {
  if (shape.size() == 1) return;
  std::string w = "'";
  w += name;
  w += "' must be 1-d, its shape is ";
  w += shape_text(shape);
  fail(path, w);
}

}  // namespace

SspGrid read_ssp_h5(const std::string& path) {
  auto d = detail::read_h5_numbers(path, {"age", "metallicity", "wavelength", "flux"}, "ifu ssp");
  check_rank1(path, "age", d[0].shape);
  check_rank1(path, "metallicity", d[1].shape);
  check_rank1(path, "wavelength", d[2].shape);
  SspGrid g;
  g.source = path;
  g.age = std::move(d[0].values);
  g.metallicity = std::move(d[1].values);
  g.wavelength = std::move(d[2].values);
  g.flux = std::move(d[3].values);
  check_grid(path, g, d[3].shape);
  return g;
}

void write_ssp_h5(const std::string& path, const SspGrid& g) {
  const std::vector<std::int64_t> flux_shape = {static_cast<std::int64_t>(g.metallicity.size()),
                                                static_cast<std::int64_t>(g.age.size()),
                                                static_cast<std::int64_t>(g.wavelength.size())};
  if (static_cast<std::int64_t>(g.flux.size()) != flux_shape[0] * flux_shape[1] * flux_shape[2]) {
    std::string w = "'flux' holds ";
    w += std::to_string(g.flux.size());
    w += " values, the axes need ";
    w += shape_text(flux_shape);
    fail(path, w);
  }
  check_grid(path, g, flux_shape);
  auto vec = [](const std::vector<double>& v) { return detail::H5Numbers{{static_cast<std::int64_t>(v.size())}, v}; };
  detail::write_h5_numbers(path,
                           {{"age", vec(g.age)},
                            {"metallicity", vec(g.metallicity)},
                            {"wavelength", vec(g.wavelength)},
                            {"flux", detail::H5Numbers{flux_shape, g.flux}}},
                           "ifu ssp");
}

}  // namespace tessera::ifu
