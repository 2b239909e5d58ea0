#include <cstdlib>
#include <exception>
#include <iostream>

#include "common/processes.hpp"
#include "finite_difference.hpp"

// Under mpirun every process runs this; process 0 prints. An error that
// escapes (one of a collective across processes, say) is reported by each
// process that meets it.
int main(int argc, char** argv) try {
  return examples::finite_difference(examples::on_process0(std::cout), argc > 1 ? std::atol(argv[1]) : 2048);
} catch (const std::exception& e) {
  std::cerr << "finite_difference: " << e.what() << "\n";
  return 1;
}
