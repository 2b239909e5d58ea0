"""tessera.ifu: the IFU pipeline from Python, on the small generated template
grid (no BC03 file needed): cubes bitwise the same on every device count,
configs as dicts and paths, galaxies as dicts and files, FITS round trips,
gradients against finite differences, fitting, and the errors."""
import math
import os
import subprocess

import numpy as np
import pytest

import tessera as ts

ifu = pytest.importorskip("tessera.ifu")
if ifu._ifu is None:
    pytest.skip("this build has no IFU pipeline", allow_module_level=True)


@pytest.fixture(scope="module")
def ssp():
    return ifu.test_templates(3, 8, 40)


@pytest.fixture(scope="module")
def galaxy():
    return ifu.generate_galaxy(3000, seed=3)


# The built-in default config, written as the dict a Python user passes.
DEFAULT = {
    "pipeline": {"name": "calc_ifu"},
    "simulation": {"name": "NIHAO"},
    "telescope": {"name": "MUSE", "psf": {"name": "gaussian", "size": 5, "sigma": 0.6}, "lsf": {"sigma": 0.5},
                  "noise": {"signal_to_noise": math.inf, "noise_distribution": "normal"}},
    "cosmology": {"name": "PLANCK15"},
    "galaxy": {"dist_z": 0.1, "rotation": {"alpha": 60.0, "beta": 20.0, "gamma": 30.0}},
    "ssp": {"template": {"name": "BruzualCharlot2003"}, "method": "cubic"},
}


def test_cube_same_bits_on_every_device_count(ssp, galaxy):
    ref = ifu.run(None, galaxy, devices=1, ssp=ssp)
    ny, nx, nw = ref.data.shape
    assert ref.data.dtype == np.float32 and ny == nx and nw == len(ref.wavelength)
    assert ref.particles == 3000 and 0 < ref.in_aperture <= 3000
    assert ref.data.sum() > 0 and np.isfinite(ref.data).all()
    assert ref.wcs["CRVAL3"] == pytest.approx(float(ref.wavelength[0]))
    assert ref.wcs["CDELT3"] == pytest.approx(float(ref.wavelength[1] - ref.wavelength[0]), rel=1e-5)
    assert ref.wcs["CRPIX1"] == (nx + 1) / 2
    assert ref.velocity_map.shape == (ny, nx)
    for n in (2, 3, 8):
        c = ifu.run(None, galaxy, devices=n, ssp=ssp, chunk=257)
        np.testing.assert_array_equal(c.data, ref.data)
        np.testing.assert_array_equal(c.velocity_map, ref.velocity_map)
    devs = ts.devices()[5:8]
    np.testing.assert_array_equal(ifu.run(None, galaxy, devices=devs, ssp=ssp).data, ref.data)


def test_config_as_dict_path_and_default(ssp, galaxy, tmp_path):
    ref = ifu.run(None, galaxy, ssp=ssp, devices=2).data
    np.testing.assert_array_equal(ifu.run(DEFAULT, galaxy, ssp=ssp, devices=2).data, ref)
    path = tmp_path / "config.yml"
    path.write_text(ifu._ifu.default_config_yaml())
    np.testing.assert_array_equal(ifu.run(path, galaxy, ssp=ssp, devices=2).data, ref)
    nearer = dict(DEFAULT, galaxy={"dist_z": 0.05, "rotation": {"alpha": 60.0, "beta": 20.0, "gamma": 30.0}})
    c = ifu.run(nearer, galaxy, ssp=ssp, devices=2)
    assert c.redshift == 0.05 and not np.array_equal(c.data, ref)
    cfg = ifu.default_config()
    assert cfg.telescope == "MUSE" and cfg.dist_z == 0.1 and "MUSE" in repr(cfg)


def test_config_errors(ssp, galaxy):
    bad = dict(DEFAULT, telescope={"name": "MUSE", "psf": {"name": "gaussian", "size": 5, "sgima": 0.6}})
    with pytest.raises(ifu.InputError, match=r"^\[ifu config\] config dict: .*sgima"):
        ifu.Pipeline(bad, ssp=ssp)
    with pytest.raises(ifu.InputError, match=r"^\[ifu config\].*no_such_file"):
        ifu.Pipeline("/tmp/no_such_file.yml", ssp=ssp)
    with pytest.raises(TypeError, match=r"\[ifu\] config"):
        ifu.Pipeline(42, ssp=ssp)
    assert issubclass(ifu.InputError, ts.Error) and issubclass(ifu.InputError, ValueError)


