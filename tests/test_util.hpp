// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>
#include <initializer_list>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::testing {

// Runs `f`, which must throw exactly E (not a subclass), with a message that
// starts with `prefix` and contains every word of `words` (a vector, so
// tables of cases can hold them).
template <class E, class F>
void expect_error(F&& f, const std::string& prefix, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "expected an exception starting with " << prefix << ", nothing was thrown";
  } catch (const E& e) {
    EXPECT_EQ(typeid(e), typeid(E)) << "thrown type is a subclass of the expected one: " << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "message does not start with '" << prefix << "': " << msg;
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type " << typeid(e).name() << ": " << e.what();
  }
}

// The same with the words written inline: expect_error<E>(f, "[op]", {"a", "b"}).
template <class E, class F>
void expect_error(F&& f, const std::string& prefix, std::initializer_list<std::string> words = {}) {
  expect_error<E>(std::forward<F>(f), prefix, std::vector<std::string>(words));
}

// Devices with the given ids.
inline std::vector<Device> ids(std::initializer_list<int> list) {
  std::vector<Device> out;
  for (int i : list) out.push_back(Device::from_id(i));
  return out;
}

/// `n` values drawn uniformly from [lo, hi) by mt19937 seeded with `seed`.
inline std::vector<double> uniform_doubles(std::int64_t n, unsigned seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& e : v) e = u(rng);
  return v;
}

// A random spec of rank `rank` over the mesh's axes: each axis shards a random
// dim or none, in random order; single axes sometimes written as a group
// (`mixed_forms`); trailing none entries sometimes omitted.
inline PartitionSpec random_spec(std::mt19937& rng, const Mesh& mesh, int rank, bool mixed_forms = true) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (mixed_forms && uni(0, 7) == 0) return P();
  std::vector<std::vector<std::string>> dim_axes(rank);
  std::vector<std::string> axes = mesh.axis_names();
  std::shuffle(axes.begin(), axes.end(), rng);
  for (const auto& a : axes) {
    int d = uni(-1, rank - 1);
    if (d >= 0) dim_axes[d].push_back(a);
  }
  int last = 0;
  for (int d = 0; d < rank; ++d)
    if (!dim_axes[d].empty()) last = d + 1;
  std::vector<PartitionSpec::Entry> entries;
  const int nentries = mixed_forms ? uni(last, rank) : rank;
  for (int d = 0; d < nentries; ++d) {
    if (dim_axes[d].empty())
      entries.emplace_back(none);
    else if (mixed_forms && dim_axes[d].size() == 1 && uni(0, 1))
      entries.emplace_back(dim_axes[d][0]);
    else
      entries.emplace_back(dim_axes[d]);
  }
  return PartitionSpec(entries);
}

}  // namespace tessera::testing

namespace tessera::testing {

// Meshes the SPMD property tests run on: 1-d and 2-d, 1 to 8 devices,
// including device orders that differ from ids.
inline std::vector<Mesh> test_meshes() {
  auto d = devices();
  auto first = [&](int n) { return std::vector<Device>(d.begin(), d.begin() + n); };
  return {
      Mesh(first(1), {1}, {"x"}),
      Mesh(first(2), {2}, {"x"}),
      Mesh(first(3), {3}, {"x"}),
      Mesh(first(4), {4}, {"x"}),
      Mesh(first(8), {8}, {"x"}),
      Mesh(first(4), {2, 2}, {"x", "y"}),
      Mesh(first(6), {2, 3}, {"x", "y"}),
      Mesh(first(8), {2, 4}, {"x", "y"}),
      Mesh({d[7], d[5], d[3], d[1]}, {4, 1}, {"x", "y"}),
  };
}

// Calls fn(sharding) for a spread of layouts of a rank-`rank` array on every
// test mesh: replicated, each dim over each axis, both axes on one dim, and
// (2-d meshes) one axis per dim in both orders.
template <class F>
void for_each_layout(int rank, F&& fn) {
  for (const Mesh& m : test_meshes()) {
    std::vector<PartitionSpec> specs{P()};
    const auto& names = m.axis_names();
    for (int d = 0; d < rank; ++d) {
      for (const auto& a : names) {
        std::vector<PartitionSpec::Entry> e(rank, none);
        e[d] = a;
        specs.emplace_back(e);
      }
      if (names.size() == 2) {
        std::vector<PartitionSpec::Entry> e(rank, none);
        e[d] = std::vector<std::string>{names[0], names[1]};
        specs.emplace_back(e);
      }
    }
    if (names.size() == 2 && rank >= 2) {
      specs.push_back(PartitionSpec({PartitionSpec::Entry(names[0]), PartitionSpec::Entry(names[1])}));
      specs.push_back(PartitionSpec({PartitionSpec::Entry(names[1]), PartitionSpec::Entry(names[0])}));
    }
    for (const auto& s : specs) fn(NamedSharding(m, s));
  }
}

// Runs fn on another thread; a hang aborts the binary instead of stalling
// the suite. Exceptions from fn are rethrown here.
template <class F>
void within(double limit_s, F fn) {
  std::packaged_task<void()> task(std::move(fn));
  auto done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::duration<double>(limit_s)) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: the call did not return within %g s\n", limit_s);
    std::abort();
  }
  t.join();
  done.get();
}

