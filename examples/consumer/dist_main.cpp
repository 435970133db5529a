// mvgpt::dist from the installed package: a world of one without mpirun, the mean of a gradient
// over the ranks under it (`mpirun -np 2 consumer_dist`).
#include <cstdio>

#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>

int main() {
  using namespace mvgpt;
  dist::init();
  Tensor w = Tensor::from_vector<float>({1, 2, 3});
  w.requires_grad_();
  w.set_grad(Tensor::from_vector<float>({float(dist::rank()), 1, 2}));
  dist::average_gradients({w});
  std::printf("consumer_dist: rank %d of %d over %s; mean gradient [%g, %g, %g]\n", dist::rank(), dist::size(),
              dist::transport().c_str(), read_element(w.grad(), 0), read_element(w.grad(), 1),
              read_element(w.grad(), 2));
  return dist::finalize(0);
}
