// Tests of the runtime: devices, per-device worker threads, run_on_devices,
// exception propagation, caching allocators, buffers and configuration.
#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <unordered_set>
#include <vector>

#include "core/array_impl.hpp"
#include "runtime/runtime.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;
using ts::testing::expect_error;
namespace td = tessera::detail;

namespace {


struct CustomError : std::exception {
  explicit CustomError(int c) : code(c) {}
  const char* what() const noexcept override { return "custom error"; }
  int code;
};

std::vector<ts::Device> some(std::initializer_list<int> ids) {
  std::vector<ts::Device> out;
  for (int i : ids) out.push_back(ts::Device::from_id(i));
  return out;
}

}  // namespace

// ------------------------------------------------------------------ devices

TEST(Devices, EightDevicesWithIdsInOrder) {
  auto devs = ts::devices();
  ASSERT_EQ(devs.size(), 8u);
  EXPECT_EQ(ts::device_count(), 8);
  EXPECT_EQ(ts::process_index(), 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devs[i].id(), i);
    EXPECT_EQ(devs[i].kind(), "cpu");
    EXPECT_EQ(devs[i].process_index(), 0);
  }
  EXPECT_EQ(td::Runtime::get().num_devices(), 8);
  EXPECT_TRUE(td::Runtime::started());
}

TEST(Devices, StrAndValueSemantics) {
  auto devs = ts::devices();
  EXPECT_EQ(devs[3].str(), "CpuDevice(id=3)");
  EXPECT_EQ(devs[0].str(), "CpuDevice(id=0)");
  EXPECT_EQ(ts::Device::from_id(7), devs[7]);
  EXPECT_NE(devs[1], devs[2]);
  EXPECT_LT(devs[1], devs[2]);
  std::unordered_set<ts::Device> set(devs.begin(), devs.end());
  set.insert(ts::Device::from_id(3));
  EXPECT_EQ(set.size(), 8u);
  EXPECT_EQ(std::hash<ts::Device>()(devs[5]), std::hash<ts::Device>()(ts::Device::from_id(5)));
}

// ------------------------------------------------------------ run_on_devices

TEST(RunOnDevices, CallerIsNotAWorker) {
  ts::devices();
  EXPECT_EQ(td::current_device(), -1);
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(td::Runtime::get().worker(i).is_current());
}

TEST(RunOnDevices, RunsEachIndexOnItsDevicesWorker) {
  auto devs = ts::devices();
  std::vector<int> seen(8, -2);
  std::vector<std::thread::id> tids(8);
  std::vector<int> calls(8, 0);
  td::run_on_devices(devs, [&](int i) {
    seen[i] = td::current_device();
    tids[i] = std::this_thread::get_id();
    calls[i]++;
    EXPECT_TRUE(td::Runtime::get().worker(devs[i].id()).is_current());
  });
  std::set<std::thread::id> distinct(tids.begin(), tids.end());
  EXPECT_EQ(distinct.size(), 8u);
  EXPECT_EQ(distinct.count(std::this_thread::get_id()), 0u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(seen[i], devs[i].id());
    EXPECT_EQ(calls[i], 1);
  }
  EXPECT_EQ(td::current_device(), -1);
}

TEST(RunOnDevices, SubsetInAnyOrderMapsIndexToListedDevice) {
  auto list = some({5, 2, 7});
  std::vector<int> seen(3, -2);
  td::run_on_devices(list, [&](int i) { seen[i] = td::current_device(); });
  EXPECT_EQ(seen, (std::vector<int>{5, 2, 7}));
}

