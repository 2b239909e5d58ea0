#include <exception>
#include <iostream>

#include "common/processes.hpp"
#include "mlp_layer.hpp"

// Under mpirun every process runs this; process 0 prints. An error that
// escapes (one of a collective across processes, say) is reported by each
// process that meets it.
int main() try {
  return examples::mlp_layer(examples::on_process0(std::cout));
} catch (const std::exception& e) {
  std::cerr << "mlp_layer: " << e.what() << "\n";
  return 1;
}
