// The CUDA platform: devices, memory, transfers and the refusal of host
// access to GPU memory. ctest runs this binary with TESSERA_PLATFORM=cuda,
// on emulated GPUs (TESSERA_CUDA_EMULATE=2, label cuda-emulated) everywhere
// and on the real GPUs where there are some (label cuda).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/array_impl.hpp"
#include "primitives/primitive.hpp"
#include "runtime/gpus.hpp"
#include "runtime/runtime.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
using ts::testing::expect_error;

namespace {

int per_gpu() { return ts::config::devices_per_gpu(); }

// A primitive with a CPU kernel only: what an op without a CUDA kernel does.
class CpuOnly final : public td::Primitive {
 public:
  std::string_view name() const override { return "cpu_only"; }
  std::vector<td::TypeInfo> infer(std::span<const td::AbstractArray> in) const override {
    return {td::TypeInfo{in[0].shape, in[0].dtype}};
  }
  td::ShardingRule rule(std::span<const td::AbstractArray> in) const override {
    return td::elementwise_rule({in[0].shape}, in[0].shape);
  }
  void eval_cpu(const td::LocalArgs&, td::LocalOuts&) const override {}
};

}  // namespace

TEST(CudaPlatform, DevicesAreGpus) {
  const auto all = ts::devices();
  ASSERT_EQ(static_cast<int>(all.size()), td::cuda_device_count() * per_gpu());
  for (const auto& d : all) {
    EXPECT_EQ(d.kind(), "cuda");
    EXPECT_EQ(d.str(), "CudaDevice(id=" + std::to_string(d.id()) + ")");
  }
  EXPECT_EQ(ts::devices("cuda"), all);
  // One platform per process: the CPU devices are not there.
  expect_error<ts::DeviceError>([] { (void)ts::devices("cpu"); }, "[devices] devices(\"cpu\"): ",
                                {"this process runs on the CUDA devices", "one platform per process",
                                 "TESSERA_PLATFORM=cpu"});
}

TEST(CudaPlatform, DevicesSplitGpusInOrder) {
  // k devices per GPU: devices 0..k-1 on GPU 0, k..2k-1 on GPU 1, each with
  // a stream of its own.
  td::Runtime& rt = td::Runtime::get();
  for (const auto& d : ts::devices()) {
    const td::GpuHandle* g = rt.gpu(d.id());
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->ordinal, d.id() / per_gpu());
    EXPECT_EQ(g->device_id, d.id());
    if (!g->emulated && d.id() > 0) {
      EXPECT_NE(g->stream, rt.gpu(d.id() - 1)->stream);
    }
  }
}

TEST(CudaPlatform, TransfersRoundTripEveryDtypeAndLayout) {
  const int n = ts::device_count();
  const std::vector<std::vector<int>> shapes = n >= 8 ? std::vector<std::vector<int>>{{8}, {2, 4}, {4, 2}}
                                                      : std::vector<std::vector<int>>{{n}};
  for (const auto& ms : shapes) {
    std::vector<std::string> names = ms.size() == 1 ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "y"};
    const ts::Mesh mesh = ts::make_mesh(std::vector<int>(ms.begin(), ms.end()), names);
    for (std::int64_t rows : {std::int64_t(0), std::int64_t(3), std::int64_t(13)}) {
      const ts::Shape shape{rows, 5};
      std::vector<double> host(static_cast<size_t>(rows * 5));
      for (size_t i = 0; i < host.size(); ++i) host[i] = 0.25 * static_cast<double>(i);  // converts exactly to every dtype
      const std::vector<ts::PartitionSpec> specs{ts::P(), ts::P("x"), ts::P(ts::none, "x"),
                                                 ms.size() == 2 ? ts::P("x", "y") : ts::P("x")};
      for (const ts::PartitionSpec& spec : specs) {
        const ts::NamedSharding s(mesh, spec);
        for (ts::DType t : {ts::DType::f64, ts::DType::f32, ts::DType::i32, ts::DType::u8, ts::DType::bool_}) {
          // Converted on the GPU, read back through the host conversion.
          const ts::Array a = ts::astype(ts::device_put(host, shape, s), t);
          const std::vector<double> back = a.to_vector<double>();
          ASSERT_EQ(back.size(), host.size());
          for (size_t i = 0; i < host.size(); ++i) {
            double want = host[i];
            if (t == ts::DType::f32) want = static_cast<float>(want);
            if (t == ts::DType::i32 || t == ts::DType::u8) want = static_cast<double>(static_cast<std::int64_t>(want));
            if (t == ts::DType::bool_) want = want != 0;
            EXPECT_EQ(back[i], want) << "element " << i << " dtype " << ts::dtype_name(t) << " spec " << spec.str();
          }
        }
      }
    }
  }
}

