#include "tensor/generator.h"

namespace mvgpt {

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace mvgpt
