// tessera._core._ifu: the IFU datacube pipeline (apps/ifu) for
// python/tessera/ifu.py. Host data crosses as NumPy arrays and dicts of
// them; configs as the C++ Config (from a file, YAML text or the default);
// every check and message is the pipeline's own. Long calls release the GIL:
// the pipeline runs on the device threads and calls back into Python only
// for fit's per-step callback, which takes the GIL back.
#include <cmath>
#include <cstring>

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/tuple.h>

#include "../common.hpp"
#include "ifu/config.hpp"
#include "ifu/errors.hpp"
#include "ifu/fit.hpp"
#include "ifu/fits.hpp"
#include "ifu/galaxy_io.hpp"
#include "ifu/generate.hpp"
#include "ifu/loss.hpp"
#include "ifu/pipeline.hpp"
#include "ifu/ssp.hpp"
#include "ifu/telescope.hpp"

namespace tessera_py {
namespace {

namespace ifu = ts::ifu;
using namespace nb::literals;

PyObject* g_input_error = nullptr;

// ------------------------------------------------------- host arrays

template <class T>
nb::object to_np(const std::vector<T>& v, const std::vector<std::int64_t>& shape) {
  nb::module_ np = nb::module_::import_("numpy");
  const char* dt = std::is_same_v<T, float> ? "float32" : "float64";
  nb::object out = np.attr("empty")(nb::tuple(nb::cast(shape)), "dtype"_a = dt);
  if (!v.empty()) {
    const std::uintptr_t ptr = nb::cast<std::uintptr_t>(out.attr("ctypes").attr("data"));
    std::memcpy(reinterpret_cast<void*>(ptr), v.data(), v.size() * sizeof(T));
  }
  return out;
}

// obj as a C-contiguous T array, its shape in `shape`.
template <class T>
std::vector<T> from_np(nb::handle obj, std::vector<std::int64_t>& shape) {
  nb::module_ np = nb::module_::import_("numpy");
  const char* dt = std::is_same_v<T, float> ? "float32" : "float64";
  nb::object arr = np.attr("ascontiguousarray")(obj, "dtype"_a = dt);
  shape = nb::cast<std::vector<std::int64_t>>(arr.attr("shape"));
  std::vector<T> out(nb::cast<std::size_t>(arr.attr("size")));
  if (!out.empty()) {
    const std::uintptr_t ptr = nb::cast<std::uintptr_t>(arr.attr("ctypes").attr("data"));
    std::memcpy(out.data(), reinterpret_cast<const void*>(ptr), out.size() * sizeof(T));
  }
  return out;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string t = "(";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// d[key] as float32 of shape (n, cols) (cols 0: (n,)); n < 0 takes n from it.
std::vector<float> field(const nb::dict& d, const char* what, const char* key, std::int64_t& n, std::int64_t cols) {
  if (!d.contains(key))
    throw ifu::InputError(std::string("[ifu] ") + what + ": missing key '" + key + "'");
  std::vector<std::int64_t> shape;
  std::vector<float> v = from_np<float>(d[key], shape);
  const bool ok = cols ? shape.size() == 2 && shape[1] == cols : shape.size() == 1;
  if (ok && n < 0) n = shape[0];
  if (!ok || shape[0] != n) {
    const std::string want = cols ? "(" + (n < 0 ? std::string("n") : std::to_string(n)) + ", " +
                                        std::to_string(cols) + ")"
                                  : "(" + (n < 0 ? std::string("n") : std::to_string(n)) + ",)";
    throw ifu::InputError(std::string("[ifu] ") + what + "['" + key + "']: expected shape " + want + ", got " +
                          shape_str(shape));
  }
  return v;
}

// An optional per-cell field: empty when absent.
std::vector<float> optional_field(const nb::dict& d, const char* what, const char* key, std::int64_t n) {
  if (!d.contains(key)) return {};
  std::int64_t m = n;
  return field(d, what, key, m, 0);
}

double number(const nb::dict& d, const char* key, double dflt) {
  return d.contains(key) ? nb::cast<double>(nb::module_::import_("builtins").attr("float")(d[key])) : dflt;
}

ifu::GalaxyData galaxy_from_dict(const nb::dict& d) {
  static const char* known[] = {"coords", "velocity", "mass", "age", "metallicity", "center",
                                "halfmassrad_stars", "redshift", "gas"};
  for (auto [k, v] : d) {
    (void)v;
    const std::string key = nb::cast<std::string>(nb::str(k));
    bool found = false;
    for (const char* name : known) found |= key == name;
    if (!found)
      throw ifu::InputError("[ifu] galaxy: unknown key '" + key +
                            "' (known: coords, velocity, mass, age, metallicity, center, halfmassrad_stars, "
                            "redshift, gas)");
  }
  ifu::GalaxyData g;
  std::int64_t n = -1;
  g.coords = field(d, "galaxy", "coords", n, 3);
  g.velocity = field(d, "galaxy", "velocity", n, 3);
  g.mass = field(d, "galaxy", "mass", n, 0);
  g.age = field(d, "galaxy", "age", n, 0);
  g.metallicity = field(d, "galaxy", "metallicity", n, 0);
  g.n = n;
  if (d.contains("center")) {
    std::vector<std::int64_t> shape;
    const std::vector<double> c = from_np<double>(d["center"], shape);
    if (c.size() != 3)
      throw ifu::InputError("[ifu] galaxy['center']: expected 3 values (kpc), got shape " + shape_str(shape));
    g.center = {c[0], c[1], c[2]};
  }
  g.halfmassrad_stars = number(d, "halfmassrad_stars", 0.0);
  g.redshift = number(d, "redshift", 0.0);
  if (d.contains("gas") && !d["gas"].is_none()) {
    const nb::dict gd = nb::cast<nb::dict>(d["gas"]);
    ifu::GasData& gas = g.gas;
    std::int64_t m = -1;
    gas.coords = field(gd, "galaxy['gas']", "coords", m, 3);
    gas.mass = field(gd, "galaxy['gas']", "mass", m, 0);
    gas.n = m;
    if (gd.contains("metals")) {
      std::vector<std::int64_t> shape;
      gas.metals = from_np<float>(gd["metals"], shape);
      if (shape.size() != 2 || shape[0] != m)
        throw ifu::InputError("[ifu] galaxy['gas']['metals']: expected shape (" + std::to_string(m) +
                              ", k), got " + shape_str(shape));
      gas.metals_per_cell = shape[1];
    }
    if (gd.contains("velocity")) {
      std::int64_t mm = m;
      gas.velocity = field(gd, "galaxy['gas']", "velocity", mm, 3);
    }
    gas.density = optional_field(gd, "galaxy['gas']", "density", m);
    gas.internal_energy = optional_field(gd, "galaxy['gas']", "internal_energy", m);
    gas.metallicity = optional_field(gd, "galaxy['gas']", "metallicity", m);
    gas.sfr = optional_field(gd, "galaxy['gas']", "sfr", m);
    gas.electron_abundance = optional_field(gd, "galaxy['gas']", "electron_abundance", m);
  }
  return g;
}

nb::dict galaxy_to_dict(const ifu::GalaxyData& g) {
  nb::dict d;
  d["coords"] = to_np(g.coords, {g.n, 3});
  d["velocity"] = to_np(g.velocity, {g.n, 3});
  d["mass"] = to_np(g.mass, {g.n});
  d["age"] = to_np(g.age, {g.n});
  d["metallicity"] = to_np(g.metallicity, {g.n});
  d["center"] = to_np(std::vector<double>(g.center.begin(), g.center.end()), {3});
  d["halfmassrad_stars"] = g.halfmassrad_stars;
  d["redshift"] = g.redshift;
  if (g.gas.n > 0) {
    const ifu::GasData& gas = g.gas;
    nb::dict gd;
    gd["coords"] = to_np(gas.coords, {gas.n, 3});
    gd["mass"] = to_np(gas.mass, {gas.n});
    if (!gas.metals.empty()) gd["metals"] = to_np(gas.metals, {gas.n, gas.metals_per_cell});
    if (!gas.velocity.empty()) gd["velocity"] = to_np(gas.velocity, {gas.n, 3});
    auto put = [&](const char* key, const std::vector<float>& v) {
      if (!v.empty()) gd[key] = to_np(v, {gas.n});
    };
    put("density", gas.density);
    put("internal_energy", gas.internal_energy);
    put("metallicity", gas.metallicity);
    put("sfr", gas.sfr);
    put("electron_abundance", gas.electron_abundance);
    d["gas"] = gd;
  }
  return d;
}

ifu::SspGrid ssp_from_arrays(nb::handle age, nb::handle metallicity, nb::handle wavelength, nb::handle flux,
                             const std::string& source) {
  ifu::SspGrid s;
  s.source = source;
  std::vector<std::int64_t> sa, sz, sw, sf;
  s.age = from_np<double>(age, sa);
  s.metallicity = from_np<double>(metallicity, sz);
  s.wavelength = from_np<double>(wavelength, sw);
  s.flux = from_np<double>(flux, sf);
  const std::vector<std::int64_t> want{static_cast<std::int64_t>(s.metallicity.size()),
                                       static_cast<std::int64_t>(s.age.size()),
                                       static_cast<std::int64_t>(s.wavelength.size())};
  if (sa.size() != 1 || sz.size() != 1 || sw.size() != 1 || sf != want)
    throw ifu::InputError("[ifu] " + source +
                          ": expected 1-d age, metallicity and wavelength and flux of shape (metallicity, age, "
                          "wavelength) = " + shape_str(want) + ", got " + shape_str(sa) + ", " + shape_str(sz) +
                          ", " + shape_str(sw) + " and " + shape_str(sf));
  return s;
}

nb::dict ssp_to_dict(const ifu::SspGrid& s) {
  nb::dict d;
  d["age"] = to_np(s.age, {static_cast<std::int64_t>(s.age.size())});
  d["metallicity"] = to_np(s.metallicity, {static_cast<std::int64_t>(s.metallicity.size())});
  d["wavelength"] = to_np(s.wavelength, {static_cast<std::int64_t>(s.wavelength.size())});
  d["flux"] = to_np(s.flux, {static_cast<std::int64_t>(s.metallicity.size()), static_cast<std::int64_t>(s.age.size()),
                             static_cast<std::int64_t>(s.wavelength.size())});
  return d;
}

// ------------------------------------------------------- observations

std::int64_t nwave_of(const ifu::Pipeline& p) { return static_cast<std::int64_t>(p.geometry().wave.size()); }

// A cube-shaped host value (observed, variance) on the pipeline's mesh.
ts::Array observed_cube(const ifu::Pipeline& p, nb::handle obj, const char* what) {
  std::vector<std::int64_t> shape;
  std::vector<float> v = from_np<float>(obj, shape);
  if (shape.size() != 3)
    throw ifu::InputError(std::string("[ifu] the ") + what + ": expected a 3-d array (ny, nx, nwave), got shape " +
                          shape_str(shape));
  return ifu::put_observed(p, v, shape[0], shape[1], shape[2], "the array given", what);
}

ifu::Observation observation(const ifu::Pipeline& p, nb::handle observed, nb::handle variance, double snr,
                             nb::handle mask) {
  ifu::Observation o;
  if (nb::isinstance<nb::str>(observed)) {
    const std::string var = variance.is_none() ? "" : nb::cast<std::string>(nb::str(variance));
    if (!variance.is_none() && !nb::isinstance<nb::str>(variance))
      throw ifu::InputError("[ifu] variance: a FITS path goes with an observed FITS path, got an array");
    o = ifu::read_observation(p, nb::cast<std::string>(observed), var, snr);
  } else {
    o.cube = observed_cube(p, observed, "observed cube");
    o.source = "the observed array";
    if (!variance.is_none()) o.variance = observed_cube(p, variance, "variance cube");
    o.snr = snr;
  }
  if (!mask.is_none()) {
    nb::module_ np = nb::module_::import_("numpy");
    nb::object m = np.attr("ascontiguousarray")(mask, "dtype"_a = "bool");
    const std::vector<std::int64_t> shape = nb::cast<std::vector<std::int64_t>>(m.attr("shape"));
    const std::vector<std::int64_t> want{p.geometry().spaxels, p.geometry().spaxels, nwave_of(p)};
    if (shape != want)
      throw ifu::InputError("[ifu] mask: expected shape " + shape_str(want) + ", got " + shape_str(shape));
    o.mask = from_host(m, ts::NamedSharding(p.mesh(), ts::P(ts::none, ts::none, "data")), std::nullopt, "ifu");
  }
  return o;
}

ifu::GlobalParams globals(double velocity_offset, double mass_scale) {
  ifu::GlobalParams g;
  g.velocity_offset = velocity_offset;
  g.mass_scale = mass_scale;
  return g;
}

// fn(the galaxy's particles on the pipeline's mesh), run with the GIL
// released (the devices do the work; nothing in it touches Python).
template <class F>
auto released(const ifu::Pipeline& p, const nb::dict& galaxy, F&& fn) {
  const ifu::GalaxyData g = galaxy_from_dict(galaxy);
  nb::gil_scoped_release release;
  return fn(p.put(g));
}

nb::object gathered(const ts::Array& a) {
  const ts::Shape& s = a.shape();
  return to_np(ts::process_allgather<float>(ts::astype(a, ts::DType::f32)), std::vector<std::int64_t>(s.begin(), s.end()));
}

nb::dict cube_to_dict(const ifu::Cube& c) {
  nb::dict d;
  d["data"] = gathered(c.data);
  d["velocity_map"] = gathered(c.velocity_map);
  d["particles"] = c.particles;
  d["in_aperture"] = c.in_aperture;
  d["systemic_velocity"] = nb::make_tuple(c.systemic_velocity[0], c.systemic_velocity[1], c.systemic_velocity[2]);
  return d;
}

nb::dict gradient_to_dict(const ifu::Gradient& g) {
  nb::dict d;
  d["coords"] = gathered(g.coords);
  d["velocity"] = gathered(g.velocity);
  d["mass"] = gathered(g.mass);
  d["age"] = gathered(g.age);
  d["metallicity"] = gathered(g.metallicity);
  d["velocity_offset"] = g.velocity_offset;
  d["mass_scale"] = g.mass_scale;
  return d;
}

}  // namespace

void init_ifu(nb::module_& m) {
  nb::module_ mi = m.def_submodule("_ifu", "The IFU datacube pipeline (see tessera.ifu).");

  {
    nb::object error = m.attr("Error");
    nb::tuple bases = nb::make_tuple(error, nb::handle(PyExc_ValueError));
    g_input_error = PyErr_NewExceptionWithDoc("tessera.ifu.InputError",
                                              "A bad IFU config, galaxy, template grid, cube or option.",
                                              bases.ptr(), nullptr);
    if (!g_input_error) throw nb::python_error();
    mi.attr("InputError") = nb::handle(g_input_error);
    // Tried before the library's translator (nanobind tries the latest
    // first); anything else goes on to that one.
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
      try {
        std::rethrow_exception(p);
      } catch (const ifu::InputError& e) {
        PyErr_SetString(g_input_error, e.what());
      }
    });
  }

