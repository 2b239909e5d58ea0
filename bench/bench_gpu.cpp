// bench_gpu: Tessera on one GPU, each figure against the limit measured in
// the same run:
//
//   2*sin(x)+1     2^28 f32 under jit, 1 device       / device-to-device copy bandwidth
//                  (and launched as 4096 blocks, the
//                  shape before one-wave grids, diff
//                  too; and in other loop shapes: four
//                  per step, one kernel, one kernel
//                  held to 40 registers)
//   sin, x+y       2^28 f32 eager, 1 device           / copy bandwidth
//   diff           16384^2 f64 along the sharded axis,
//                  4 devices of the GPU, and along     / copy bandwidth
//                  axis 0 on 1 device
//   sgemm, dgemm   8192^3, 1 device                   / cuBLAS alone (time ratio)
//   psum           256 MiB over 4 devices of the GPU  / copy bandwidth
//   sum, sum axis 0  2^28 f32 whole, and 2^20 x 256 over  / copy bandwidth
//                  the leading dim, 1 device            (bytes read)
//   jit graphs     a cached jit call of 17 small steps
//                  (8 x row sum, scale, subtract),
//                  2^16 f32, 1 device, replayed as a
//                  CUDA graph                         / the same call op by op
//                                                       (time ratio)
//   transfers      device_put + to_vector of 1 GiB
//                  f32, 1 device                      / cudaMemcpy both ways
//                                                       from page-locked memory,
//                                                       and from vectors
//                                                       (time ratio)
//
// Bandwidths count each byte read and each byte written once (a copy of S
// bytes moves 2S). Without a GPU it says so and exits 0 (`make bench` runs
// it everywhere); --json writes the figures (or the reason) to a file.
//
//   bench_gpu [--json FILE] [--reps N] [--small]
//
// --small divides every size by 16 (a quick look; the goals are for the
// full sizes).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/native.hpp"
#include "backend/cuda/fused.hpp"
#include "backend/cuda/stream.hpp"
#include "bench_util.hpp"
#include "runtime/gpus.hpp"
#include "tessera/tessera.hpp"
#include "transforms/jit_graphs.hpp"

namespace ts = tessera;
namespace tb = tessera::bench;
using json = nlohmann::json;

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device-to-device copy bandwidth of `bytes` on GPU 0 (2 * bytes / time).
double copy_bandwidth(std::size_t bytes, int reps) {
  void *a = nullptr, *b = nullptr;
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc");
  cuda_ok(cudaMemset(a, 1, bytes), "cudaMemset");
  const auto t = tb::time_reps(2, reps, [&] {
    cuda_ok(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    cuda_ok(cudaDeviceSynchronize(), "sync");
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / tb::median(t);
}

// cuBLAS alone: C = A B for n x n x n in f32 or f64 (seconds).
double cublas_gemm_seconds(int n, bool f64, int reps) {
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  const std::size_t isz = f64 ? 8 : 4, bytes = static_cast<std::size_t>(n) * n * isz;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cuda_ok(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&b, bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&c, bytes), "cudaMalloc");
  cuda_ok(cudaMemset(a, 0, bytes), "cudaMemset");
  cuda_ok(cudaMemset(b, 0, bytes), "cudaMemset");
  const double one = 1, zero = 0;
  const float onef = 1, zerof = 0;
  const auto t = tb::time_reps(1, reps, [&] {
    const cublasStatus_t s =
        f64 ? cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<const double*>(a), n,
                          static_cast<const double*>(b), n, &zero, static_cast<double*>(c), n)
            : cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &onef, static_cast<const float*>(a), n,
                          static_cast<const float*>(b), n, &zerof, static_cast<float*>(c), n);
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cuBLAS gemm failed");
    cuda_ok(cudaDeviceSynchronize(), "sync");
  });
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cublasDestroy(h);
  return tb::median(t);
}

