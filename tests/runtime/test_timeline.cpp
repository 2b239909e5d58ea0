// Tests of observability: per-device memory statistics, the timeline written
// by trace::start/stop and by TESSERA_TRACE, and what a scope costs when no
// trace records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime/timeline.hpp"
#include "tessera/tessera.hpp"
#include "test_util.hpp"

namespace ts = tessera;
namespace td = tessera::detail;
using ts::testing::expect_error;

namespace {

// ------------------------------------------------------- a minimal JSON reader

// Enough JSON to check the trace file: a parse error fails the test.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* get(const std::string& key) const {
    for (const auto& [k, v] : object)
      if (k == key) return &v;
    return nullptr;
  }
  std::string str(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == String ? v->string : "";
  }
  double num(const std::string& key, double missing = -1) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == Number ? v->number : missing;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  Json document() {
    Json v = value();
    space();
    if (i_ != s_.size()) fail("trailing text");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(i_) + ": " + what);
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    space();
    if (i_ >= s_.size() || s_[i_] != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool peek(char c) {
    space();
    return i_ < s_.size() && s_[i_] == c;
  }
  std::string text() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c == '\\') {
        if (i_ >= s_.size()) fail("unfinished escape");
        c = s_[i_++];
        if (c == 'u') {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          out += static_cast<char>(std::stoi(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          continue;
        }
        if (std::string("\"\\/bfnrt").find(c) == std::string::npos) fail("bad escape");
      }
      out += c;
    }
    expect('"');
    return out;
  }
  Json value() {
    space();
    if (i_ >= s_.size()) fail("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Object;
      ++i_;
      if (peek('}')) return ++i_, v;
      do {
        std::string k = text();
        expect(':');
        v.object.emplace_back(std::move(k), value());
      } while (peek(',') && ++i_);
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Array;
      ++i_;
      if (peek(']')) return ++i_, v;
      do v.array.push_back(value());
      while (peek(',') && ++i_);
      expect(']');
    } else if (c == '"') {
      v.kind = Json::String;
      v.string = text();
    } else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0) {
      v.kind = Json::Bool;
      i_ += c == 't' ? 4 : 5;
    } else if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
    } else {
      std::size_t used = 0;
      try {
        v.number = std::stod(s_.substr(i_, 32), &used);
      } catch (const std::exception&) {
        fail("expected a value");
      }
      v.kind = Json::Number;
      i_ += used;
    }
    return v;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file name in the test's temporary directory, unique to this process.
std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "tessera_" + std::to_string(getpid()) + "_" + name;
}

// The trace at `path`, parsed, with its events.
struct Trace {
  Json doc;
  std::vector<const Json*> events;  // every entry of traceEvents
  std::map<int, std::string> rows;  // tid -> thread_name

  explicit Trace(const std::string& path) {
    const std::string text = read_file(path);
    EXPECT_EQ(text.rfind("{\"traceEvents\":[", 0), 0u) << text.substr(0, 80);
    doc = JsonReader(text).document();
    const Json* list = doc.get("traceEvents");
    if (list == nullptr || list->kind != Json::Array) throw std::runtime_error("no traceEvents array");
    for (const Json& e : list->array) {
      events.push_back(&e);
      if (e.str("ph") == "M" && e.str("name") == "thread_name") {
        const int tid = static_cast<int>(e.num("tid"));
        EXPECT_EQ(rows.count(tid), 0u) << "two names for row " << tid;
        rows[tid] = e.get("args")->str("name");
      }
    }
  }
  // Complete events named `name`.
  std::vector<const Json*> spans(const std::string& name) const {
    std::vector<const Json*> out;
    for (const Json* e : events)
      if (e->str("ph") == "X" && e->str("name") == name) out.push_back(e);
    return out;
  }
  // Names of the rows the given events are on.
  std::set<std::string> rows_of(const std::vector<const Json*>& es) const {
    std::set<std::string> out;
    for (const Json* e : es) out.insert(rows.at(static_cast<int>(e->num("tid"))));
    return out;
  }
};

