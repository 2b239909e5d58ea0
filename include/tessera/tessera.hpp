// Tessera: SPMD computation on sharded arrays. Umbrella header.
#pragma once

#include "tessera/array.hpp"
#include "tessera/device.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/explain.hpp"
#include "tessera/jit.hpp"
#include "tessera/mesh.hpp"
#include "tessera/observe.hpp"
#include "tessera/ops.hpp"
#include "tessera/shard_map.hpp"
#include "tessera/tree.hpp"
#include "tessera/sharding.hpp"
#include "tessera/version.hpp"
#include "tessera/autodiff.hpp"
#include "tessera/vmap.hpp"