  nb::class_<ifu::Config>(mi, "Config")
      .def_ro("source", &ifu::Config::source)
      .def_ro("pipeline", &ifu::Config::pipeline)
      .def_ro("simulation", &ifu::Config::simulation)
      .def_ro("telescope", &ifu::Config::telescope)
      .def_ro("dist_z", &ifu::Config::dist_z)
      .def_ro("output_path", &ifu::Config::output_path)
      .def_ro("psf", &ifu::Config::psf)
      .def_ro("lsf", &ifu::Config::lsf)
      .def_ro("noise", &ifu::Config::noise)
      .def_ro("signal_to_noise", &ifu::Config::signal_to_noise)
      .def("__repr__", [](const ifu::Config& c) {
        return "Config(source='" + c.source + "', pipeline='" + c.pipeline + "', telescope='" + c.telescope +
               "', dist_z=" + nb::cast<std::string>(nb::repr(nb::float_(c.dist_z))) + ")";
      });
  mi.def("load_config", &ifu::load_config, "path"_a);
  mi.def("parse_config", &ifu::parse_config, "yaml_text"_a, "source"_a);
  mi.def("default_config_yaml", [] { return std::string(ifu::default_config_yaml()); });

  nb::class_<ifu::SspGrid>(mi, "SspGrid")
      .def_ro("source", &ifu::SspGrid::source)
      .def("to_dict", &ssp_to_dict)
      .def("save", [](const ifu::SspGrid& s, const std::filesystem::path& path) { ifu::write_ssp_h5(path.string(), s); },
           "path"_a)
      .def("__repr__", [](const ifu::SspGrid& s) {
        return "SspGrid(source='" + s.source + "', metallicities=" + std::to_string(s.metallicity.size()) +
               ", ages=" + std::to_string(s.age.size()) + ", wavelengths=" + std::to_string(s.wavelength.size()) +
               ")";
      });
  mi.def("read_ssp", &ifu::read_ssp_h5, "path"_a);
  mi.def("ssp_from_arrays", &ssp_from_arrays, "age"_a, "metallicity"_a, "wavelength"_a, "flux"_a, "source"_a);
  mi.def("test_ssp", &ifu::generate_ssp_grid, "metallicities"_a = 4, "ages"_a = 14, "wavelengths"_a = 96);

