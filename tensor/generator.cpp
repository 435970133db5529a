#include <mvgpt/tensor/generator.h>

#include <stdexcept>
#include <string>

namespace mvgpt {

void Generator::set_shard(uint64_t index, uint64_t count) {
  if (count < 1 || index >= count)
    throw std::invalid_argument("Generator::set_shard: shard " + std::to_string(index) + " of " + std::to_string(count) +
                                ", expected 0 <= index < count");
  shard_index = index;
  shard_count = count;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace mvgpt