TEST(CudaPlatform, AddressableShardsHoldGpuBlocks) {
  const ts::Mesh mesh = ts::make_mesh({ts::device_count()}, {"x"});
  std::vector<float> host(37);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  const ts::Array a = ts::device_put(host, {37}, ts::NamedSharding(mesh, ts::P("x")));
  std::int64_t seen = 0;
  for (const auto& sh : a.addressable_shards()) {
    EXPECT_EQ(sh.device.kind(), "cuda");
    const auto block = sh.data.to_vector<float>();
    for (size_t i = 0; i < block.size(); ++i) EXPECT_EQ(block[i], static_cast<float>(sh.index[0].start + static_cast<std::int64_t>(i)));
    seen += static_cast<std::int64_t>(block.size());
  }
  EXPECT_EQ(seen, 37);
}

TEST(CudaPlatform, HostCodeCannotReachGpuMemory) {
  const ts::Mesh mesh(std::vector<ts::Device>{ts::devices()[0]}, {1}, {"x"});
  const ts::Array a = ts::device_put(std::vector<float>{1, 2, 3}, {3}, ts::NamedSharding(mesh, ts::P()));
  const td::Buffer& b = a.impl()->buffers[0];
  EXPECT_FALSE(b.on_host());
  EXPECT_NE(b.device_data(), nullptr);
  expect_error<ts::DeviceError>([&] { (void)b.data(); }, "[internal] host code reached for the memory of CUDA device 0",
                                {"copied to the host"});
}

TEST(CudaPlatform, OpsWithoutACudaKernelSaySo) {
  const ts::Mesh mesh = ts::make_mesh({ts::device_count()}, {"x"});
  const ts::Array a = ts::device_put(std::vector<float>(16, 1.0f), {16}, ts::NamedSharding(mesh, ts::P("x")));
  expect_error<ts::DeviceError>([&] { (void)td::bind1(std::make_shared<CpuOnly>(), {a}); },
                                "[cpu_only] has no CUDA kernel yet", {"CPU devices only"});
  // The runtime goes on.
  EXPECT_EQ((a + 1.0f).to_vector<float>(), std::vector<float>(16, 2.0f));
}

TEST(CudaPlatform, MemoryStatsFollowGpuAllocations) {
  const ts::Device d = ts::devices()[0];
  const ts::MemoryStats before = ts::memory_stats(d);
  {
    const ts::Mesh mesh(std::vector<ts::Device>{d}, {1}, {"x"});
    const ts::Array a = ts::device_put(std::vector<double>(1 << 16, 1.0), {1 << 16}, ts::NamedSharding(mesh, ts::P()));
    const ts::MemoryStats during = ts::memory_stats(d);
    EXPECT_GE(during.bytes_in_use - before.bytes_in_use, std::int64_t(8) << 16);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
  }
  EXPECT_EQ(ts::memory_stats(d).bytes_in_use, before.bytes_in_use);
}

TEST(CudaPlatform, ExhaustedMemoryNamesTheDeviceAndTheBytes) {
  // More than the GPU has: refused with the device and the bytes asked, and
  // the device goes on working.
  const ts::Device d = ts::devices()[0];
  const std::size_t huge = std::size_t(1) << 60;
  expect_error<ts::DeviceError>([&] { td::Buffer b(d.id(), huge); },
                                "[allocate] cannot allocate " + std::to_string(huge) +
                                    " bytes (1.0 EiB) on CUDA device 0 (GPU 0): more than the GPU's memory",
                                {"shard the array over more devices"});
  const ts::Mesh mesh(std::vector<ts::Device>{d}, {1}, {"x"});
  const ts::Array a = ts::device_put(std::vector<float>{1, 2}, {2}, ts::NamedSharding(mesh, ts::P()));
  EXPECT_EQ((a * 2.0f).to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST(CudaPlatform, KernelsRunOnEveryDeviceOfAMesh) {
  // Every device computes its own block (no host fallback): the sharded
  // result equals the one computed on one device.
  const int n = ts::device_count();
  const ts::Mesh mesh = ts::make_mesh({n}, {"x"});
  const ts::Mesh one(std::vector<ts::Device>{ts::devices()[n - 1]}, {1}, {"x"});
  std::vector<float> host(1001);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.01f * static_cast<float>(i) - 4.0f;
  const auto f = [](const ts::Array& x) { return ts::sin(x) * 2.0f + ts::exp(x); };
  const auto sharded = f(ts::device_put(host, {1001}, ts::NamedSharding(mesh, ts::P("x")))).to_vector<float>();
  const auto single = f(ts::device_put(host, {1001}, ts::NamedSharding(one, ts::P()))).to_vector<float>();
  EXPECT_EQ(sharded, single);
}
