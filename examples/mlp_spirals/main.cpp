// An MLP classifier from the framework's pieces: two interleaved spirals (a data set no straight
// line separates), a Sequential of Linear and ReLU layers, cross-entropy and AdamW. Trains on 800
// points and prints its accuracy on 400 it never saw.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/module.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/tensor/generator.h>

using namespace mvgpt;

struct Points {
  Tensor x;  // (N, 2) float32
  Tensor y;  // (N) int32, 0 or 1
};

// Points along two spirals, each 1.5 turns, with a little noise.
Points spirals(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> along(0.f, 1.f);
  std::normal_distribution<float> noise(0.f, 0.04f);
  std::vector<float> xs;
  std::vector<int32_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = int32_t(i % 2);
    const float t = along(rng);
    const float angle = 3.f * std::numbers::pi_v<float> * t + float(label) * std::numbers::pi_v<float>;
    xs.push_back(t * std::cos(angle) + noise(rng));
    xs.push_back(t * std::sin(angle) + noise(rng));
    ys.push_back(label);
  }
  return {Tensor::from_vector(xs, Shape{n, 2}), Tensor::from_vector(ys, Shape{n})};
}

double accuracy(const nn::Module& model, const Points& p) {
  NoGradGuard no_grad;
  const std::vector<int64_t> guess = argmax(model(p.x), 1).to_vector<int64_t>();
  const std::vector<int32_t> truth = p.y.to_vector<int32_t>();
  int64_t right = 0;
  for (size_t i = 0; i < guess.size(); ++i) right += guess[i] == truth[i];
  return double(right) / double(guess.size());
}

int main() {
  manual_seed(7);
  const Points train = spirals(800, 1), test = spirals(400, 2);
  nn::Init init{.std = 0.5};  // wider than GPT-2's 0.02: two inputs, not hundreds
  nn::Sequential model({std::make_shared<nn::Linear>(2, 64, true, init), std::make_shared<nn::Functional>(relu, "ReLU"),
                        std::make_shared<nn::Linear>(64, 64, true, init), std::make_shared<nn::Functional>(relu, "ReLU"),
                        std::make_shared<nn::Linear>(64, 2, true, init)});
  nn::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  double loss = 0;
  for (int step = 1; step <= 600; ++step) {
    Tensor l = cross_entropy(model(train.x), train.y);  // the whole training set as one batch
    backward(l);
    opt.step();
    opt.zero_grad();
    loss = l.item<double>();
    if (step % 200 == 0) std::printf("mlp_spirals: step %d, training loss %.4f\n", step, loss);
  }
  const double acc = accuracy(model, test);
  std::printf("mlp_spirals: %lld parameters, held-out accuracy %.1f%% on %lld points\n", (long long)model.num_parameters(),
              100 * acc, (long long)test.x.size(0));
  return acc > 0.9 ? 0 : 1;  // a straight line gets about half right
}
