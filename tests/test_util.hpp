// Helpers shared by the tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "tessera/tessera.hpp"

namespace tessera::testing {

// Runs `f`, which must throw exactly E (not a subclass), with a message that
// starts with `prefix` and contains every word of `words`.
template <class E, class F>
void expect_error(F&& f, const std::string& prefix, std::initializer_list<std::string> words = {}) {
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

// Devices with the given ids.
inline std::vector<Device> ids(std::initializer_list<int> list) {
  std::vector<Device> out;
  for (int i : list) out.push_back(Device::from_id(i));
  return out;
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
