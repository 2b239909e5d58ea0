#include <iostream>

#include "mlp_layer.hpp"

int main() { return examples::mlp_layer(std::cout); }