def test_galaxy_dict_and_file(ssp, galaxy, tmp_path):
    path = tmp_path / "galaxy.h5"
    ifu.save_galaxy(path, galaxy)
    back = ifu.load_galaxy(path)
    for k in ("coords", "velocity", "mass", "age", "metallicity", "center"):
        np.testing.assert_array_equal(back[k], galaxy[k])
    p = ifu.Pipeline(None, ssp=ssp, devices=4)
    np.testing.assert_array_equal(p.run(path).data, p.run(galaxy).data)
    # Lists and float64 arrays are converted; extra precision is rounded as
    # the files' float32 is.
    as64 = {k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) else v) for k, v in galaxy.items()}
    np.testing.assert_array_equal(p.run(as64).data, p.run(galaxy).data)


def test_galaxy_errors(ssp, galaxy):
    p = ifu.Pipeline(None, ssp=ssp, devices=2)
    g = {k: v for k, v in galaxy.items() if k != "mass"}
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] galaxy: missing key 'mass'"):
        p.run(g)
    g = dict(galaxy, age=galaxy["age"][:-1])
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] galaxy\['age'\]: expected shape \(3000,\), got \(2999,\)"):
        p.run(g)
    g = dict(galaxy, coords=galaxy["coords"][:, :2])
    with pytest.raises(ifu.InputError, match=r"galaxy\['coords'\]: expected shape \(n, 3\), got \(3000, 2\)"):
        p.run(g)
    with pytest.raises(ifu.InputError, match=r"unknown key 'masses'"):
        p.run(dict(galaxy, masses=galaxy["mass"]))
    with pytest.raises(ifu.InputError, match=r"^\[ifu"):
        ifu.load_galaxy("/tmp/no_such_galaxy.h5")


def test_options_errors(ssp):
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] chunk: expected a positive"):
        ifu.Pipeline(None, ssp=ssp, chunk=0)
    with pytest.raises(ts.DTypeError, match=r"^\[ifu\] dtype: expected float32 or float64, got int32"):
        ifu.Pipeline(None, ssp=ssp, dtype=np.int32)
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] devices: expected 1 to 8 devices, got 9"):
        ifu.Pipeline(None, ssp=ssp, devices=9)
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] ssp: missing key\(s\) flux"):
        ifu.Pipeline(None, ssp={"age": [1, 2], "metallicity": [1, 2], "wavelength": [1, 2]})


def test_templates_not_found(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_IFU_DATA", str(tmp_path))
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] the BC03 templates \(BC03lr.h5\) were not found at "):
        ifu.Pipeline(None)


def test_templates_from_arrays(ssp, galaxy):
    d = ssp.to_dict()
    assert d["flux"].shape == (3, 8, 40)
    p1 = ifu.Pipeline(None, ssp=ssp, devices=2)
    p2 = ifu.Pipeline(None, ssp=d, devices=2)
    np.testing.assert_array_equal(p1.run(galaxy).data, p2.run(galaxy).data)
    with pytest.raises(ifu.InputError, match=r"flux of shape \(metallicity, age, wavelength\)"):
        ifu.Pipeline(None, ssp=dict(d, flux=d["flux"][:, :, :-1]))


def test_fits_round_trip(ssp, galaxy, tmp_path):
    c = ifu.run(None, galaxy, ssp=ssp, devices=2)
    path = tmp_path / "cube.fits"
    c.write_fits(path, cards=[("OBSERVER", "pytest", "who made it")])
    data, header = ifu.read_fits(path)
    np.testing.assert_array_equal(data, c.data)
    assert float(header["CRVAL3"]) == pytest.approx(c.wcs["CRVAL3"])
    assert float(header["CDELT3"]) == pytest.approx(c.wcs["CDELT3"])
    assert header["TELESCOP"] == "MUSE" and header["OBSERVER"] == "pytest"
    assert int(header["NAPER"]) == c.in_aperture