  mi.def("read_galaxy", [](const std::string& path) { return galaxy_to_dict(ifu::read_galaxy(path)); }, "path"_a);
  mi.def("check_galaxy", [](const nb::dict& d) { return galaxy_to_dict(galaxy_from_dict(d)); }, "galaxy"_a);
  mi.def(
      "generate_disk",
      [](std::int64_t particles, std::uint64_t seed, std::int64_t gas_cells, double gas_mass) {
        if (particles < 1) throw ifu::InputError("[ifu] generate_galaxy: particles must be >= 1, got " +
                                                 std::to_string(particles));
        ifu::DiskOptions o;
        o.particles = particles;
        o.seed = seed;
        ifu::GalaxyData g = ifu::generate_disk(o);
        if (gas_cells > 0) g.gas = ifu::generate_gas(o, gas_cells, gas_mass, seed + 1);
        return galaxy_to_dict(g);
      },
      "particles"_a, "seed"_a, "gas_cells"_a = 0, "gas_mass"_a = 1e10);
  mi.def("write_galaxy", [](const std::string& path, const nb::dict& d) { ifu::write_galaxy_h5(path, galaxy_from_dict(d)); },
         "path"_a, "galaxy"_a);

  mi.def(
      "write_cube_fits",
      [](const std::string& path, nb::handle cube, double spaxel_arcsec, double wave0, double dwave,
         const std::vector<std::tuple<std::string, std::string, std::string>>& cards) {
        std::vector<std::int64_t> shape;
        const std::vector<float> v = from_np<float>(cube, shape);
        if (shape.size() != 3)
          throw ifu::InputError("[ifu] write_fits: expected a 3-d cube (ny, nx, nwave), got shape " + shape_str(shape));
        ifu::CubeWcs wcs;
        wcs.spaxel_arcsec = spaxel_arcsec;
        wcs.wave0 = wave0;
        wcs.dwave = dwave;
        wcs.cards = cards;
        ifu::write_cube_fits(path, v.data(), shape[0], shape[1], shape[2], wcs);
      },
      "path"_a, "cube"_a, "spaxel_arcsec"_a, "wave0"_a, "dwave"_a, "cards"_a);
  mi.def(
      "read_cube_fits",
      [](const std::string& path) {
        const ifu::FitsCube c = ifu::read_cube_fits(path);
        nb::dict header;
        for (const auto& [k, v] : c.header) header[k.c_str()] = v;
        return nb::make_tuple(to_np(c.data, {c.ny, c.nx, c.nwave}), header);
      },
      "path"_a);