TEST(RunOnDevices, EmptyListReturnsAtOnce) {
  int calls = 0;
  td::run_on_devices({}, [&](int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(RunOnDevices, SameWorkerAlwaysSameThread) {
  std::thread::id first;
  td::run_on_devices(some({4}), [&](int) { first = std::this_thread::get_id(); });
  for (int k = 0; k < 20; ++k) {
    std::thread::id again;
    td::run_on_devices(some({4}), [&](int) { again = std::this_thread::get_id(); });
    EXPECT_EQ(again, first);
  }
}

TEST(Worker, TasksRunInSubmissionOrder) {
  ts::devices();
  td::Worker& w = td::Runtime::get().worker(3);
  std::vector<int> order;  // touched only on worker 3
  std::promise<void> done;
  constexpr int kTasks = 2000;
  for (int i = 0; i < kTasks; ++i) {
    w.submit([&order, i] {
      // Make early tasks slower so a reordering queue would show.
      if (i % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      order.push_back(i);
    });
  }
  w.submit([&] { done.set_value(); });
  done.get_future().get();
  ASSERT_EQ(order.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(order[i], i);
}

TEST(Worker, InOrderAcrossRunOnDevicesCalls) {
  // Successive calls from one thread to the same device see each other's effects.
  std::vector<int> log;  // touched only on worker 6
  for (int i = 0; i < 200; ++i) td::run_on_devices(some({6}), [&, i](int) { log.push_back(i); });
  ASSERT_EQ(log.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(log[i], i);
}

TEST(Worker, StandaloneWorkerDrainsQueueOnStop) {
  std::vector<int> order;
  std::vector<int> device_seen;
  for (bool poll : {false, true}) {
    order.clear();
    device_seen.clear();
    td::Worker w(42, poll);
    EXPECT_FALSE(w.is_current());
    for (int i = 0; i < 100; ++i)
      w.submit([&, i] {
        if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        order.push_back(i);
        device_seen.push_back(td::current_device());
      });
    w.stop();  // must run all 100 queued tasks, then join
    ASSERT_EQ(order.size(), 100u);
  }
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(device_seen[i], 42);
  }
}

TEST(RunOnDevices, NestedCallForOwnDeviceRunsInline) {
  std::thread::id outer, inner;
  int inner_device = -2;
  int inner_calls = 0;
  auto fut = std::async(std::launch::async, [&] {
    td::run_on_devices(some({2}), [&](int) {
      outer = std::this_thread::get_id();
      td::run_on_devices(some({2}), [&](int j) {
        EXPECT_EQ(j, 0);
        inner = std::this_thread::get_id();
        inner_device = td::current_device();
        ++inner_calls;
      });
    });
  });
  // A deadlock would hang here: fail after a generous timeout instead.
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "nested call deadlocked";
  fut.get();
  EXPECT_EQ(outer, inner);
  EXPECT_EQ(inner_device, 2);
  EXPECT_EQ(inner_calls, 1);
}

TEST(RunOnDevices, NestedCallOverAllDevicesRunsOwnIndexInline) {
  auto devs = ts::devices();
  std::vector<int> seen(8, -2);
  std::vector<std::thread::id> tids(8);
  std::thread::id outer;
  td::run_on_devices(some({5}), [&](int) {
    outer = std::this_thread::get_id();
    td::run_on_devices(devs, [&](int i) {
      seen[i] = td::current_device();
      tids[i] = std::this_thread::get_id();
    });
  });
  for (int i = 0; i < 8; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_EQ(tids[5], outer);
  for (int i = 0; i < 8; ++i) {
    if (i != 5) {
      EXPECT_NE(tids[i], outer);
    }
  }
}

TEST(RunOnDevices, EveryDeviceNestingOnItself) {
  auto devs = ts::devices();
  std::vector<int> inner(8, -2);
  td::run_on_devices(devs, [&](int i) {
    td::run_on_devices({devs[i]}, [&](int) { inner[i] = td::current_device(); });
  });
  for (int i = 0; i < 8; ++i) EXPECT_EQ(inner[i], i);
}

// A device listed twice, called from that device's own worker: both run inline.
TEST(RunOnDevices, DuplicateDeviceFromItsOwnWorker) {
  std::atomic<int> calls{0};
  td::run_on_devices(some({0}), [&](int) { td::run_on_devices(some({0, 0}), [&](int) { ++calls; }); });
  EXPECT_EQ(calls.load(), 2);
}

TEST(RunOnDevices, DuplicateDeviceFromCallerThreadRunsBoth) {
  std::vector<int> idx;  // both tasks on worker 1, serialised
  td::run_on_devices(some({1, 1, 1}), [&](int i) { idx.push_back(i); });
  EXPECT_EQ(idx, (std::vector<int>{0, 1, 2}));
}

// ------------------------------------------------------------- exceptions

TEST(RunOnDevicesErrors, ShapeErrorKeepsTypeAndMessage) {
  auto devs = ts::devices();
  expect_error<ts::ShapeError>(
      [&] {
        td::run_on_devices(devs, [](int i) {
          if (i == 3) throw ts::ShapeError("[test] shard 3 has the wrong shape");
        });
      },
      "[test]", {"shard 3", "wrong shape"});
}

TEST(RunOnDevicesErrors, StdOutOfRangeKeepsType) {
  auto devs = ts::devices();
  try {
    td::run_on_devices(devs, [](int i) {
      if (i == 6) throw std::out_of_range("index 6 out of range");
    });
    FAIL() << "nothing thrown";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "index 6 out of range");
  } catch (...) {
    FAIL() << "wrong exception type";
  }
}

TEST(RunOnDevicesErrors, CustomTypeKeepsTypeAndState) {
  auto devs = ts::devices();
  try {
    td::run_on_devices(devs, [](int i) {
      if (i == 1) throw CustomError(1234);
    });
    FAIL() << "nothing thrown";
  } catch (const CustomError& e) {
    EXPECT_EQ(e.code, 1234);
  } catch (...) {
    FAIL() << "wrong exception type";
  }
}

TEST(RunOnDevicesErrors, NonStdExceptionKeepsType) {
  try {
    td::run_on_devices(some({0, 1}), [](int i) {
      if (i == 1) throw 77;
    });
    FAIL() << "nothing thrown";
  } catch (int v) {
    EXPECT_EQ(v, 77);
  }
}

TEST(RunOnDevicesErrors, LowestIndexExceptionWins) {
  auto devs = ts::devices();
  for (int rep = 0; rep < 20; ++rep) {
    try {
      td::run_on_devices(devs, [](int i) {
        // The higher index throws first, the lower one later.
        if (i == 6) throw std::out_of_range("six");
        if (i == 2) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          throw ts::DTypeError("[test] two");
        }
      });
      FAIL() << "nothing thrown";
    } catch (const ts::DTypeError& e) {
      EXPECT_STREQ(e.what(), "[test] two");
    } catch (...) {
      FAIL() << "expected the exception of index 2";
    }
  }
}

TEST(RunOnDevicesErrors, EveryTaskCompletesWhenSeveralThrow) {
  auto devs = ts::devices();
  std::atomic<int> finished{0};
  std::vector<int> ran(8, 0);
  try {
    td::run_on_devices(devs, [&](int i) {
      ran[i] = 1;
      if (i % 2 == 0) {
        finished.fetch_add(1);
        throw ts::CollectiveError("[test] device " + std::to_string(i) + " failed");
      }
      // Non-throwing tasks finish well after the throwers.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished.fetch_add(1);
    });
    FAIL() << "nothing thrown";
  } catch (const ts::CollectiveError& e) {
    EXPECT_STREQ(e.what(), "[test] device 0 failed");
  }
  EXPECT_EQ(finished.load(), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ran[i], 1);
}

TEST(RunOnDevicesErrors, InlineNestedExceptionReachesOuterCaller) {
  try {
    td::run_on_devices(some({4, 5}), [](int i) {
      td::run_on_devices(some({4 + i}), [](int) { throw ts::ShardingError("[inner] nested failure"); });
    });
    FAIL() << "nothing thrown";
  } catch (const ts::ShardingError& e) {
    EXPECT_STREQ(e.what(), "[inner] nested failure");
  }
}

TEST(RunOnDevicesErrors, RuntimeKeepsWorkingAfterManyFailures) {
  auto devs = ts::devices();
  for (int k = 0; k < 100; ++k) {
    EXPECT_THROW(td::run_on_devices(devs,
                                    [k](int i) {
                                      if (i == k % 8) throw ts::ShapeError("[test] failure " + std::to_string(k));
                                    }),
                 ts::ShapeError);
  }
  std::vector<int> seen(8, -2);
  EXPECT_NO_THROW(td::run_on_devices(devs, [&](int i) { seen[i] = td::current_device(); }));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(seen[i], i);
  // Arrays still work too.
  auto mesh = ts::make_mesh({8}, {"x"});
  std::vector<float> host(20);
  for (int i = 0; i < 20; ++i) host[i] = static_cast<float>(i);
  auto a = ts::device_put(host, {20}, ts::NamedSharding(mesh, ts::P("x")));
  EXPECT_EQ(a.to_vector<float>(), host);
}

// ------------------------------------------------------------- allocator

TEST(Allocator, RoundSize) {
  EXPECT_EQ(td::Allocator::round_size(0), 0u);
  EXPECT_EQ(td::Allocator::round_size(1), 64u);
  EXPECT_EQ(td::Allocator::round_size(63), 64u);
  EXPECT_EQ(td::Allocator::round_size(64), 64u);
  EXPECT_EQ(td::Allocator::round_size(65), 128u);
  EXPECT_EQ(td::Allocator::round_size(4095), 4096u);
  EXPECT_EQ(td::Allocator::round_size(4096), 4096u);
  EXPECT_EQ(td::Allocator::round_size(4097), 8192u);
  EXPECT_EQ(td::Allocator::round_size(10000), 12288u);
  for (std::size_t n : {1u, 7u, 100u, 3000u, 5000u, 70000u}) {
    EXPECT_GE(td::Allocator::round_size(n), n);
    EXPECT_EQ(td::Allocator::round_size(n) % 64, 0u);
  }
}

TEST(Allocator, ZeroBytesGivesNull) {
  td::Allocator a(0);
  EXPECT_EQ(a.allocate(0), nullptr);
  a.deallocate(nullptr, 0);  // no-op
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.bytes_cached(), 0u);
}

TEST(Allocator, BlocksAre64ByteAlignedAndUsable) {
  td::Allocator a(1);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t n : {1u, 3u, 63u, 64u, 65u, 100u, 1000u, 4095u, 4096u, 5000u, 1u << 20}) {
    void* p = a.allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << "size " << n;
    std::memset(p, 0xab, n);  // the whole request is writable
    blocks.emplace_back(p, n);
  }
  for (auto [p, n] : blocks) a.deallocate(p, n);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

TEST(Allocator, FreedBlockIsReusedForSameSize) {
  td::Allocator a(2);
  void* p = a.allocate(100);
  EXPECT_EQ(a.bytes_in_use(), 128u);
  EXPECT_EQ(a.bytes_cached(), 0u);
  a.deallocate(p, 100);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.bytes_cached(), 128u);
  void* q = a.allocate(100);
  EXPECT_EQ(q, p) << "the cached block should come back";
  EXPECT_EQ(a.bytes_in_use(), 128u);
  EXPECT_EQ(a.bytes_cached(), 0u);
  a.deallocate(q, 100);
  // Another request that rounds to the same size reuses it too.
  void* r = a.allocate(120);
  EXPECT_EQ(r, p);
  a.deallocate(r, 120);
  // Large (page-rounded) blocks.
  void* big = a.allocate(10000);
  a.deallocate(big, 10000);
  EXPECT_EQ(a.bytes_cached(), 128u + 12288u);
  void* big2 = a.allocate(12000);
  EXPECT_EQ(big2, big);
  a.deallocate(big2, 12000);
}

TEST(Allocator, DifferentSizeClassDoesNotReuse) {
  td::Allocator a(3);
  void* p = a.allocate(100);  // 128
  a.deallocate(p, 100);
  void* q = a.allocate(200);  // 256: p is still cached, so q must differ
  EXPECT_NE(q, p);
  EXPECT_EQ(a.bytes_in_use(), 256u);
  EXPECT_EQ(a.bytes_cached(), 128u);
  a.deallocate(q, 200);
  EXPECT_EQ(a.bytes_cached(), 384u);
}

TEST(Allocator, AccountingAndReleaseCache) {
  td::Allocator a(4);
  void* p1 = a.allocate(64);
  void* p2 = a.allocate(65);
  void* p3 = a.allocate(5000);
  EXPECT_EQ(a.bytes_in_use(), 64u + 128u + 8192u);
  a.deallocate(p2, 65);
  EXPECT_EQ(a.bytes_in_use(), 64u + 8192u);
  EXPECT_EQ(a.bytes_cached(), 128u);
  a.deallocate(p1, 64);
  a.deallocate(p3, 5000);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.bytes_cached(), 64u + 128u + 8192u);
  a.release_cache();
  EXPECT_EQ(a.bytes_cached(), 0u);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

TEST(Allocator, ConcurrentUseIsSafe) {
  td::Allocator a(5);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      for (int k = 0; k < 500; ++k) {
        std::size_t n = 64 * static_cast<std::size_t>(1 + (k + t) % 5);
        auto* p = static_cast<unsigned char*>(a.allocate(n));
        p[0] = static_cast<unsigned char>(k);
        p[n - 1] = static_cast<unsigned char>(t);
        a.deallocate(p, n);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

// ---------------------------------------------------------------- buffers

TEST(Buffer, ReturnsMemoryToItsDeviceAllocator) {
  ts::devices();
  td::Allocator& a5 = td::Runtime::get().allocator(5);
  a5.release_cache();
  const std::size_t in_use0 = a5.bytes_in_use();
  const std::size_t n = 12345;  // rounds to 16384
  void* first = nullptr;
  {
    td::Buffer b(5, n);
    EXPECT_EQ(b.device_id(), 5);
    EXPECT_EQ(b.nbytes(), n);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
    EXPECT_EQ(a5.bytes_in_use(), in_use0 + td::Allocator::round_size(n));
    first = b.data();
    td::Buffer copy = b;  // shares the block
    EXPECT_EQ(copy.data(), b.data());
    EXPECT_EQ(a5.bytes_in_use(), in_use0 + td::Allocator::round_size(n));
  }
  EXPECT_EQ(a5.bytes_in_use(), in_use0);
  EXPECT_EQ(a5.bytes_cached(), td::Allocator::round_size(n));
  td::Buffer again(5, n);
  EXPECT_EQ(again.data(), first) << "the freed block should be reused from the cache";
  EXPECT_EQ(a5.bytes_cached(), 0u);
}

TEST(Buffer, DestroyedOnAnotherWorkerReturnsToOwner) {
  ts::devices();
  td::Allocator& a6 = td::Runtime::get().allocator(6);
  td::Allocator& a1 = td::Runtime::get().allocator(1);
  const std::size_t in6 = a6.bytes_in_use(), in1 = a1.bytes_in_use();
  const std::size_t cached1 = a1.bytes_cached();
  auto holder = std::make_shared<td::Buffer>(6, 1000);
  EXPECT_EQ(a6.bytes_in_use(), in6 + 1024);
  td::run_on_devices(some({1}), [&](int) { holder.reset(); });
  EXPECT_EQ(a6.bytes_in_use(), in6);
  EXPECT_EQ(a1.bytes_in_use(), in1);
  EXPECT_EQ(a1.bytes_cached(), cached1);
}

TEST(Buffer, ZeroBytesAndDefault) {
  td::Buffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.nbytes(), 0u);
  EXPECT_EQ(empty.device_id(), -1);
  td::Buffer zero(3, 0);
  EXPECT_EQ(zero.data(), nullptr);
  EXPECT_EQ(zero.nbytes(), 0u);
  EXPECT_EQ(zero.device_id(), 3);
}

TEST(Buffer, ArrayShardsLiveOnTheirDevices) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<double> host(16 * 8, 1.0);
  auto arr = ts::device_put(host, {16, 8}, ts::NamedSharding(mesh, ts::P("x", "y")));
  const auto& impl = *arr.impl();
  ASSERT_EQ(impl.buffers.size(), 8u);
  for (int pos = 0; pos < 8; ++pos) {
    EXPECT_EQ(impl.buffers[pos].device_id(), mesh.devices()[pos].id());
    EXPECT_EQ(impl.buffers[pos].nbytes(), 8u * 2u * sizeof(double));
  }
}

// ---------------------------------------------------------------- config

TEST(Config, SameCountAfterStartIsAccepted) {
  ts::devices();
  EXPECT_NO_THROW(ts::config::set_num_cpu_devices(8));
  EXPECT_EQ(ts::device_count(), 8);
}

TEST(Config, DifferentCountAfterStartThrows) {
  ts::devices();
  EXPECT_THROW(ts::config::set_num_cpu_devices(3), ts::DeviceError);
  expect_error<ts::DeviceError>([] { ts::config::set_num_cpu_devices(3); }, "[set_num_cpu_devices]",
                                {"8", "3", "already started"});
  EXPECT_EQ(ts::device_count(), 8);
}

TEST(Config, NonPositiveCountThrows) {
  EXPECT_THROW(ts::config::set_num_cpu_devices(0), ts::DeviceError);
  expect_error<ts::DeviceError>([] { ts::config::set_num_cpu_devices(0); }, "[set_num_cpu_devices]", {">= 1", "0"});
  expect_error<ts::DeviceError>([] { ts::config::set_num_cpu_devices(-4); }, "[set_num_cpu_devices]", {"-4"});
  EXPECT_EQ(ts::device_count(), 8);
}

TEST(Config, AbsurdCountsThrowBeforeMakingThreads) {
  expect_error<ts::DeviceError>([] { ts::config::set_num_cpu_devices(100000); }, "[set_num_cpu_devices]",
                                {"<= 4096", "100000", "worker thread"});
  expect_error<ts::DeviceError>([] { ts::config::set_num_cpu_devices(INT_MIN); }, "[set_num_cpu_devices]",
                                {">= 1"});
  EXPECT_EQ(ts::device_count(), 8);
}

// A start that cannot make its worker threads is tested in fresh processes
// (threadsafe death tests re-run this binary and run only the statement):
// the runtime starts on the first call there. The failure is simulated at
// one worker, as pthread_create fails when the system is out of threads, so
// the test needs no real limit (root ignores RLIMIT_NPROC) and runs the same
// under the sanitizers. Each check prints "start-check <code>" and exits with
// the code, 0 on success.
namespace {

[[noreturn]] void finish_start_check(int code) {
  std::fprintf(stderr, "start-check %d\n", code);
  std::fflush(stderr);
  std::_Exit(code);
}

[[noreturn]] void failed_start_then_fewer_devices() {
  int code = 0;
  td::fail_worker_start_at(5);
  ts::config::set_num_cpu_devices(8);
  try {
    (void)ts::devices();
    code = 2;
  } catch (const ts::DeviceError& e) {
    const std::string w = e.what();
    if (w.rfind("[devices] could start only 5 of 8 CPU devices", 0) != 0 ||
        w.find("set_num_cpu_devices") == std::string::npos)
      code = 3;
  } catch (...) {
    code = 4;
  }
  // Nothing started, so the count can still be chosen; the next start works.
  td::fail_worker_start_at(-1);
  try {
    ts::config::set_num_cpu_devices(3);
    if (ts::device_count() != 3) code = 5;
    const ts::Mesh m = ts::make_mesh({3}, {"x"});
    auto a = ts::device_put(std::vector<float>{1, 2, 3, 4}, {4}, ts::NamedSharding(m, ts::P("x")));
    if (ts::sum(a).item<float>() != 10.0f) code = 6;
  } catch (...) {
    code = 7;
  }
  finish_start_check(code);
}

[[noreturn]] void failed_start_then_same_count() {
  int code = 0;
  td::fail_worker_start_at(0);
  try {
    (void)ts::device_count();
    code = 2;
  } catch (const ts::DeviceError& e) {
    if (std::string(e.what()).find("could start only 0 of") == std::string::npos) code = 3;
  }
  td::fail_worker_start_at(-1);
  try {
    if (ts::device_count() < 1) code = 4;
  } catch (...) {
    code = 5;
  }
  finish_start_check(code);
}

}  // namespace

TEST(ConfigStart, FailedThreadStartIsDeviceErrorAndFewerDevicesWork) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(failed_start_then_fewer_devices(), ::testing::ExitedWithCode(0), "start-check 0");
}

TEST(ConfigStart, FailedThreadStartCanBeRetried) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(failed_start_then_same_count(), ::testing::ExitedWithCode(0), "start-check 0");
}