// cudaMemcpy of `bytes` from page-locked host memory to GPU 0 and back
// (seconds for both): the bus's limit for a transfer both ways.
double pinned_round_trip_seconds(std::size_t bytes, int reps) {
  void *host = nullptr, *dev = nullptr;
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cuda_ok(cudaHostAlloc(&host, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  cuda_ok(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  const auto t = tb::time_reps(1, reps, [&] {
    cuda_ok(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_ok(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  });
  cudaFree(dev);
  cudaFreeHost(host);
  return tb::median(t);
}

// The same round trip from and to pageable memory, as a program that
// calls cudaMemcpy on a vector gets it (the driver stages the bytes): a
// fresh result vector each time, as to_vector makes one.
double pageable_round_trip_seconds(const std::vector<float>& host, int reps) {
  void* dev = nullptr;
  const std::size_t bytes = host.size() * sizeof(float);
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cuda_ok(cudaMalloc(&dev, bytes), "cudaMalloc");
  const auto t = tb::time_reps(1, reps, [&] {
    cuda_ok(cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<float> back(host.size());
    cuda_ok(cudaMemcpy(back.data(), dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  });
  cudaFree(dev);
  return tb::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu: Tessera on one GPU against its copy bandwidth and cuBLAS"};
  std::string json_path;
  int reps = 5;
  bool small = false;
  app.add_option("--json", json_path, "write the figures as JSON");
  app.add_option("--reps", reps, "timed repetitions (median shown)")->check(CLI::Range(1, 100));
  app.add_flag("--small", small, "every size / 16");
  CLI11_PARSE(app, argc, argv);
  json out;
  auto finish = [&](int code) {
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    return code;
  };
  std::string why;
  if (ts::detail::cuda_device_count(&why) == 0 || ts::detail::emulated_gpus() > 0) {
    if (why.empty()) why = "emulated GPUs time nothing";
    std::cout << "bench_gpu: skipped: no GPU: " << why << "\n";
    out["skipped"] = why;
    return finish(0);
  }
  try {
    // Four Tessera devices on the GPU (the 4-device cases; the others use
    // the first), chosen before the runtime starts.
    setenv("TESSERA_DEVICES_PER_GPU", "4", 1);
    const auto devs = ts::devices("cuda");
    const int div = small ? 16 : 1;
    const ts::Mesh one(std::vector<ts::Device>{devs[0]}, {1}, {"x"});
    const ts::Mesh four(std::vector<ts::Device>(devs.begin(), devs.begin() + 4), {4}, {"x"});
    std::printf("%-14s %-34s %12s %12s %8s\n", "case", "size", "time", "figure", "ratio");
    auto row = [&](const char* name, const std::string& size, double s, const std::string& fig, double ratio,
                   const char* of) {
      std::printf("%-14s %-34s %12s %12s %8.2f  (of %s)\n", name, size.c_str(), tb::format_seconds(s).c_str(),
                  fig.c_str(), ratio, of);
      out["cases"].push_back({{"case", name}, {"size", size}, {"seconds", s}, {"ratio", ratio}, {"of", of}});
    };

    // 2*sin(x)+1 under jit.
    {
      const std::int64_t n = (std::int64_t(1) << 28) / div;
      const double bw = copy_bandwidth(static_cast<std::size_t>(n) * 4, reps);
      out["copy_bandwidth_gbps"] = bw / 1e9;
      const ts::Array x = ts::full({n}, 0.5, ts::DType::f32, ts::NamedSharding(one, ts::P()));
      auto f = ts::jit([](const ts::Array& v) { return ts::sin(v) * 2.0f + 1.0f; });
      const double s = tb::median(tb::time_reps(2, reps, [&] { f(x).block_until_ready(); }));
      const double eff = 2.0 * static_cast<double>(n) * 4 / s;
      row("2*sin(x)+1", std::to_string(n) + " f32, jit, 1 device", s, tb::format_seconds(s), eff / bw, "copy bandwidth");
      // The same loop without sin: what the memory path alone gives.
      auto g = ts::jit([](const ts::Array& v) { return v * 2.0f + 1.0f; });
      const double s2 = tb::median(tb::time_reps(2, reps, [&] { g(x).block_until_ready(); }));
      row("2*x+1", std::to_string(n) + " f32, jit, 1 device", s2, tb::format_seconds(s2), 2.0 * static_cast<double>(n) * 4 / s2 / bw,
          "copy bandwidth");
      // The launch shape before one-wave grids (4096 blocks of 256
      // threads), for comparison in the same run.
      ts::cuda::set_grid_blocks_cap(4096);
      const double s3 = tb::median(tb::time_reps(2, reps, [&] { f(x).block_until_ready(); }));
      ts::cuda::set_grid_blocks_cap(0);
      row("2*sin(x)+1", std::to_string(n) + " f32, jit, 4096 blocks", s3, tb::format_seconds(s3),
          2.0 * static_cast<double>(n) * 4 / s3 / bw, "copy bandwidth");
      // Other shapes of the loop (cpu::CudaLoopShape). The default splits
      // it: the polynomials' kernel takes 32 registers (ptxas -v, sm_90),
      // eight blocks of 256 threads per SM, and the fix-up, which holds
      // sin's slow path (46 registers), returns at once here. Beside it:
      // four elements per step instead of eight; and one kernel with the
      // slow path in it (46 registers, five blocks per SM; the default
      // before the split), as compiled and held to 40 registers (NVRTC's
      // --maxrregcount: six blocks, nothing spilled).
      struct Shape {
        const char* label;
        ts::cpu::CudaLoopShape shape;
        int registers;
      };
      for (const Shape& v : {Shape{"4 per step", {4, true}, 0}, Shape{"one kernel", {0, false}, 0},
                             Shape{"one kernel, 40 registers", {0, false}, 40}}) {
        ts::cpu::set_cuda_loop_shape(v.shape);
        ts::cuda::set_fused_max_registers(v.registers);
        auto fr = ts::jit([](const ts::Array& a) { return ts::sin(a) * 2.0f + 1.0f; });
        const double s4 = tb::median(tb::time_reps(2, reps, [&] { fr(x).block_until_ready(); }));
        ts::cuda::set_fused_max_registers(0);
        ts::cpu::set_cuda_loop_shape({});
        row("2*sin(x)+1", std::to_string(n) + " f32, jit, " + v.label, s4, tb::format_seconds(s4),
            2.0 * static_cast<double>(n) * 4 / s4 / bw, "copy bandwidth");
      }
      // Eager ops (no jit), a kernel each: sin (read and write) and x + y
      // (two reads, one write).
      const double se = tb::median(tb::time_reps(2, reps, [&] { ts::sin(x).block_until_ready(); }));
      row("sin, eager", std::to_string(n) + " f32, 1 device", se, tb::format_seconds(se),
          2.0 * static_cast<double>(n) * 4 / se / bw, "copy bandwidth");
      const ts::Array y = ts::full({n}, 0.25, ts::DType::f32, ts::NamedSharding(one, ts::P()));
      const double sa = tb::median(tb::time_reps(2, reps, [&] { (x + y).block_until_ready(); }));
      row("x+y, eager", std::to_string(n) + " f32, 1 device", sa, tb::format_seconds(sa),
          3.0 * static_cast<double>(n) * 4 / sa / bw, "copy bandwidth");
    }
    // Sums: a whole array (one long row) and over the leading dim (columns),
    // which read every byte once.
    {
      const std::int64_t n = (std::int64_t(1) << 28) / div;
      const double bw = copy_bandwidth(static_cast<std::size_t>(n) * 4, reps);
      const ts::Array x = ts::full({n}, 0.5, ts::DType::f32, ts::NamedSharding(one, ts::P()));
      const double s = tb::median(tb::time_reps(2, reps, [&] { ts::sum(x).block_until_ready(); }));
      row("sum", std::to_string(n) + " f32, 1 device", s, tb::format_seconds(s), static_cast<double>(n) * 4 / s / bw,
          "copy bandwidth");
      const ts::Array c = ts::full({n / 256, 256}, 0.5, ts::DType::f32, ts::NamedSharding(one, ts::P()));
      const double sc = tb::median(tb::time_reps(2, reps, [&] { ts::sum(c, {0}).block_until_ready(); }));
      row("sum axis 0", std::to_string(n / 256) + "x256 f32, 1 device", sc, tb::format_seconds(sc),
          static_cast<double>(n) * 4 / sc / bw, "copy bandwidth");
    }
    // diff along the sharded axis on 4 devices of the GPU.
    {
      const std::int64_t n = 16384 / (small ? 4 : 1);
      const std::size_t bytes = static_cast<std::size_t>(n) * n * 8;
      const double bw = copy_bandwidth(bytes / 4, reps);
      const ts::Array x = ts::full({n, n}, 1.0, ts::DType::f64, ts::NamedSharding(four, ts::P("x")));
      const double s = tb::median(tb::time_reps(1, reps, [&] { ts::diff(x, 1, 0).block_until_ready(); }));
      // Each device reads its block and writes its result: 2 * bytes over
      // 4 devices that share the GPU's bandwidth.
      const double eff = 2.0 * static_cast<double>(bytes) / s;
      row("diff", std::to_string(n) + "^2 f64, axis 0 sharded, 4 dev", s, tb::format_seconds(s), eff / bw,
          "copy bandwidth");
      ts::cuda::set_grid_blocks_cap(4096);  // as above: the earlier launch shape
      const double s4 = tb::median(tb::time_reps(1, reps, [&] { ts::diff(x, 1, 0).block_until_ready(); }));
      ts::cuda::set_grid_blocks_cap(0);
      row("diff", std::to_string(n) + "^2 f64, 4 dev, 4096 blocks", s4, tb::format_seconds(s4),
          2.0 * static_cast<double>(bytes) / s4 / bw, "copy bandwidth");
      // The same on one device: the kernel alone, without the halo exchange
      // and the four devices' launches.
      const ts::Array x1 = ts::full({n, n}, 1.0, ts::DType::f64, ts::NamedSharding(one, ts::P()));
      const double s1 = tb::median(tb::time_reps(1, reps, [&] { ts::diff(x1, 1, 0).block_until_ready(); }));
      row("diff", std::to_string(n) + "^2 f64, axis 0, 1 device", s1, tb::format_seconds(s1),
          2.0 * static_cast<double>(bytes) / s1 / bw, "copy bandwidth");
    }
    // GEMMs against cuBLAS alone.
    for (bool f64 : {false, true}) {
      const int n = 8192 / (small ? 4 : 1);
      const double ref = cublas_gemm_seconds(n, f64, reps);
      const ts::DType t = f64 ? ts::DType::f64 : ts::DType::f32;
      const ts::Array a = ts::full({n, n}, 1.0, t, ts::NamedSharding(one, ts::P()));
      const double s = tb::median(tb::time_reps(1, reps, [&] { ts::matmul(a, a).block_until_ready(); }));
      row(f64 ? "dgemm" : "sgemm", std::to_string(n) + "^3, 1 device", s, tb::format_seconds(ref) + " cuBLAS",
          ref / s, "cuBLAS alone");
    }
    // psum of 256 MiB over 4 devices of the GPU.
    {
      const std::int64_t n = (std::int64_t(256) << 20) / 4 / div;
      const double bw = copy_bandwidth(static_cast<std::size_t>(n) * 4, reps);
      const ts::Array x = ts::full({4 * n}, 1.0, ts::DType::f32, ts::NamedSharding(four, ts::P("x")));
      auto f = ts::shard_map([](ts::Array xl) { return ts::psum(xl, "x"); }, four, {ts::P("x")}, ts::P());
      const double s = tb::median(tb::time_reps(1, reps, [&] { f(x).block_until_ready(); }));
      // Every device reads the 4 blocks and writes one: 5 * S bytes of one
      // block's size S, over the GPU's shared bandwidth.
      const double eff = 5.0 * static_cast<double>(n) * 4 * 4 / s;
      row("psum", std::to_string(n * 4) + " bytes per device, 4 dev", s, tb::format_seconds(s), eff / bw,
          "copy bandwidth");
    }
    // A cached jit call of small steps that do not fuse into one (a row
    // sum, its scaling, the subtraction broadcasting it back, eight times
    // over: 17 steps): replayed as a graph (one launch, one wait) against op
    // by op (launches and a wait per step).
    {
      const ts::Array x = ts::full({256, 256}, 0.5, ts::DType::f32, ts::NamedSharding(one, ts::P()));
      auto f = ts::jit([](ts::Array v) {
        for (int k = 0; k < 8; ++k) v = v - ts::sum(v, {1}, {.keepdims = true}) * 1e-3f;
        return v;
      });
      ts::detail::set_jit_graphs(false);
      const double op_by_op = tb::median(tb::time_reps(3, reps * 20, [&] { f(x).block_until_ready(); }));
      ts::detail::set_jit_graphs(true);
      const auto before = ts::detail::jit_graph_stats();
      const double graphed = tb::median(tb::time_reps(3, reps * 20, [&] { f(x).block_until_ready(); }));
      const auto after = ts::detail::jit_graph_stats();
      if (after.replayed == before.replayed)
        throw std::runtime_error("jit graphs: no call was replayed (" + after.last_reason + ")");
      row("jit graphs", "17 steps on 2^16 f32, 1 device", graphed, tb::format_seconds(op_by_op) + " op by op",
          op_by_op / graphed, "op by op");
    }
    // device_put + to_vector of 1 GiB f32 (pageable host memory, as users
    // have it) against the same bytes both ways from page-locked memory.
    {
      const std::int64_t n = (std::int64_t(1) << 28) / div;
      const std::size_t bytes = static_cast<std::size_t>(n) * 4;
      const double ref = pinned_round_trip_seconds(bytes, reps);
      const std::vector<float> host(static_cast<std::size_t>(n), 1.5f);
      const ts::NamedSharding s1(one, ts::P());
      const double s = tb::median(tb::time_reps(1, reps, [&] {
        const std::vector<float> back = ts::device_put(host, {n}, s1).to_vector<float>();
        if (back.size() != host.size() || back.back() != 1.5f) throw std::runtime_error("transfers: wrong bytes back");
      }));
      row("transfers", std::to_string(n) + " f32 to GPU and back, 1 dev", s, tb::format_seconds(ref) + " pinned",
          ref / s, "cudaMemcpy, page-locked");
      const double pageable = pageable_round_trip_seconds(host, reps);
      row("transfers", std::to_string(n) + " f32 to GPU and back, 1 dev", s,
          tb::format_seconds(pageable) + " pageable", pageable / s, "cudaMemcpy, pageable vectors");
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu: " << e.what() << "\n";
    out["error"] = e.what();
    return finish(1);
  }
  return finish(0);
}
