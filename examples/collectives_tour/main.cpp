#include <iostream>

#include "collectives_tour.hpp"

int main() { return examples::collectives_tour(std::cout) == 0 ? 0 : 1; }