std::set<std::string> device_rows(int n) {
  std::set<std::string> out;
  for (int d = 0; d < n; ++d) out.insert("device " + std::to_string(d));
  return out;
}

// A program with a sharded op, a reshard and a shard_map psum on 8 devices.
void run_program() {
  ts::Mesh mesh = ts::make_mesh({8}, {"x"});
  std::vector<float> host(16 * 8);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7);
  ts::Array a = ts::device_put(host, {16, 8}, ts::NamedSharding(mesh, ts::P("x")));
  ts::Array y = 2.0f * a + 1.0f;
  ts::Array z = ts::reshard(y, ts::P(ts::none, "x"));
  auto f = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl), "x"); }, mesh, {ts::P("x")}, ts::P());
  ts::Array total = f(z);
  float expect = 0;
  for (float v : host) expect += 2 * v + 1;
  EXPECT_EQ(total.item<float>(), expect);
}

}  // namespace

// ------------------------------------------------------------- memory stats

TEST(MemoryStats, RiseWithAllocationFallWhenFreedPeakHolds) {
  const ts::Device dev = ts::devices()[3];
  td::Runtime::get().allocator(3).release_cache();  // so every block below is new
  const ts::MemoryStats before = ts::memory_stats(dev), other = ts::memory_stats(ts::devices()[4]);
  const std::int64_t a_size = 12288, b_size = 4032;  // what 10000 and 4000 bytes round to
  {
    td::Buffer a(3, 10000);
    const ts::MemoryStats one = ts::memory_stats(dev);
    EXPECT_EQ(one.bytes_in_use, before.bytes_in_use + a_size);
    EXPECT_EQ(one.num_allocs, before.num_allocs + 1);
    EXPECT_GE(one.peak_bytes_in_use, one.bytes_in_use);
    EXPECT_GE(one.largest_alloc_size, a_size);
    {
      td::Buffer b(3, 4000);
      EXPECT_EQ(ts::memory_stats(dev).bytes_in_use, before.bytes_in_use + a_size + b_size);
    }
    const ts::MemoryStats freed = ts::memory_stats(dev);
    EXPECT_EQ(freed.bytes_in_use, before.bytes_in_use + a_size);
    EXPECT_EQ(freed.peak_bytes_in_use, std::max(before.peak_bytes_in_use, before.bytes_in_use + a_size + b_size));
    EXPECT_EQ(freed.bytes_cached, before.bytes_cached + b_size);  // kept for reuse
  }
  const ts::MemoryStats after = ts::memory_stats(dev);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + a_size + b_size);
  // Another device's allocator saw none of it.
  EXPECT_EQ(ts::memory_stats(ts::devices()[4]).num_allocs, other.num_allocs);
}

TEST(MemoryStats, ShardedArraysCountOnEveryDevice) {
  const auto devs = ts::devices();
  std::vector<ts::MemoryStats> before;
  for (const auto& d : devs) before.push_back(ts::memory_stats(d));
  {
    // 8 x 1024 f32 rows over 8 devices: one 4 KiB page each.
    ts::Array a = ts::zeros({8, 1024}, ts::f32, ts::NamedSharding(ts::make_mesh({8}, {"x"}), ts::P("x")));
    for (int d = 0; d < 8; ++d) {
      const ts::MemoryStats st = ts::memory_stats(devs[d]);
      EXPECT_EQ(st.bytes_in_use, before[d].bytes_in_use + 4096) << "device " << d;
      EXPECT_GE(st.peak_bytes_in_use, st.bytes_in_use);
      EXPECT_GT(st.num_allocs, before[d].num_allocs);
    }
  }
  for (int d = 0; d < 8; ++d) EXPECT_EQ(ts::memory_stats(devs[d]).bytes_in_use, before[d].bytes_in_use);
}

