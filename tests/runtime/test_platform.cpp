// Choosing a platform: devices(platform), TESSERA_PLATFORM and
// TESSERA_DEVICES_PER_GPU, and the GPU port under them. A machine without a
// GPU (or a build without CUDA) must say why there is none, never crash,
// never fall back to the CPU silently; with GPUs, TESSERA_PLATFORM=cuda runs
// on them. (The CUDA platform itself: test_cuda_platform.cpp.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/gpus.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
using ts::testing::expect_error;

namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST(GpuPort, CountsWithoutCrashingAndSaysWhyNone) {
  std::string why;
  const int n = td::cuda_device_count(&why);
  ASSERT_GE(n, 0);
  if (n == 0) {
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(td::cuda_gpus().empty());
  } else {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_EQ(static_cast<int>(td::cuda_gpus().size()), n);
  }
  // Asked again: the same answer (and no error left behind in the runtime).
  std::string again;
  EXPECT_EQ(td::cuda_device_count(&again), n);
  EXPECT_EQ(again, why);
}

#ifdef TESSERA_TEST_WITH_CUDA
TEST(GpuPort, NamesTheCudaErrorWhenThereIsNoGpu) {
  std::string why;
  if (td::cuda_device_count(&why) > 0) GTEST_SKIP() << "this machine has a GPU";
  // The runtime's reason by name and number (35: no driver, 100: no
  // device), or the driver's empty list.
  EXPECT_TRUE(why.find("(cudaError") != std::string::npos || why.rfind("no CUDA device", 0) == 0) << why;
  EXPECT_FALSE(td::cuda_runtime_version().empty());
}
#else
TEST(GpuPort, SaysBuiltWithoutCuda) {
  std::string why;
  EXPECT_EQ(td::cuda_device_count(&why), 0);
  EXPECT_EQ(why.rfind("built without CUDA", 0), 0u) << why;
  EXPECT_TRUE(td::cuda_runtime_version().empty());
}
#endif

TEST(Platform, CpuGivesTheCpuDevices) {
  EXPECT_EQ(ts::devices("cpu"), ts::devices());
  for (const auto& d : ts::devices("cpu")) EXPECT_EQ(d.kind(), "cpu");
}

TEST(Platform, CudaSaysWhyItCannotRun) {
  std::string why;
  if (td::cuda_device_count(&why) == 0) {
    expect_error<ts::DeviceError>([] { (void)ts::devices("cuda"); }, "[devices] devices(\"cuda\"): no CUDA GPU: ",
                                  {why});
  } else {
    // This process already runs on the CPU devices.
    (void)ts::devices();
    expect_error<ts::DeviceError>([] { (void)ts::devices("cuda"); }, "[devices] devices(\"cuda\"): ",
                                  {"this process runs on the CPU devices", "one platform per process",
                                   "TESSERA_PLATFORM=cuda"});
  }
}

TEST(Platform, UnknownPlatformListsTheAcceptedOnes) {
  expect_error<ts::DeviceError>([] { (void)ts::devices("tpu"); }, "[devices] devices(\"tpu\"): ",
                                {"expected a platform 'cpu' or 'cuda'", "got 'tpu'"});
  expect_error<ts::DeviceError>([] { (void)ts::devices(""); }, "[devices] devices(\"\"): ", {"got ''"});
}

TEST(Platform, SettingIsReadAsGiven) {
  {
    ScopedEnv e("TESSERA_PLATFORM", nullptr);
    EXPECT_EQ(ts::config::platform_setting(), std::nullopt);
  }
  {
    ScopedEnv e("TESSERA_PLATFORM", "");
    EXPECT_EQ(ts::config::platform_setting(), std::nullopt);
  }
  ScopedEnv e("TESSERA_PLATFORM", "cuda");
  EXPECT_EQ(ts::config::platform_setting(), std::optional<std::string>("cuda"));
}

TEST(Platform, DevicesPerGpu) {
  {
    ScopedEnv e("TESSERA_DEVICES_PER_GPU", nullptr);
    EXPECT_EQ(ts::config::devices_per_gpu(), 1);
  }
  {
    ScopedEnv e("TESSERA_DEVICES_PER_GPU", "4");
    EXPECT_EQ(ts::config::devices_per_gpu(), 4);
  }
  for (const char* bad : {"0", "-2", "x", "2x", "", "1.5", "99999999999999999999", "1025"}) {
    ScopedEnv e("TESSERA_DEVICES_PER_GPU", bad);
    expect_error<ts::DeviceError>([] { (void)ts::config::devices_per_gpu(); },
                                  "[devices] TESSERA_DEVICES_PER_GPU: expected a positive integer",
                                  {std::string("got '") + bad + "'"});
  }
}

// TESSERA_PLATFORM is read as the runtime starts, so these run in a fresh
// process each (a death test re-runs the binary): they print
// "platform-check <code>" and exit with the code, 0 on success.
namespace {

[[noreturn]] void finish(int code, const std::string& detail = "") {
  std::fprintf(stderr, "platform-check %d %s\n", code, detail.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

// The start fails with `prefix`...; then, with the setting fixed, it works:
// a failed platform check leaves nothing started.
[[noreturn]] void start_fails_then_works(const char* platform, const std::string& prefix) {
  setenv("TESSERA_PLATFORM", platform, 1);
  try {
    (void)ts::devices();
    finish(2, "the runtime started");
  } catch (const ts::DeviceError& e) {
    if (std::string(e.what()).rfind(prefix, 0) != 0) finish(3, e.what());
  } catch (...) {
    finish(4);
  }
  setenv("TESSERA_PLATFORM", "cpu", 1);
  try {
    if (ts::device_count() < 1) finish(5);
    if (ts::devices("cpu").size() != ts::devices().size()) finish(6);
  } catch (const std::exception& e) {
    finish(7, e.what());
  }
  finish(0);
}

[[noreturn]] void bogus_platform() {
  start_fails_then_works("bogus", "[devices] TESSERA_PLATFORM=bogus: expected a platform 'cpu' or 'cuda', got 'bogus'");
}

[[noreturn]] void cuda_platform() {
  std::string why;
  if (td::cuda_device_count(&why) == 0)
    start_fails_then_works("cuda", "[devices] TESSERA_PLATFORM=cuda: no CUDA GPU: " + why);
  // With GPUs the runtime starts on them.
  setenv("TESSERA_PLATFORM", "cuda", 1);
  try {
    for (const auto& d : ts::devices())
      if (d.kind() != "cuda") finish(2, d.str());
  } catch (const std::exception& e) {
    finish(3, e.what());
  }
  finish(0);
}

[[noreturn]] void cpu_platform() {
  setenv("TESSERA_PLATFORM", "cpu", 1);
  try {
    if (ts::device_count() < 1) finish(2);
  } catch (const std::exception& e) {
    finish(3, e.what());
  }
  finish(0);
}

}  // namespace

TEST(PlatformStart, UnknownPlatformStopsTheStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(bogus_platform(), ::testing::ExitedWithCode(0), "platform-check 0");
}

TEST(PlatformStart, CudaStopsTheStartSayingWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(cuda_platform(), ::testing::ExitedWithCode(0), "platform-check 0");
}

TEST(PlatformStart, CpuStarts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(cpu_platform(), ::testing::ExitedWithCode(0), "platform-check 0");
}