// The first n devices.
inline std::vector<Device> first_devices(int n) {
  auto d = devices();
  return std::vector<Device>(d.begin(), d.begin() + n);
}

// A random mesh of 1 to 3 axes named x, y, z over 1 to `max_devices` devices
// (the first ones in order, or a shuffled subset); axis sizes may be 1. Each
// axis is Explicit with probability `explicit_prob`, else Auto.
inline Mesh random_mesh(std::mt19937& rng, int max_devices, double explicit_prob = 0.0) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int n = uni(1, std::max(1, std::min(max_devices, device_count())));
  const int naxes = uni(1, 3);
  std::vector<int> shape(naxes, 1);
  int rest = n;
  for (int i = 0; i + 1 < naxes; ++i) {
    std::vector<int> divs;
    for (int d = 1; d <= rest; ++d)
      if (rest % d == 0) divs.push_back(d);
    shape[i] = divs[uni(0, static_cast<int>(divs.size()) - 1)];
    rest /= shape[i];
  }
  shape[naxes - 1] = rest;
  std::shuffle(shape.begin(), shape.end(), rng);
  std::vector<Device> devs = devices();
  if (uni(0, 1)) std::shuffle(devs.begin(), devs.end(), rng);
  devs.resize(n);
  const std::vector<std::string> all_names{"x", "y", "z"};
  std::vector<std::string> names(all_names.begin(), all_names.begin() + naxes);
  std::vector<AxisType> types;
  for (int i = 0; i < naxes; ++i)
    types.push_back(std::uniform_real_distribution<double>(0, 1)(rng) < explicit_prob ? AxisType::Explicit
                                                                                     : AxisType::Auto);
  return Mesh(devs, shape, names, types);
}

// A one-device mesh with the same axis names and types as `mesh` (every axis
// of size 1): any spec valid on `mesh` is valid here, and every array is whole.
inline Mesh one_device_like(const Mesh& mesh) {
  return Mesh({devices()[0]}, std::vector<int>(mesh.axis_names().size(), 1), mesh.axis_names(), mesh.axis_types());
}

// Number of elements of a shape.
inline std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto v : s) n *= v;
  return n;
}

// The elements of a box (global index slices) of a row-major host array.
template <class T>
std::vector<T> sub_block(const std::vector<T>& host, const Shape& shape, const std::vector<Slice>& box) {
  std::vector<T> out;
  const int r = static_cast<int>(shape.size());
  for (const auto& s : box)
    if (s.stop <= s.start) return out;
  std::vector<std::int64_t> idx(r);
  for (int d = 0; d < r; ++d) idx[d] = box[d].start;
  for (;;) {
    std::int64_t flat = 0;
    for (int d = 0; d < r; ++d) flat = flat * shape[d] + idx[d];
    out.push_back(host[static_cast<size_t>(flat)]);
    int d = r - 1;
    while (d >= 0 && ++idx[d] == box[d].stop) {
      idx[d] = box[d].start;
      --d;
    }
    if (d < 0) break;
  }
  return out;
}

// Host data 0, 1, 2, ... (mod 97, shifted) as T: small integers, exact in every dtype.
// For bool, pairs of true and false in turn (shifted by salt): both values, and
// not a strict alternation, which flipping an odd-length axis or shifting by an
// even count would leave unchanged.
template <class T>
std::vector<T> iota_data(std::int64_t n, int salt = 0) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, bool>)
      v[i] = (i + salt) / 2 % 2 == 1;
    else
      v[i] = static_cast<T>((i * 7 + salt) % 97 - 40);
  }
  return v;
}

// Bitwise equality of two arrays: shapes, dtypes, shardings, contents, and
// every device's block (replicas included).
inline void expect_same(const Array& a, const Array& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.sharding(), b.sharding()) << what << ": " << typeof(a) << " vs " << typeof(b);
  std::vector<unsigned char> ha(static_cast<size_t>(a.nbytes())), hb(static_cast<size_t>(b.nbytes()));
  a.copy_to_host(ha.data(), a.dtype());
  b.copy_to_host(hb.data(), b.dtype());
  EXPECT_TRUE(ha == hb) << what;
  auto sa = a.addressable_shards(), sb = b.addressable_shards();
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].index, sb[i].index) << what;
    std::vector<unsigned char> ba(static_cast<size_t>(sa[i].data.nbytes())), bb(static_cast<size_t>(sb[i].data.nbytes()));
    if (!ba.empty()) sa[i].data.copy_to_host(ba.data(), a.dtype());
    if (!bb.empty()) sb[i].data.copy_to_host(bb.data(), b.dtype());
    EXPECT_TRUE(ba == bb) << what << " block " << i;
  }
}

// The jitted j equals the plain f on `args` bitwise, and its program
// applies `prim`.
template <class J, class F, class... A>
void expect_jit_matches(J& j, const F& f, const std::string& prim, const std::string& what, const A&... args) {
  expect_same(j(args...), f(args...), what + " " + prim);
  const std::string text = j.lower(args...).as_text();
  EXPECT_NE(text.find("= " + prim), std::string::npos) << text;
}

}  // namespace tessera::testing
