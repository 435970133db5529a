#pragma once
// Muon (Jordan et al., 2024; modded-nanogpt; torch.optim.Muon since PyTorch 2.9): momentum, then the
// update of each weight matrix orthogonalised by a Newton-Schulz iteration, so every direction of
// the matrix moves by about the same amount. Meant for the hidden matrices of a network (attention
// and MLP projections); embeddings, the output head, norms and biases train better with AdamW, so
// Muon takes those as AdamW groups of its own (as modded-nanogpt's MuonWithAuxAdam): one optimizer,
// one schedule, one state file.
//
// A matrix W (A, B) with gradient G, the arithmetic of torch.optim.Muon:
//   buf = momentum buf + (1 - momentum) G
//   U   = nesterov ? (1 - momentum) G + momentum buf : buf
//   O   = newton_schulz(U)                       (approximately the U V^T of U's SVD)
//   W   = W (1 - lr wd) - lr sqrt(max(1, A / B)) O
// The products of the iteration follow the precision policy (NOTE [ Precision policy ]): bfloat16
// operands summed in float32 under bf16, as PyTorch runs them in bfloat16.
#include <array>
#include <string>
#include <vector>

#include <mvgpt/nn/module.h>
#include <mvgpt/nn/optim.h>

namespace mvgpt::nn {

struct MuonOptions {
  double lr = 0.02;  // the matrices' rate (lr() and set_lr(); the AdamW groups follow it in proportion)
  double momentum = 0.95;
  bool nesterov = true;
  double weight_decay = 0.0;  // decoupled, as AdamW's
  int ns_steps = 5;
  // The quintic iteration X <- a X + (b A + c A^2) X, A = X X^T: the same (a, b, c) at every step
  // (Jordan's, modded-nanogpt's first), or Polar Express's (Amsel et al. 2025): a minimax-optimal
  // (a, b, c) for each of 5 steps (the fifth repeats past them), fitted greedily, so the first k
  // are the best k-step iteration; they lift small singular values faster (a = 8.16 at the first
  // step), so fewer steps reach about 1.
  enum class Coefficients { jordan, polar_express };
  Coefficients coefficients = Coefficients::jordan;
  double ns_a = 3.4445, ns_b = -4.7750, ns_c = 2.0315;  // jordan's
  double eps = 1e-7;  // U is divided by max(|U|_F, eps) first (polar_express: by 1.02 |U|_F + eps, its safety margin)
  // The rate of the AdamW groups (embeddings, head, norms, biases) and its other settings.
  AdamWOptions adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0};
};

// The orthogonalisation: g (..., A, B) float, one matrix or a batch of them -> approximately U V^T
// for each g = U S V^T, its singular values pushed into about [0.7, 1.2] by ns_steps = 5 quintic
// iterations of either coefficients (not exactly 1: the coefficients trade exactness for speed, as
// in modded-nanogpt; fewer steps leave the smallest lower). Works on the shorter side (transposes
// when A > B).
Tensor newton_schulz(const Tensor& g, const MuonOptions& options = {});
// The same iteration on the Gram matrix (NOTE [ Newton-Schulz on the Gram matrix ] in muon.cpp):
// x (..., m, n) already normalised, m <= n -> the same result with fewer products when n > 1.5 m.
// newton_schulz takes it where use_gram_iteration says it is cheaper and products are in fp32.
Tensor newton_schulz_gram(const Tensor& x, const MuonOptions& options);
bool use_gram_iteration(int64_t m, int64_t n, int steps);
// The (a, b, c) of step k (0-based) under the options' coefficients.
std::array<double, 3> newton_schulz_step(const MuonOptions& options, int k);
// "jordan" / "polar_express", and back (std::invalid_argument naming the text and the choices).
std::string to_string(MuonOptions::Coefficients c);
MuonOptions::Coefficients muon_coefficients_from_string(const std::string& text);

class Muon : public Optimizer {
 public:
  // `matrices`: 2-d parameters updated by Muon; `others`: updated by AdamW (options.adamw), at a rate
  // that is options.adamw.lr when lr() is options.lr (both follow set_lr in proportion).
  Muon(std::vector<ParamGroup> matrices, std::vector<ParamGroup> others, const MuonOptions& options = {});
  const char* type_name() const override { return "Muon"; }
  void step() override;
  const MuonOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;
  const std::vector<std::string>& slots_of(size_t group) const override;

 private:
  MuonOptions options_;
  size_t n_matrix_groups_;
  std::vector<std::string> muon_slots_{"momentum_buffer"}, adamw_slots_{"exp_avg", "exp_avg_sq"};
};

// The usual split of a model's trainable parameters: the 2-d weights of its Linear layers go to Muon
// (with weight decay `weight_decay`), except the layers named in `keep_on_adamw` (the output head:
// "lm_head", "output"); every other parameter (embeddings, norms, biases, the head) goes to AdamW
// (2-d ones with weight decay, as weight_decay_groups splits them). Frozen parameters are left out.
struct MuonSplit {
  std::vector<ParamGroup> matrices, others;
};
MuonSplit muon_split(Module& model, double muon_weight_decay, double adamw_weight_decay,
                     const std::vector<std::string>& keep_on_adamw = {"lm_head", "output"});

}  // namespace mvgpt::nn
