// The quick-look pictures in a build without PLplot (TESSERA_IFU_PLOTS=OFF,
// e.g. on a GPU machine that lacks PLplot's cairo stack): every picture is
// refused, and the caller is told how to run without them.
#include "ifu/plots.hpp"

namespace tessera::ifu {
namespace {

[[noreturn]] void no_plplot() { throw InputError("[ifu plots] this build has no PLplot; run with --no-plots"); }

}  // namespace

std::vector<std::string> write_quicklooks(const std::string&, const std::string&, const QuicklookInput&) {
  no_plplot();
}

void write_loss_curve(const std::string&, const std::vector<double>&, const std::string&) { no_plplot(); }

void write_residual_map(const std::string&, const QuicklookInput&, const std::vector<float>&) { no_plplot(); }

}  // namespace tessera::ifu
