#include "spmd/program.hpp"

#include <exception>
#include <mutex>

#include "comm/communicator.hpp"
#include "core/validate.hpp"
#include "tessera/device.hpp"

namespace tessera::detail {

namespace {
std::mutex g_dispatch_mu;
}  // namespace

void run_spmd(const Mesh& mesh, const std::function<void(int, Session&)>& fn) {
  const int n = mesh.size();
  auto session = communicator_for(mesh).open_session(mesh, config::collective_timeout());
  std::vector<std::exception_ptr> errors(n);
  std::vector<char> echo(n, 0);  // the error only reports another member's failure (char: written concurrently)
  auto task = [&](int pos) {
    const int dev = mesh.devices()[pos].id();
    try {
      fn(pos, *session);
    } catch (const PeerFailed&) {
      errors[pos] = std::current_exception();
      echo[pos] = 1;
    } catch (const std::exception& e) {
      errors[pos] = std::current_exception();
      session->abort(dev, e.what());
    } catch (...) {
      errors[pos] = std::current_exception();
      session->abort(dev, "an exception that is not a std::exception");
    }
  };
  if (n == 1 && current_device() == mesh.devices()[0].id()) {
    task(0);
  } else {
    std::lock_guard<std::mutex> lock(g_dispatch_mu);
    run_on_devices(mesh.devices(), task);
  }
  for (int pos = 0; pos < n; ++pos)
    if (errors[pos] && !echo[pos]) std::rethrow_exception(errors[pos]);
  for (int pos = 0; pos < n; ++pos)
    if (errors[pos]) std::rethrow_exception(errors[pos]);
}

}  // namespace tessera::detail
