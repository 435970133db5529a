// The smallest useful program against the installed mvgpt package: a matrix product on the CPU,
// through the one public op API (the umbrella header would do as well: <mvgpt/mvgpt.h>).
#include <cstdio>

#include <mvgpt/autograd/ops.h>

int main() {
  using namespace mvgpt;
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});  // (2, 3)
  Tensor b = transpose(a, 0, 1);                                       // (3, 2), a view
  Tensor c = matmul(a, b);                                             // (2, 2)
  std::vector<float> v = c.to_vector<float>();
  std::printf("consumer: a @ a^T = [[%g, %g], [%g, %g]]\n", v[0], v[1], v[2], v[3]);
  return (v[0] == 14 && v[1] == 32 && v[3] == 77) ? 0 : 1;
}