def _observed(ssp, galaxy, dtype=np.float32):
    p = ifu.Pipeline(None, ssp=ssp, devices=2, dtype=dtype)
    truth = dict(galaxy, age=galaxy["age"] * np.float32(1.2))
    return p.model(truth)


def test_gradient_against_finite_differences(ssp, galaxy):
    small = {k: (v[:300] if isinstance(v, np.ndarray) and v.shape and v.shape[0] == 3000 else v)
             for k, v in galaxy.items()}
    p = ifu.Pipeline(None, ssp=ssp, devices=2, dtype=np.float64)
    obs = p.model(dict(small, age=small["age"] * np.float32(1.2)))
    loss, g = p.value_and_grad(small, obs, loss="mse", velocity_offset=3.0, mass_scale=1.1)
    assert set(g) == {"coords", "velocity", "mass", "age", "metallicity", "velocity_offset", "mass_scale"}
    assert g["age"].shape == (300,) and g["velocity"].shape == (300, 3)
    for name, h in (("velocity_offset", 1e-3), ("mass_scale", 1e-6)):
        kw = {"velocity_offset": 3.0, "mass_scale": 1.1}
        up = dict(kw, **{name: kw[name] + h})
        down = dict(kw, **{name: kw[name] - h})
        fd = (p.value_and_grad(small, obs, loss="mse", **up)[0] - p.value_and_grad(small, obs, loss="mse", **down)[0])
        fd /= 2 * h
        assert g[name] == pytest.approx(fd, rel=1e-4)
    # The model the loss was taken of comes back on request.
    _, _, model = p.value_and_grad(small, obs, loss="mse", velocity_offset=3.0, mass_scale=1.1, return_model=True)
    assert model.shape == obs.shape
    assert loss == pytest.approx(np.mean((model.astype(np.float64) - obs) ** 2), rel=1e-5)


def test_gradient_same_bits_on_every_device_count(ssp, galaxy):
    obs = _observed(ssp, galaxy)
    ref = ifu.value_and_grad(None, galaxy, obs, devices=1, ssp=ssp, loss="nll", snr=30.0)
    for n in (3, 8):
        loss, g = ifu.value_and_grad(None, galaxy, obs, devices=n, ssp=ssp, chunk=100, loss="nll", snr=30.0)
        assert loss == ref[0]
        for k in ("coords", "velocity", "mass", "age", "metallicity"):
            np.testing.assert_array_equal(g[k], ref[1][k])
        assert g["mass_scale"] == ref[1]["mass_scale"]


def test_losses_variance_mask_and_fits_file(ssp, galaxy, tmp_path):
    p = ifu.Pipeline(None, ssp=ssp, devices=2)
    obs = _observed(ssp, galaxy)
    var = np.full(obs.shape, 1e-3, np.float32) + np.abs(obs) * 0.01
    l_var, _ = p.value_and_grad(galaxy, obs, loss="nll", variance=var)
    mask = np.zeros(obs.shape, bool)
    mask[:, :, : obs.shape[2] // 2] = True
    l_half, _ = p.value_and_grad(galaxy, obs, loss="nll", variance=var, mask=mask)
    assert 0 < l_half < l_var
    l_cos, _ = p.value_and_grad(galaxy, obs, loss="cosine")
    assert np.isfinite(l_cos)
    # The same observation from FITS files gives the same loss.
    cube = ifu.Cube(data=obs, wavelength=p.wavelength, wcs=p.wcs(), velocity_map=obs[:, :, 0], particles=0,
                    in_aperture=0, systemic_velocity=(0, 0, 0), telescope="MUSE", redshift=0.1)
    cube.write_fits(tmp_path / "obs.fits")
    cube.data = var
    cube.write_fits(tmp_path / "var.fits")
    l_file, _ = p.value_and_grad(galaxy, tmp_path / "obs.fits", loss="nll", variance=tmp_path / "var.fits")
    assert l_file == l_var


def test_gradient_errors(ssp, galaxy):
    p = ifu.Pipeline(None, ssp=ssp, devices=2)
    obs = _observed(ssp, galaxy)
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] unknown loss 'l2'|^\[ifu.*'l2'"):
        p.value_and_grad(galaxy, obs, loss="l2")
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] the array given: the observed cube is .* but MUSE makes"):
        p.value_and_grad(galaxy, obs[:, :, :-1], loss="mse")
    bad = obs.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ifu.InputError, match=r"1 elements of the observed cube are not finite"):
        p.value_and_grad(galaxy, bad, loss="mse")
    with pytest.raises(ifu.InputError, match=r"^\[ifu\] mask: expected shape"):
        p.value_and_grad(galaxy, obs, loss="mse", mask=np.ones((2, 2), bool))