TEST(MemoryStats, ResetPeakStartsFromWhatIsInUse) {
  const ts::Device dev = ts::devices()[5];
  td::Runtime::get().allocator(5).release_cache();
  { td::Buffer big(5, 1 << 20); }
  td::Buffer small(5, 64);
  EXPECT_GE(ts::memory_stats(dev).peak_bytes_in_use, 1 << 20);
  ts::reset_peak_memory(dev);
  ts::MemoryStats st = ts::memory_stats(dev);
  EXPECT_EQ(st.peak_bytes_in_use, st.bytes_in_use);
  { td::Buffer mid(5, 8192); }
  EXPECT_EQ(ts::memory_stats(dev).peak_bytes_in_use, st.bytes_in_use + 8192);
}

TEST(MemoryStats, UnknownDeviceRaises) {
  expect_error<ts::DeviceError>([] { ts::memory_stats(ts::Device::from_id(8)); }, "[memory_stats]",
                                {"[0, 8)", "got 8"});
  expect_error<ts::DeviceError>([] { ts::reset_peak_memory(ts::Device::from_id(-1)); }, "[reset_peak_memory]",
                                {"got -1"});
}

// ------------------------------------------------------------------ traces

TEST(Trace, RecordsTasksCollectivesAndReshardsPerDevice) {
  const std::string path = temp_path("program.json");
  ts::devices();  // start the runtime outside the recording
  ts::trace::start(path);
  EXPECT_TRUE(ts::trace::active());
  run_program();
  ts::trace::stop();
  EXPECT_FALSE(ts::trace::active());

  Trace t(path);
  // One named row per device used, plus the host thread.
  std::set<std::string> names;
  for (const auto& [tid, name] : t.rows) names.insert(name);
  std::set<std::string> want = device_rows(8);
  want.insert("host");
  EXPECT_EQ(names, want);
  for (const auto& [tid, name] : t.rows)
    if (name.rfind("device ", 0) == 0) {
      EXPECT_EQ(tid, std::stoi(name.substr(7)) + 1) << name;
    }

  // Every complete event is well formed.
  for (const Json* e : t.events) {
    if (e->str("ph") != "X") continue;
    EXPECT_GE(e->num("ts"), 0) << e->str("name");
    EXPECT_GE(e->num("dur"), 0) << e->str("name");
    EXPECT_EQ(e->num("pid"), static_cast<double>(getpid()));
    EXPECT_EQ(t.rows.count(static_cast<int>(e->num("tid"))), 1u) << "unnamed row for " << e->str("name");
    EXPECT_FALSE(e->str("cat").empty());
  }

  // The reshard: on the host, with what it moved; its copies on the devices.
  const auto reshards = t.spans("reshard");
  ASSERT_FALSE(reshards.empty());
  const Json* r = nullptr;
  for (const Json* e : reshards)
    if (e->str("cat") == "reshard" && e->get("args")->str("op") == "reshard") r = e;
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(t.rows_of({r}), std::set<std::string>{"host"});
  EXPECT_EQ(r->get("args")->str("kind"), "all-to-all");
  EXPECT_EQ(r->get("args")->str("type"), "f32[16@x,8]");
  EXPECT_EQ(r->get("args")->num("bytes"), 16 * 8 * 4 * 7 / 8);  // each device keeps 1/8 of its rows
  EXPECT_EQ(t.rows_of(t.spans("exchange")), device_rows(8));
  for (const Json* e : t.spans("exchange")) EXPECT_EQ(e->str("cat"), "collective");

  // The psum: one per device, inside that device's shard_map task.
  const auto psums = t.spans("psum");
  ASSERT_EQ(psums.size(), 8u);
  EXPECT_EQ(t.rows_of(psums), device_rows(8));
  std::vector<const Json*> tasks;
  for (const Json* e : t.spans("shard_map"))
    if (e->str("cat") == "task") tasks.push_back(e);
  EXPECT_EQ(t.rows_of(tasks), [] {
    auto s = device_rows(8);
    s.insert("host");
    return s;
  }());
  for (const Json* p : psums) {
    EXPECT_EQ(p->str("cat"), "collective");
    EXPECT_EQ(p->get("args")->num("bytes"), 4);  // one f32
    bool inside = false;
    for (const Json* task : tasks)
      inside = inside || (task->num("tid") == p->num("tid") && task->num("ts") <= p->num("ts") &&
                          p->num("ts") + p->num("dur") <= task->num("ts") + task->num("dur") + 0.001);
    EXPECT_TRUE(inside) << "psum at " << p->num("ts") << " outside its device's shard_map task";
  }

  // The elementwise op ran as plain tasks on every device.
  EXPECT_EQ(t.rows_of(t.spans("task")), device_rows(8));

  // Memory counters, one series per device that allocated.
  std::set<std::string> counters;
  for (const Json* e : t.events)
    if (e->str("ph") == "C") {
      counters.insert(e->str("name"));
      EXPECT_GE(e->get("args")->num("bytes_in_use"), 0);
    }
  EXPECT_EQ(counters.count("device 0 memory"), 1u);
  EXPECT_EQ(counters.count("device 7 memory"), 1u);
  std::filesystem::remove(path);
}

