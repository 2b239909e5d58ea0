#include <exception>
#include <iostream>

#include "collectives_tour.hpp"
#include "common/processes.hpp"

// Under mpirun every process runs this; process 0 prints. An error that
// escapes (one of a collective across processes, say) is reported by each
// process that meets it.
int main() try {
  return examples::collectives_tour(examples::on_process0(std::cout)) == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "collectives_tour: " << e.what() << "\n";
  return 1;
}