def test_fit_reduces_the_loss(ssp, galaxy):
    obs = _observed(ssp, galaxy)
    seen = []
    r = ifu.fit(None, galaxy, obs, devices=2, ssp=ssp, params=["age"], steps=6, optimizer="adam", lr=0.05,
                loss="mse", callback=lambda step, loss: seen.append((step, loss)))
    assert len(r.losses) == 7 and r.losses[-1] < r.losses[0]
    assert [s for s, _ in seen] == list(range(1, 7))
    assert r.galaxy["age"].shape == (3000,) and not np.array_equal(r.galaxy["age"], galaxy["age"])
    np.testing.assert_array_equal(r.galaxy["mass"], galaxy["mass"])
    assert r.model.shape == obs.shape
    # The same path on another device count, and L-BFGS too.
    r5 = ifu.fit(None, galaxy, obs, devices=5, ssp=ssp, params="age", steps=6, optimizer="adam", lr=0.05, loss="mse")
    np.testing.assert_array_equal(r5.losses, r.losses)
    rl = ifu.fit(None, galaxy, obs, devices=2, ssp=ssp, params=["age"], steps=4, optimizer="lbfgs", loss="mse")
    assert rl.losses[-1] < rl.losses[0]


def test_fit_errors(ssp, galaxy):
    obs = _observed(ssp, galaxy)
    with pytest.raises(ifu.InputError, match=r"coords"):
        ifu.fit(None, galaxy, obs, devices=2, ssp=ssp, params=["coords"], steps=1)
    with pytest.raises(ifu.InputError, match=r"sgd"):
        ifu.fit(None, galaxy, obs, devices=2, ssp=ssp, params=["age"], steps=1, optimizer="sgd")

    def boom(step, loss):
        raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        ifu.fit(None, galaxy, obs, devices=2, ssp=ssp, params=["age"], steps=3, loss="mse", callback=boom)
    # The runtime is still usable after a Python error inside the fit.
    assert ifu.run(None, galaxy, devices=2, ssp=ssp).data.sum() > 0


@pytest.mark.skipif(not os.path.exists(os.path.join(os.environ.get("TESSERA_IFU_DATA", "/nonexistent"), "BC03lr.h5")),
                    reason="BC03 templates not fetched (TESSERA_IFU_DATA)")
def test_bc03_default_run():
    c = ifu.run(particles=2000, seed=1, devices=4)
    assert c.data.shape[2] == len(c.wavelength) and c.data.sum() > 0
    np.testing.assert_array_equal(ifu.run(particles=2000, seed=1, devices=1).data, c.data)


@pytest.mark.skipif(not os.environ.get("TESSERA_CLI"), reason="TESSERA_CLI (the tessera program) not given")
def test_same_cube_as_the_command_line(ssp, tmp_path):
    # The same generated disk and templates through `tessera ifu` and
    # through tessera.ifu: the same bits, header included.
    ssp.save(tmp_path / "ssp.h5")
    out = tmp_path / "cli.fits"
    subprocess.run([os.environ["TESSERA_CLI"], "ifu", "--ssp", str(tmp_path / "ssp.h5"), "--particles", "3000",
                    "--seed", "3", "--devices", "3", "--no-plots", "--quiet", "--output", str(out)], check=True)
    cli, header = ifu.read_fits(out)
    c = ifu.run(None, None, devices=5, ssp=ssp, particles=3000, seed=3)
    np.testing.assert_array_equal(cli, c.data)
    assert int(header["NAPER"]) == c.in_aperture
    for key in ("CRVAL3", "CDELT3", "CDELT1", "CRPIX1"):
        assert float(header[key]) == pytest.approx(c.wcs[key], rel=1e-6), key
