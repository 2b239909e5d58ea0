#include <iostream>

#include "finite_difference.hpp"

int main(int argc, char** argv) { return examples::finite_difference(std::cout, argc > 1 ? std::atol(argv[1]) : 2048); }
