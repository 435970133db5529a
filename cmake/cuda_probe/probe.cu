// C++20 in device code (a concept, a designated initializer), as the backend's kernels use it.
#include <concepts>
#include <cstdint>

template <typename T>
  requires std::floating_point<T>
__global__ void scale(T* x, int64_t n, T a) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], a);
}

struct Launch {
  int blocks = 1, threads = 32;
};

void launch(float* x, int64_t n) {
  const Launch l{.blocks = 2, .threads = 64};
  scale<<<l.blocks, l.threads>>>(x, n, 2.0f);
}