TEST(Trace, ScopesNameTheirDeviceTasksAndNest) {
  const std::string path = temp_path("nest.json");
  ts::trace::start(path);
  {
    td::TimelineScope step("step 1", "kernel");
    EXPECT_TRUE(step);
    step.arg("note", "quote \" and \\ and\nnewline");
    td::run_on_devices(ts::devices(), [](int i) {
      td::TimelineScope inner("inner", "kernel", 8 * i);
      EXPECT_EQ(td::TimelineScope::innermost_name("none"), "inner");
    });
  }
  EXPECT_EQ(td::TimelineScope::innermost_name("none"), "none");
  ts::trace::stop();
  Trace t(path);
  std::vector<const Json*> step, tasks;
  for (const Json* e : t.spans("step 1")) (e->str("cat") == "task" ? tasks : step).push_back(e);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0]->get("args")->str("note"), "quote \" and \\ and\nnewline");
  EXPECT_EQ(t.rows_of(step), std::set<std::string>{"host"});
  // The device tasks take the caller's scope name; scopes inside them nest.
  EXPECT_EQ(tasks.size(), 8u);
  EXPECT_EQ(t.rows_of(tasks), device_rows(8));
  EXPECT_EQ(t.rows_of(t.spans("inner")), device_rows(8));
  for (const Json* e : t.spans("inner")) EXPECT_EQ(e->get("args")->num("bytes"), 8 * (e->num("tid") - 1));
  std::filesystem::remove(path);
}

TEST(Trace, JitCallsRecordKernelsAndFusedLoopsPerDevice) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::zeros({64, 4}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::zeros({4, 3}, ts::f32, ts::NamedSharding(m, ts::P()));
  auto f = ts::jit([&](ts::Array v) { return ts::sigmoid(ts::matmul(v, w) + 1.0f) * 2.0f; }, {}, "layer");
  f(x).block_until_ready();  // compile outside the recording
  const std::string path = temp_path("jit.json");
  ts::trace::start(path);
  f(x).block_until_ready();
  ts::trace::stop();
  Trace t(path);
  std::vector<const Json*> call, tasks;
  for (const Json* e : t.spans("layer")) (t.rows_of({e}) == std::set<std::string>{"host"} ? call : tasks).push_back(e);
  ASSERT_EQ(call.size(), 1u);
  EXPECT_EQ(t.rows_of(tasks), device_rows(8));  // the per-device task takes the call's name
  EXPECT_EQ(t.rows_of(t.spans("matmul")), device_rows(8));
  const auto fused = t.spans("fused[add,sigmoid,multiply]");
  EXPECT_EQ(t.rows_of(fused), device_rows(8));
  for (const Json* e : fused) {
    EXPECT_EQ(e->str("cat"), "fused");
    EXPECT_EQ(e->get("args")->num("bytes"), 8 * 3 * 4);  // the result's block
  }
  std::filesystem::remove(path);
}

// The second call of a jitted `f` (the first compiles) recorded, and the
// spans of its per-device tasks (named after the call).
template <class F>
std::vector<const Json*> recorded_call(F& f, const ts::Array& x, const std::string& name, std::optional<Trace>& t) {
  f(x).block_until_ready();
  const std::string path = temp_path(name + ".json");
  ts::trace::start(path);
  f(x).block_until_ready();
  ts::trace::stop();
  t.emplace(path);
  std::filesystem::remove(path);
  std::vector<const Json*> tasks;
  for (const Json* e : t->spans(name))
    if (t->rows_of({e}) != std::set<std::string>{"host"}) tasks.push_back(e);
  return tasks;
}