  nb::class_<ifu::Pipeline>(mi, "Pipeline")
      .def(
          "__init__",
          [](ifu::Pipeline* self, const ifu::Config& cfg, const ifu::SspGrid& ssp, const ts::Mesh& mesh,
             std::int64_t chunk, nb::handle dtype, std::uint64_t noise_seed) {
            if (chunk < 1)
              throw ifu::InputError("[ifu] chunk: expected a positive number of particles, got " +
                                    std::to_string(chunk));
            ifu::PipelineOptions o;
            o.chunk = chunk;
            o.noise_seed = noise_seed;
            o.dtype = to_dtype(dtype, "ifu");
            if (o.dtype != ts::DType::f32 && o.dtype != ts::DType::f64)
              throw ts::DTypeError(std::string("[ifu] dtype: expected float32 or float64, got ") + numpy_name(o.dtype));
            nb::gil_scoped_release release;
            new (self) ifu::Pipeline(cfg, ssp, mesh, o);
          },
          "config"_a, "ssp"_a, "mesh"_a, "chunk"_a, "dtype"_a, "noise_seed"_a)
      .def_prop_ro("config", &ifu::Pipeline::config)
      .def_prop_ro("mesh", &ifu::Pipeline::mesh)
      .def_prop_ro("wave0", &ifu::Pipeline::wave0)
      .def_prop_ro("dwave", &ifu::Pipeline::dwave)
      .def_prop_ro("spaxels", [](const ifu::Pipeline& p) { return p.geometry().spaxels; })
      .def_prop_ro("kpc_per_arcsec", [](const ifu::Pipeline& p) { return p.geometry().kpc_per_arcsec; })
      .def_prop_ro("spaxel_arcsec",
                   [](const ifu::Pipeline& p) { return ifu::telescope(p.config().telescope).spatial_res_arcsec; })
      .def_prop_ro("wavelength",
                   [](const ifu::Pipeline& p) { return to_np(p.geometry().wave, {nwave_of(p)}); })
      .def(
          "run",
          [](const ifu::Pipeline& p, const nb::dict& galaxy, double velocity_offset, double mass_scale) {
            return cube_to_dict(released(p, galaxy, [&](const ifu::Particles& parts) {
              return p.run(parts, globals(velocity_offset, mass_scale));
            }));
          },
          "galaxy"_a, "velocity_offset"_a, "mass_scale"_a)
      .def(
          "model",
          [](const ifu::Pipeline& p, const nb::dict& galaxy, double velocity_offset, double mass_scale) {
            return gathered(released(p, galaxy, [&](const ifu::Particles& parts) {
              return p.model(parts, globals(velocity_offset, mass_scale));
            }));
          },
          "galaxy"_a, "velocity_offset"_a, "mass_scale"_a)
      .def(
          "value_and_grad",
          [](const ifu::Pipeline& p, const nb::dict& galaxy, nb::handle observed, nb::handle variance, double snr,
             nb::handle mask, const std::string& loss, double velocity_offset, double mass_scale) {
            const ifu::LossKind kind = ifu::parse_loss(loss);
            const ifu::Observation obs = observation(p, observed, variance, snr, mask);
            const ifu::Gradient grad = released(p, galaxy, [&](const ifu::Particles& parts) {
              return p.value_and_grad(parts, obs, kind, globals(velocity_offset, mass_scale));
            });
            return nb::make_tuple(grad.loss, gradient_to_dict(grad), gathered(grad.model));
          },
          "galaxy"_a, "observed"_a, "variance"_a.none(), "snr"_a, "mask"_a.none(), "loss"_a, "velocity_offset"_a, "mass_scale"_a)
      .def(
          "fit",
          [](const ifu::Pipeline& p, const nb::dict& galaxy, nb::handle observed, nb::handle variance, double snr,
             nb::handle mask, const std::vector<std::string>& params, const std::string& loss,
             const std::string& optimizer, int steps, double lr, nb::object callback, double velocity_offset,
             double mass_scale) {
            std::string csv;
            for (const std::string& s : params) csv += (csv.empty() ? "" : ",") + s;
            ifu::FitOptions o;
            o.params = ifu::parse_fit_params(csv);
            o.loss = ifu::parse_loss(loss);
            o.optimizer = optimizer;
            o.steps = steps;
            o.lr = lr;
            if (!callback.is_none())
              // A handle, not an owning object: the fit may copy the callback
              // without the GIL; `callback` outlives the call.
              o.on_step = [cb = nb::handle(callback)](int step, double value) {
                nb::gil_scoped_acquire acquire;
                cb(step, value);
              };
            const ifu::GalaxyData g = galaxy_from_dict(galaxy);
            const ifu::Observation obs = observation(p, observed, variance, snr, mask);
            ifu::FitResult r;
            ifu::GalaxyData fitted;
            {
              nb::gil_scoped_release release;
              r = ifu::fit(p, p.put(g), obs, o, globals(velocity_offset, mass_scale));
              fitted = ifu::to_galaxy(r.particles, g);
            }
            nb::dict out;
            out["galaxy"] = galaxy_to_dict(fitted);
            out["losses"] = to_np(r.losses, {static_cast<std::int64_t>(r.losses.size())});
            out["model"] = gathered(r.model);
            out["velocity_offset"] = r.globals.velocity_offset;
            out["mass_scale"] = r.globals.mass_scale;
            return out;
          },
          "galaxy"_a, "observed"_a, "variance"_a.none(), "snr"_a, "mask"_a.none(), "params"_a, "loss"_a, "optimizer"_a, "steps"_a,
          "lr"_a, "callback"_a.none(), "velocity_offset"_a, "mass_scale"_a);
}

}  // namespace tessera_py
