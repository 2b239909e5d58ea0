#include <cstdlib>
#include <iostream>

#include "chunked_jacobian.hpp"

int main(int argc, char** argv) {
  return examples::chunked_jacobian(std::cout, argc > 1 ? std::atol(argv[1]) : 4099, argc > 2 ? std::atoi(argv[2]) : 24);
}
