#include <cstdlib>
#include <exception>
#include <iostream>

#include "chunked_jacobian.hpp"
#include "common/processes.hpp"

// Under mpirun every process runs this; process 0 prints. An error that
// escapes (one of a collective across processes, say) is reported by each
// process that meets it.
int main(int argc, char** argv) try {
  return examples::chunked_jacobian(examples::on_process0(std::cout), argc > 1 ? std::atol(argv[1]) : 4099,
                                    argc > 2 ? std::atoi(argv[2]) : 24);
} catch (const std::exception& e) {
  std::cerr << "chunked_jacobian: " << e.what() << "\n";
  return 1;
}