TEST(Trace, AJitCallWithCollectivesIsOneTaskPerDevice) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::zeros({64}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  auto w = ts::zeros({64, 3}, ts::f32, ts::NamedSharding(m, ts::P()));
  // Slices w, all-reduces the partial products, then reshards the result.
  auto f = ts::jit([&](ts::Array v) { return ts::tanh(ts::matmul(v, w)); },
                   {.out_shardings = {ts::NamedSharding(m, ts::P("x"))}}, "contract");
  std::optional<Trace> t;
  const auto tasks = recorded_call(f, x, "contract", t);
  EXPECT_EQ(tasks.size(), 8u);  // one per device for the whole call
  EXPECT_EQ(t->rows_of(tasks), device_rows(8));
  EXPECT_EQ(t->rows_of(t->spans("reshard")), device_rows(8));
}

// Ops that partition themselves (a halo exchange, a scan carrying totals
// between devices, a reshape across a sharded dim) run inside the same one
// task per device as the kernels around them.
TEST(Trace, AJitCallWithOpsThatPartitionThemselvesIsOneTaskPerDevice) {
  ts::Mesh m = ts::make_mesh({8}, {"x"});
  auto x = ts::zeros({61, 6}, ts::f32, ts::NamedSharding(m, ts::P("x")));
  auto f = ts::jit([](ts::Array v) { return ts::reshape(ts::cumsum(ts::diff(ts::sin(v), 1, 0), 0) * 2.0f, {-1}); }, {},
                   "stencils");
  std::optional<Trace> t;
  const auto tasks = recorded_call(f, x, "stencils", t);
  EXPECT_EQ(tasks.size(), 8u);
  EXPECT_EQ(t->rows_of(tasks), device_rows(8));
  for (const char* op : {"diff", "cumsum", "reshape"}) EXPECT_EQ(t->rows_of(t->spans(op)), device_rows(8)) << op;
  // A shard_map inside the function too: its body's psum meets in the
  // call's own task.
  auto body = ts::shard_map([](ts::Array xl) { return ts::psum(ts::sum(xl, {0}), "x"); }, m, {ts::P("x")}, ts::P());
  auto g = ts::jit([&](ts::Array v) { return body(ts::diff(v, 1, 0)) * 2.0f; }, {}, "manual");
  std::optional<Trace> t2;
  const auto tasks2 = recorded_call(g, x, "manual", t2);
  EXPECT_EQ(tasks2.size(), 8u);
  EXPECT_EQ(t2->rows_of(tasks2), device_rows(8));
  EXPECT_EQ(t2->rows_of(t2->spans("psum")), device_rows(8));
}

TEST(Trace, NothingIsRecordedOutsideARecording) {
  {
    td::TimelineScope off("off", "kernel");
    EXPECT_FALSE(off);
    off.arg("bytes", 1);  // ignored
  }
  const std::string path = temp_path("empty.json");
  td::TimelineScope open_before("open before start", "kernel");  // not recorded: opened before
  ts::trace::start(path);
  ts::trace::stop();
  ts::trace::stop();  // no recording: nothing to do
  Trace t(path);
  for (const Json* e : t.events) EXPECT_NE(e->str("ph"), "X") << e->str("name");
  std::filesystem::remove(path);
}

TEST(Trace, BadPathsAndDoubleStartsRaise) {
  const std::string bad = "/nonexistent-tessera-dir/trace.json";
  expect_error<ts::DeviceError>([&] { ts::trace::start(bad); }, "[trace]",
                                {"cannot open '" + bad + "'", "No such file"});
  EXPECT_FALSE(ts::trace::active());
  expect_error<ts::DeviceError>([] { ts::trace::start(""); }, "[trace]", {"empty"});
  const std::string path = temp_path("twice.json");
  ts::trace::start(path);
  expect_error<ts::DeviceError>([&] { ts::trace::start(temp_path("other.json")); }, "[trace]",
                                {"already recording to '" + path + "'", "other.json"});
  ts::trace::stop();
  std::filesystem::remove(path);
}

