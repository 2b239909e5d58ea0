"""The IFU datacube pipeline: star particles to a mock telescope cube (Rubix's
``calc_ifu`` and ``calc_dusty_ifu``), its gradient, and fitting by gradient
descent. The C++ pipeline of ``tessera ifu`` (docs/ifu.md), driven from
Python::

    import tessera as ts

    cube = ts.ifu.run("rubix_config.yml", "rubix_galaxy.h5")   # or dicts
    cube.data.shape          # (ny, nx, nwave), float32 NumPy
    cube.wavelength          # the telescope's grid, Angstrom
    cube.wcs                 # the FITS WCS cards of `tessera ifu`
    cube.write_fits("cube.fits")

Configs are a path to a Rubix YAML config, a dict of the same structure, or
None (Rubix's reference setup, as `tessera ifu` without --config). Galaxies
are a path (Rubix HDF5, IllustrisTNG cutout, .npz) or a dict of NumPy arrays
``coords (n, 3)``, ``velocity (n, 3)``, ``mass``, ``age``, ``metallicity``
(kpc, km/s, Msun, Gyr, Z; optional ``center``, ``halfmassrad_stars``,
``redshift`` and a ``gas`` dict for dusty configs). Particles are sharded
over every device (or ``devices=``); the cube is bitwise the same on any
number of them.

The BC03 templates come from ``ssp=`` (a path, a dict of arrays or an
SspGrid), else ``$TESSERA_IFU_DATA/BC03lr.h5`` (``make demo`` and
``scripts/fetch-bc03.sh`` fetch them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from tessera import _core

try:
    _ifu = _core._ifu
except AttributeError:  # built without yaml-cpp, HDF5, cfitsio or PLplot
    _ifu = None

__all__ = [
    "Cube", "FitResult", "InputError", "Pipeline", "default_config", "fit", "generate_galaxy", "load_galaxy",
    "model", "read_fits", "run", "save_galaxy", "test_templates", "value_and_grad",
]


def _need():
    if _ifu is None:
        raise ImportError(
            "tessera.ifu: this build of tessera has no IFU pipeline (yaml-cpp, HDF5, cfitsio, PLplot or zlib "
            "were missing when it was built; scripts/install-deps.sh installs them)")
    return _ifu


InputError = _ifu.InputError if _ifu is not None else _core.Error


# ------------------------------------------------------------------ configs

def _yaml(value: Any) -> str:
    """value as YAML flow text (a dict of the config's structure)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml(str(k))}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return repr(v)
    s = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def _config(config):
    m = _need()
    if config is None:
        return m.parse_config(m.default_config_yaml(), "built-in default config")
    if isinstance(config, m.Config):
        return config
    if isinstance(config, dict):
        return m.parse_config(_yaml(config), "config dict")
    if isinstance(config, (str, os.PathLike)):
        return m.load_config(os.fspath(config))
    raise TypeError(f"[ifu] config: expected None, a path or a dict, got {type(config).__name__}")


def default_config():
    """Rubix's reference setup (MUSE at z = 0.1, ...), as `tessera ifu` uses
    without a config."""
    return _config(None)


# ---------------------------------------------------------------- templates

def _ssp(ssp):
    m = _need()
    if isinstance(ssp, m.SspGrid):
        return ssp
    if isinstance(ssp, dict):
        missing = [k for k in ("age", "metallicity", "wavelength", "flux") if k not in ssp]
        if missing:
            raise InputError(f"[ifu] ssp: missing key(s) {', '.join(missing)} "
                             "(expected age, metallicity, wavelength, flux)")
        return m.ssp_from_arrays(ssp["age"], ssp["metallicity"], ssp["wavelength"], ssp["flux"], "ssp dict")
    if ssp is not None:
        return m.read_ssp(os.fspath(ssp))
    data = os.environ.get("TESSERA_IFU_DATA")
    if data and os.path.exists(os.path.join(data, "BC03lr.h5")):
        return m.read_ssp(os.path.join(data, "BC03lr.h5"))
    where = f" at {os.path.join(data, 'BC03lr.h5')}" if data else " ($TESSERA_IFU_DATA is not set)"
    raise InputError(f"[ifu] the BC03 templates (BC03lr.h5) were not found{where}; fetch them with "
                     "`bash scripts/fetch-bc03.sh DIR` and set TESSERA_IFU_DATA=DIR, or pass ssp=")


def test_templates(metallicities: int = 4, ages: int = 14, wavelengths: int = 96):
    """A small smooth SSP grid in BC03's layout (log10(age/yr) from 6 to 10.3,
    Z from 1e-4 to 0.05, 3000-11000 Angstrom): for tests and examples that
    should not need the BC03 file."""
    return _need().test_ssp(metallicities, ages, wavelengths)


# ----------------------------------------------------------------- galaxies

def load_galaxy(path) -> dict:
    """A galaxy file (Rubix HDF5, IllustrisTNG cutout, .npz) as a dict of
    NumPy arrays in canonical units."""
    return _need().read_galaxy(os.fspath(path))


def save_galaxy(path, galaxy) -> None:
    """Writes a galaxy dict in Rubix's HDF5 layout."""
    _need().write_galaxy(os.fspath(path), _galaxy(galaxy))


def generate_galaxy(particles: int = 100000, seed: int = 1, *, gas_cells: int = 0, gas_mass: float = 1e10) -> dict:
    """The seeded exponential disk `tessera ifu` runs without --input (and,
    with gas_cells, gas for dusty configs)."""
    return _need().generate_disk(int(particles), int(seed), int(gas_cells), float(gas_mass))


def _galaxy(galaxy) -> dict:
    if isinstance(galaxy, dict):
        return galaxy
    if isinstance(galaxy, (str, os.PathLike)):
        return load_galaxy(galaxy)
    raise TypeError(f"[ifu] galaxy: expected a path or a dict of arrays, got {type(galaxy).__name__}")


# ---------------------------------------------------------------- results

@dataclass
class Cube:
    """A datacube: ``data[iy, ix, iwave]`` in Lsun/Angstrom per spaxel."""

    data: np.ndarray
    wavelength: np.ndarray
    wcs: dict
    velocity_map: np.ndarray
    particles: int
    in_aperture: int
    systemic_velocity: tuple
    telescope: str
    redshift: float

    def write_fits(self, path, cards: Sequence[tuple] = ()) -> None:
        """Writes the cube as `tessera ifu` does (NAXIS3 = wavelength, WCS
        above); `cards` are extra (key, value, comment) header cards."""
        extra = [("TELESCOP", self.telescope, "instrument whose grids the cube uses"),
                 ("REDSHIFT", repr(float(self.redshift)), "galaxy.dist_z of the config"),
                 ("NPART", str(self.particles), "star particles read"),
                 ("NAPER", str(self.in_aperture), "star particles inside the aperture")]
        extra += [(str(k), str(v), str(c)) for k, v, c in cards]
        _need().write_cube_fits(os.fspath(path), self.data, self.wcs["CDELT1"], self.wcs["CRVAL3"],
                                self.wcs["CDELT3"], extra)


@dataclass
class FitResult:
    galaxy: dict              # the fitted particles (the other fields as given)
    losses: np.ndarray        # the loss before every step, then at the end
    model: np.ndarray         # the model cube at the end
    velocity_offset: float = 0.0
    mass_scale: float = 1.0


def read_fits(path):
    """A cube written by write_fits or `tessera ifu`: (data[iy, ix, iwave],
    header dict of strings)."""
    return _need().read_cube_fits(os.fspath(path))


# ---------------------------------------------------------------- pipeline

class Pipeline:
    """The pipeline for one config, template grid and mesh (1-d, axis
    ``data``): build it once and run it on many galaxies.

    ``devices``: None (all), a number (the first n) or a list of Devices.
    ``chunk``: particles per device per step (memory is about chunk x the
    template's wavelengths x 4 bytes). ``dtype``: float32 (as Rubix) or
    float64 (derivative checks). ``noise_seed``: the noise key's seed.
    """

    def __init__(self, config=None, *, ssp=None, devices=None, chunk: int = 32768, dtype=np.float32,
                 noise_seed: int = 0):
        m = _need()
        cfg = _config(config)
        grid = _ssp(ssp)
        if devices is None:
            devs = _core.devices()
        elif isinstance(devices, (int, np.integer)):
            every = _core.devices()
            if not 1 <= int(devices) <= len(every):
                raise InputError(f"[ifu] devices: expected 1 to {len(every)} devices, got {int(devices)}")
            devs = every[:int(devices)]
        else:
            devs = list(devices)
        self.mesh = _core.make_mesh((len(devs),), ("data",), devices=devs)
        self._p = m.Pipeline(cfg, grid, self.mesh, int(chunk), dtype, int(noise_seed))
        self.config = cfg

    @property
    def wavelength(self) -> np.ndarray:
        return self._p.wavelength

    def wcs(self, ny: Optional[int] = None, nx: Optional[int] = None) -> dict:
        """The cube's FITS WCS cards, as `tessera ifu` writes them."""
        n = self._p.spaxels
        ny = n if ny is None else ny
        nx = n if nx is None else nx
        s = self._p.spaxel_arcsec
        return {"CTYPE1": "XOFFSET", "CTYPE2": "YOFFSET", "CTYPE3": "WAVE",
                "CUNIT1": "arcsec", "CUNIT2": "arcsec", "CUNIT3": "Angstrom",
                "CRPIX1": (nx + 1) / 2, "CRPIX2": (ny + 1) / 2, "CRPIX3": 1.0,
                "CRVAL1": 0.0, "CRVAL2": 0.0, "CRVAL3": self._p.wave0,
                "CDELT1": s, "CDELT2": s, "CDELT3": self._p.dwave,
                "BUNIT": "solLum/Angstrom", "KPCARCS": self._p.kpc_per_arcsec}

    def run(self, galaxy, *, velocity_offset: float = 0.0, mass_scale: float = 1.0) -> Cube:
        """Every stage, noise included: the cube `tessera ifu` writes."""
        r = self._p.run(_galaxy(galaxy), float(velocity_offset), float(mass_scale))
        ny, nx = r["data"].shape[:2]
        return Cube(data=r["data"], wavelength=self.wavelength, wcs=self.wcs(ny, nx),
                    velocity_map=r["velocity_map"], particles=r["particles"], in_aperture=r["in_aperture"],
                    systemic_velocity=r["systemic_velocity"], telescope=self.config.telescope,
                    redshift=self.config.dist_z)

    def model(self, galaxy, *, velocity_offset: float = 0.0, mass_scale: float = 1.0) -> np.ndarray:
        """The noiseless model cube (what a loss compares with an observation)."""
        return self._p.model(_galaxy(galaxy), float(velocity_offset), float(mass_scale))

    def value_and_grad(self, galaxy, observed, *, loss: str = "nll", variance=None, snr: Optional[float] = None,
                       mask=None, velocity_offset: float = 0.0, mass_scale: float = 1.0, return_model: bool = False):
        """The loss of the model cube against `observed` and its gradient:
        ``(loss, grads)`` with grads a dict of d loss / d field for coords,
        velocity, mass, age, metallicity (NumPy, the galaxy's shapes) and the
        globals velocity_offset and mass_scale (floats). `observed` (and
        `variance`) are arrays (ny, nx, nwave) or FITS paths; losses are
        "nll" (with `variance` or `snr`), "cosine" and "mse"; `mask` (bool,
        cube-shaped) picks the elements counted. Bitwise the same on any
        number of devices."""
        value, grads, cube = self._p.value_and_grad(_galaxy(galaxy), _obs(observed), _obs(variance),
                                                    0.0 if snr is None else float(snr), mask, loss,
                                                    float(velocity_offset), float(mass_scale))
        return (value, grads, cube) if return_model else (value, grads)

    def fit(self, galaxy, observed, *, params: Sequence[str] = ("age", "metallicity"), steps: int = 100,
            optimizer: str = "adam", lr: float = 0.05, loss: str = "nll", variance=None,
            snr: Optional[float] = None, mask=None, callback: Optional[Callable[[int, float], None]] = None,
            velocity_offset: float = 0.0, mass_scale: float = 1.0) -> FitResult:
        """Fits `params` (age, metallicity, mass, velocity, velocity_offset,
        mass_scale) to `observed` with Adam or L-BFGS, as `tessera ifu-fit`;
        `callback(step, loss)` is called after every step."""
        if isinstance(params, str):
            params = [p for p in params.split(",") if p]
        r = self._p.fit(_galaxy(galaxy), _obs(observed), _obs(variance), 0.0 if snr is None else float(snr), mask,
                        list(params), loss, optimizer, int(steps), float(lr), callback, float(velocity_offset),
                        float(mass_scale))
        return FitResult(galaxy=r["galaxy"], losses=r["losses"], model=r["model"],
                         velocity_offset=r["velocity_offset"], mass_scale=r["mass_scale"])


def _obs(x):
    return os.fspath(x) if isinstance(x, os.PathLike) else x


def _pipeline(config, devices, ssp, chunk, dtype):
    return Pipeline(config, ssp=ssp, devices=devices, chunk=chunk, dtype=dtype)


def run(config=None, galaxy=None, devices=None, *, ssp=None, chunk: int = 32768, dtype=np.float32,
        particles: int = 100000, seed: int = 1) -> Cube:
    """The cube of `galaxy` (a path or dict; None: the seeded disk `tessera
    ifu` generates, with `particles` and `seed`) under `config`."""
    g = generate_galaxy(particles, seed) if galaxy is None else galaxy
    return _pipeline(config, devices, ssp, chunk, dtype).run(g)


def model(config, galaxy, devices=None, *, ssp=None, chunk: int = 32768, dtype=np.float32, **globals_):
    """The noiseless model cube of `galaxy` (see Pipeline.model)."""
    return _pipeline(config, devices, ssp, chunk, dtype).model(galaxy, **globals_)


def value_and_grad(config, galaxy, observed, devices=None, *, ssp=None, chunk: int = 32768, dtype=np.float32,
                   **kwargs):
    """(loss, grads) of `galaxy` against `observed` (see Pipeline.value_and_grad)."""
    return _pipeline(config, devices, ssp, chunk, dtype).value_and_grad(galaxy, observed, **kwargs)


def fit(config, galaxy, observed, devices=None, *, ssp=None, chunk: int = 32768, dtype=np.float32,
        **kwargs) -> FitResult:
    """Fits `galaxy` to `observed` (see Pipeline.fit)."""
    return _pipeline(config, devices, ssp, chunk, dtype).fit(galaxy, observed, **kwargs)
