// A build without MPI: one process. Launched as several processes (mpirun),
// the program would otherwise run as independent copies that each believe
// they are alone, so that is an error here.
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/communicator.hpp"
#include "comm/direct.hpp"
#include "comm/process.hpp"
#include "tessera/error.hpp"

namespace tessera::detail {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}
}  // namespace

ProcessLayout start_processes(int local_devices) {
  const int launched = std::max(env_int("OMPI_COMM_WORLD_SIZE"), std::max(env_int("PMI_SIZE"), env_int("MPI_LOCALNRANKS")));
  if (launched > 1)
    throw DeviceError("[distributed::initialize] launched as " + std::to_string(launched) +
                      " processes, but this Tessera was built without MPI; install libopenmpi-dev "
                      "(scripts/install-deps.sh) and rebuild, or run one process");
  ProcessLayout one;
  one.first_device = {0, local_devices};
  return one;
}

void stop_processes() {}

int processes_on_this_host() { return 1; }

const char* process_backend() { return "none"; }

Communicator& cross_process_communicator() {
  throw DeviceError("[distributed] internal: a mesh spans processes in a build without MPI");
}

void exchange_across_processes(const std::vector<Transfer>&, const std::vector<Transfer>&, const std::vector<int>&,
                               int, const std::string& op, double, const std::function<std::string()>&) {
  throw CollectiveError("[" + op + "] internal: a transfer to another process in a build without MPI");
}

std::vector<std::vector<unsigned char>> allgather_processes(const void* data, std::size_t nbytes, const char*) {
  const auto* b = static_cast<const unsigned char*>(data);
  return {std::vector<unsigned char>(b, b + nbytes)};
}

}  // namespace tessera::detail
