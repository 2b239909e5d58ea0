// The IFU scenario in a few lines: star particles sharded over every device
// in any number (no padding), per-particle spectra resampled and summed into
// a datacube exactly, then the same cube on one device, bit for bit.
//
//   ifu_pipeline [particles]
//
// It uses a small generated template grid, so it needs no download; `tessera
// ifu` runs the real thing (BC03 templates, FITS output, pictures).
//
// Under mpirun the particles are sharded over every process's devices; every
// process builds the same galaxy, gathers the cube with
// ts::process_allgather and computes the one-device cube on a device of its
// own; process 0 prints.
#include <cstdlib>
#include <iostream>

#include "../common/processes.hpp"
#include "ifu/config.hpp"
#include "ifu/generate.hpp"
#include "ifu/pipeline.hpp"

namespace ts = tessera;
namespace ifu = tessera::ifu;

int main(int argc, char** argv) try {
  std::ostream& out = examples::on_process0(std::cout);
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 30011;
  const ifu::Config cfg = ifu::parse_config(R"(telescope:
  name: MUSE
  psf: {name: gaussian, size: 5, sigma: 0.6}
  lsf: {sigma: 0.5}
  noise: {signal_to_noise: 30, noise_distribution: normal}
galaxy:
  dist_z: 0.1
  rotation: {alpha: 60.0, beta: 20.0, gamma: 30.0}
ssp:
  template: {name: BruzualCharlot2003}
  method: cubic
)", "example config");
  const ifu::SspGrid ssp = ifu::generate_ssp_grid();
  ifu::DiskOptions disk;
  disk.particles = n;
  const ifu::GalaxyData galaxy = ifu::generate_disk(disk);

  auto cube_on = [&](const ts::Mesh& mesh) {
    const ifu::Pipeline pipe(cfg, ssp, mesh);
    const ifu::Particles particles = pipe.put(galaxy);  // P("data"): uneven blocks, no padding
    out << "  particles " << ts::typeof(particles.mass) << " on " << mesh.str() << "\n";
    return pipe.run(particles);
  };
  const auto devs = ts::devices();
  const ifu::Cube all = cube_on(ts::make_mesh({static_cast<int>(devs.size())}, {"data"}));
  const ifu::Cube one = cube_on(ts::Mesh({examples::first_local_device()}, {1}, {"data"}));
  out << "  cube " << ts::typeof(all.data) << ", " << all.in_aperture << " of " << n
      << " particles inside the aperture\n";
  // `all` spans the processes (gathered on every process); `one` lies on a
  // device of this process.
  const bool same = examples::on_every_process(ts::process_allgather<float>(all.data) == one.data.to_vector<float>());
  out << "  " << devs.size() << " devices vs 1 device: " << (same ? "bitwise the same cube" : "DIFFERENT")
      << " (noise included)\n";
  return same ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "ifu_pipeline: " << e.what() << "\n";
  return 1;
}
