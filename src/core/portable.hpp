// Moved to src/kernels/ (the math both backends compile); this name stays
// for code written against the old path.
#pragma once

#include "kernels/portable.hpp"
