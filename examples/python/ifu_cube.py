"""A mock telescope datacube from star particles, the astronomy pipeline's
way: the particles sharded over a 1-d "data" mesh of every device, a
spectrum per particle, the partial cubes summed (tessera.ifu, the pipeline
of `tessera ifu`).

    python examples/python/ifu_cube.py [--particles N] [--fits cube.fits]

Uses the BC03 templates when $TESSERA_IFU_DATA/BC03lr.h5 exists (`make demo`
fetches them into build/default/ifu-data), else a small generated grid.
Checks: the cube is bitwise the same on 1, 2 and 8 devices; with the noise
off the cube is the model a fit compares with; the gradient of a loss with
respect to the mass scale matches a finite difference; the FITS file reads
back unchanged.
"""
import argparse
import os
import sys
import tempfile

os.environ.setdefault("TESSERA_NUM_CPU_DEVICES", "8")

import numpy as np  # noqa: E402

import tessera as ts  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--particles", type=int, default=20000)
parser.add_argument("--fits", default=None, help="where to write the cube (default: a temporary file)")
args = parser.parse_args()

bc03 = os.path.join(os.environ.get("TESSERA_IFU_DATA", ""), "BC03lr.h5")
ssp = bc03 if os.path.exists(bc03) else ts.ifu.test_templates()
print("templates:", bc03 if os.path.exists(bc03) else "generated test grid (set TESSERA_IFU_DATA for BC03)")

# Rubix's config, as the dict its users write (MUSE at z = 0.1, Gaussian PSF,
# LSF, no noise).
config = {
    "pipeline": {"name": "calc_ifu"},
    "simulation": {"name": "NIHAO"},
    "telescope": {"name": "MUSE", "psf": {"name": "gaussian", "size": 5, "sigma": 0.6}, "lsf": {"sigma": 0.5},
                  "noise": {"signal_to_noise": float("inf"), "noise_distribution": "normal"}},
    "cosmology": {"name": "PLANCK15"},
    "galaxy": {"dist_z": 0.1, "rotation": {"alpha": 60.0, "beta": 20.0, "gamma": 30.0}},
    "ssp": {"template": {"name": "BruzualCharlot2003"}, "method": "cubic"},
}
galaxy = ts.ifu.generate_galaxy(args.particles, seed=1)
print(f"galaxy: {len(galaxy['mass'])} star particles, {galaxy['mass'].sum():.3e} Msun")

pipe = ts.ifu.Pipeline(config, ssp=ssp)  # particles sharded over every device
print("mesh:", pipe.mesh)
cube = pipe.run(galaxy)
ny, nx, nwave = cube.data.shape
print(f"cube: {ny} x {nx} spaxels x {nwave} wavelengths "
      f"({cube.wavelength[0]:.2f} .. {cube.wavelength[-1]:.2f} Angstrom), "
      f"{cube.in_aperture} particles inside the aperture")
white = cube.data.sum(axis=2)
print(f"white-light image: peak {white.max():.4e}, total {white.sum():.4e} Lsun/Angstrom")

ok = True
for n in (1, 2):
    other = ts.ifu.run(config, galaxy, devices=n, ssp=ssp)
    same = np.array_equal(other.data, cube.data)
    print(f"same cube on {n} device{'s' if n > 1 else ''} as on {len(pipe.mesh.devices.flat)}: {same}")
    ok &= same

model = pipe.model(galaxy)
same = np.array_equal(model, cube.data)
print("noise off: the cube is the model cube:", same)
ok &= same

# The pipeline is differentiable: the gradient of a loss against an
# "observed" cube, here w.r.t. the global mass scale, against a central
# difference of the loss.
observed = pipe.model(galaxy, mass_scale=1.05)
loss, grads = pipe.value_and_grad(galaxy, observed, loss="mse")
h = 1e-3
fd = (pipe.value_and_grad(galaxy, observed, loss="mse", mass_scale=1 + h)[0]
      - pipe.value_and_grad(galaxy, observed, loss="mse", mass_scale=1 - h)[0]) / (2 * h)
rel = abs(grads["mass_scale"] - fd) / abs(fd)
print(f"mse loss {loss:.4e}; d loss / d mass_scale {grads['mass_scale']:.6e}, finite difference {fd:.6e} "
      f"(relative difference {rel:.1e})")
ok &= rel < 1e-3

path = args.fits or os.path.join(tempfile.mkdtemp(), "galaxy_cube.fits")
cube.write_fits(path)
data, header = ts.ifu.read_fits(path)
same = np.array_equal(data, cube.data) and float(header["CRVAL3"]) == float(np.float32(cube.wcs["CRVAL3"]))
print(f"wrote {path} (CRVAL3 {header['CRVAL3']}, CDELT3 {header['CDELT3']}); reads back unchanged: {same}")
ok &= same

if not ok:
    sys.exit("ifu_cube: a check failed")
print("all checks passed")