// ------------------------------------------------------------ concurrency

TEST(Concurrency, ManyThreadsOnOverlappingDevices) {
  auto devs = ts::devices();
  constexpr int kThreads = 6;
  constexpr int kIters = 150;
  // Each counter is only touched by its own device's worker (tasks on one
  // worker are serialised), so plain ints are enough; TSan checks that.
  std::vector<long> per_device(8, 0);
  std::vector<int> expected(8, 0);
  std::atomic<int> wrong_device{0};
  std::atomic<int> caught{0};
  std::vector<std::vector<ts::Device>> lists(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    lists[t] = some({t % 8, (t + 1) % 8, (t + 3) % 8, 7});
    for (const auto& d : lists[t]) expected[d.id()] += kIters;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto& list = lists[t];
      for (int k = 0; k < kIters; ++k) {
        try {
          td::run_on_devices(list, [&, k](int i) {
            if (td::current_device() != list[i].id()) wrong_device.fetch_add(1);
            per_device[list[i].id()]++;
            // Sometimes nest on the own device (inline), sometimes throw.
            if (k % 10 == 3) td::run_on_devices({list[i]}, [](int) {});
            if (k % 25 == 7 && i == 1) throw std::runtime_error("boom");
          });
        } catch (const std::runtime_error&) {
          caught.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong_device.load(), 0);
  EXPECT_EQ(caught.load(), kThreads * 6);  // k = 7, 32, 57, 82, 107, 132
  for (int d = 0; d < 8; ++d) EXPECT_EQ(per_device[d], expected[d]) << "device " << d;
}

TEST(Concurrency, ThreadsPuttingAndGatheringArrays) {
  auto mesh = ts::make_mesh({2, 4}, {"x", "y"});
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ts::NamedSharding s(mesh, t % 2 ? ts::P("x", "y") : ts::P(ts::none, {"y", "x"}));
      for (int k = 0; k < 30; ++k) {
        std::vector<int32_t> host(11 * 6);
        for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int32_t>(i * 7 + t + k);
        auto a = ts::device_put(host, {11, 6}, s);
        if (a.to_vector<int32_t>() != host) mismatches.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}