// Threads record while others start and stop recordings: every file is valid
// and every event lands in the recording it opened in (ThreadSanitizer runs
// this too).
TEST(Trace, ConcurrentRecordingAndStartStop) {
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k)
    threads.emplace_back([&, k] {
      while (!done.load()) {
        td::TimelineScope s("host work", "kernel", k);
        td::run_on_devices(ts::testing::ids({k, k + 3}), [](int) { td::TimelineScope d("device work", "kernel"); });
      }
    });
  for (int round = 0; round < 10; ++round) {
    const std::string path = temp_path("race" + std::to_string(round) + ".json");
    ts::trace::start(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ts::trace::stop();
    Trace t(path);  // throws on invalid JSON
    for (const Json* e : t.events)
      if (e->str("ph") == "X") {
        EXPECT_EQ(t.rows.count(static_cast<int>(e->num("tid"))), 1u);
      }
    std::filesystem::remove(path);
  }
  done = true;
  for (auto& th : threads) th.join();
}

// With no recording, a scope costs one relaxed load and a branch. Measured
// here (best of five) so that a regression shows; the bound is loose enough
// for sanitizer builds.
TEST(Trace, ScopeCostsAlmostNothingWhenOff) {
  ASSERT_FALSE(ts::trace::active());
  constexpr int kScopes = 1000000;
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kScopes; ++i) td::TimelineScope s("kernel", "kernel", i);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ns / kScopes);
  }
  std::printf("TimelineScope with no recording: %.2f ns\n", best);
  EXPECT_LT(best, 50.0);
}

// --------------------------------------------------------- TESSERA_TRACE

namespace {

// Runs this test binary again with `env` prepended, on one test; its exit
// status (0: passed) and output.
std::pair<int, std::string> run_child(const std::string& env, const std::string& test) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string log = temp_path(test + ".log");
  const std::string cmd = env + " TESSERA_TIMELINE_CHILD=" + test + " '" + self + "' --gtest_filter=TraceEnvChild." +
                          test + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::string out = read_file(log);
  std::filesystem::remove(log);
  return {status, out};
}

bool is_child(const char* test) {
  const char* env = std::getenv("TESSERA_TIMELINE_CHILD");
  return env != nullptr && std::string(env) == test;
}

}  // namespace

// The children: run only when the parent tests below start them.
TEST(TraceEnvChild, Records) {
  if (!is_child("Records")) GTEST_SKIP() << "run by TraceEnv.WritesTheFileAtExit";
  ts::devices();
  EXPECT_TRUE(ts::trace::active()) << "recording starts with the runtime";
  run_program();
  // No stop(): the file is written as the process exits.
}

TEST(TraceEnvChild, BadPath) {
  if (!is_child("BadPath")) GTEST_SKIP() << "run by TraceEnv.BadPathFailsTheRuntimeStart";
  expect_error<ts::DeviceError>([] { ts::devices(); }, "[trace]",
                                {"'/nonexistent-tessera-dir/t.json'", "TESSERA_TRACE", "No such file"});
}

TEST(TraceEnv, WritesTheFileAtExit) {
  const std::string path = temp_path("env.json");
  std::filesystem::remove(path);
  const auto [status, out] = run_child("TESSERA_TRACE='" + path + "'", "Records");
  ASSERT_EQ(status, 0) << out;
  ASSERT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  ASSERT_TRUE(std::filesystem::exists(path)) << out;
  Trace t(path);
  EXPECT_EQ(t.rows_of(t.spans("psum")), device_rows(8));
  EXPECT_FALSE(t.spans("reshard").empty());
  std::filesystem::remove(path);
}

TEST(TraceEnv, BadPathFailsTheRuntimeStart) {
  const auto [status, out] = run_child("TESSERA_TRACE=/nonexistent-tessera-dir/t.json", "BadPath");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}
