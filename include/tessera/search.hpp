// (placeholder)
#pragma once
#include "tessera/array.hpp"
