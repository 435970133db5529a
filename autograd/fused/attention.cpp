// Attention: checks and dispatch, the slow reference, the backward, and the cases that test them
// (NOTE [ A fused op is one unit ] in unit.h). Kernels: attention_cpu.cpp, attention.cu.
#include <mvgpt/fused/attention.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <mvgpt/autograd/engine.h>   // backward: the bf16 device case
#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/autograd/precision.h>
#include <mvgpt/fused/rope.h>  // rotary_attention's composition and table
#include <mvgpt/fused/unit.h>

namespace mvgpt {
namespace fused {
namespace {

const AttentionKernels& kernels(Device d) {
  static const KernelsByDevice<AttentionKernels> table{"attention", attention_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(attention)};
  return table.on(d);
}

struct AttentionShapes {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool kv_bf16;  // bfloat16 k and v with a float32 q (a bf16 KV cache)
};

AttentionShapes check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                bool causal) {
  for (auto [t, what] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    require_floating(*t, op, what);
    if (t->dim() != 4) fail(op, std::string(what) + " must be (B, heads, T, D), found shape " + to_string(t->shape()));
    require_device(*t, q, op, what);
  }
  // k and v in q's dtype, or both bfloat16 with a float32 q (a bf16 KV cache).
  const bool kv_bf16 = q.dtype() == DType::f32 && k.dtype() == DType::bf16 && v.dtype() == DType::bf16;
  for (auto [t, what] : {std::pair{&k, "k"}, {&v, "v"}})
    if (t->dtype() != q.dtype() && !kv_bf16)
      fail(op, std::string(what) + " is " + std::string(dtype_name(t->dtype())) + " but q is " +
                   std::string(dtype_name(q.dtype())) + " (k and v take q's dtype, or both bfloat16 with a float32 q)");
  AttentionShapes s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), kv_bf16};
  if (k.size(0) != s.B || k.size(3) != s.D)
    fail(op, "k must be [" + std::to_string(s.B) + ", Hkv, Tk, " + std::to_string(s.D) + "] to match q " +
                 to_string(q.shape()) + ", found " + to_string(k.shape()));
  require_shape(v, k.shape(), op, "v (same shape as k)");
  if (s.Hkv == 0 ? s.H != 0 : s.H % s.Hkv != 0)
    fail(op, "q has " + std::to_string(s.H) + " heads, not a multiple of the " + std::to_string(s.Hkv) +
                 " kv heads of k and v");
  if (causal && s.Tq > s.Tk)
    fail(op, "causal attention needs at least as many keys as queries (queries sit at the last Tq key "
             "positions), found Tq " + std::to_string(s.Tq) + " > Tk " + std::to_string(s.Tk));
  if (!std::isfinite(scale)) fail(op, "scale must be finite, found " + std::to_string(scale));
  return s;
}

std::atomic<CudaAttentionRoute> g_cuda_route{CudaAttentionRoute::automatic};
std::atomic<int64_t> g_cuda_score_budget{0};

}  // namespace

void set_cuda_attention_route(CudaAttentionRoute route) { g_cuda_route.store(route, std::memory_order_relaxed); }
CudaAttentionRoute cuda_attention_route() { return g_cuda_route.load(std::memory_order_relaxed); }
void set_cuda_attention_score_budget(int64_t bytes) { g_cuda_score_budget.store(bytes, std::memory_order_relaxed); }
int64_t cuda_attention_score_budget() { return g_cuda_score_budget.load(std::memory_order_relaxed); }

AttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                                  bool bf16_products) {
  const char* op = "attention";
  const AttentionShapes s = check_attention(op, q, k, v, scale, causal);
  const DType cd = compute_dtype(q.dtype());
  Tensor out = Tensor::empty(q.shape(), cd, q.device());
  Tensor lse = Tensor::empty({s.B, s.H, s.Tq}, cd, q.device());
  // Decoding from a bf16 KV cache on the CPU: the kernel reads k and v in place; elsewhere they are
  // widened to q's dtype first.
  const DType kvd = s.kv_bf16 && q.device().is_cpu() && s.Tq == 1 ? DType::bf16 : cd;
  {
    const profile::Span span("attention");
    kernels(q.device())
        .forward(prepared_heads(q, cd), prepared_heads(k, kvd), prepared_heads(v, kvd), scale, causal,
                 bf16_products && cd == DType::f32, out, lse);
  }
  return {cast_back(out, q.dtype()), lse};
}

std::vector<Tensor> attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionResult& saved, double scale, bool causal,
                                       bool bf16_products) {
  const char* op = "attention_backward";
  const AttentionShapes s = check_attention(op, q, k, v, scale, causal);
  check_grad_like(op, dout, q, "dout");
  check_grad_like(op, saved.out, q, "saved out");
  require_defined(saved.lse, op, "saved lse");
  require_device(saved.lse, q, op, "saved lse");
  require_shape(saved.lse, Shape{s.B, s.H, s.Tq}, op, "saved lse");
  const DType cd = compute_dtype(q.dtype());
  if (saved.lse.dtype() != cd)
    fail(op, "saved lse must be " + std::string(dtype_name(cd)) + ", found " + std::string(dtype_name(saved.lse.dtype())));
  Tensor dq = Tensor::empty(q.shape(), cd, q.device());
  Tensor dk = Tensor::empty(k.shape(), cd, q.device());
  Tensor dv = Tensor::empty(v.shape(), cd, q.device());
  {
    const profile::Span span("attention backward");
    kernels(q.device())
        .backward(prepared_heads(dout, cd), prepared_heads(q, cd), prepared_heads(k, cd),
                            prepared_heads(v, cd), prepared_heads(saved.out, cd), ops::contiguous(saved.lse), scale, causal,
                            bf16_products && cd == DType::f32, dq, dk, dv);
  }
  return {cast_back(dq, q.dtype()), cast_back(dk, k.dtype()), cast_back(dv, v.dtype())};
}

// ---------------------------------------------------------------- the slow reference

namespace reference {

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                          bool bf16_products) {
  // A product's operand as the kernels multiply it.
  auto operand = [bf16_products](const Tensor& t) {
    return bf16_products ? ops::to(ops::to(t, DType::bf16), t.dtype()) : t;
  };
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  // bfloat16 k and v with a float32 q (a bf16 KV cache): their widened values.
  const Tensor kq = cast_back(k, q.dtype()), vq = cast_back(v, q.dtype());
  // Grouped kv heads: repeat each kv head for its H / Hkv query heads.
  auto repeat_heads = [&](const Tensor& t) {
    Tensor e = ops::expand(ops::unsqueeze(t, 2), {B, Hkv, H / Hkv, Tk, D});
    return ops::reshape(e, {B, H, Tk, D});
  };
  Tensor kr = repeat_heads(kq), vr = repeat_heads(vq);
  Tensor scores = ops::mul(ops::matmul(operand(q), ops::transpose(operand(kr), -1, -2)), scale);  // (B, H, Tq, Tk)
  if (causal) {
    // Query i sits at key position (Tk - Tq) + i and must not see later keys.
    Tensor query_pos = ops::reshape(ops::arange(double(Tk - Tq), double(Tk), 1, DType::i64), {Tq, 1});
    Tensor key_pos = ops::reshape(ops::arange(0, double(Tk), 1, DType::i64), {1, Tk});
    scores = ops::masked_fill(scores, ops::gt(key_pos, query_pos), -std::numeric_limits<double>::infinity());
  }
  Tensor lse = ops::logsumexp(scores, {-1});
  Tensor out = ops::matmul(operand(ops::softmax(scores, -1)), operand(vr));
  return {out, lse};
}

}  // namespace reference
}  // namespace fused

// ---------------------------------------------------------------- the differentiable op

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  const autograd::InternalOps internal;
  // The policy of linear and matmul (precision.h); a bf16 KV cache multiplies as its widened values would.
  const bool bf16 = autograd::detail::bf16_products(q, k.dtype() == DType::bf16 ? q : k);
  fused::AttentionResult r = fused::attention_forward(q, k, v, scale, causal, bf16);
  if (!needs_grad(q, k, v)) return r.out;
  Tensor out = r.out;
  return record("attention", std::move(r.out), {edge_to(q), edge_to(k), edge_to(v)},
                [sq = SavedTensor(q), sk = SavedTensor(k), sv = SavedTensor(v), so = SavedTensor(out),
                 sl = SavedTensor(r.lse), scale, causal, bf16](const Tensor& g) -> Grads {
                  const char* op = "attention";
                  fused::AttentionResult saved{so.unpack(op), sl.unpack(op)};
                  return fused::attention_backward(g, sq.unpack(op), sk.unpack(op), sv.unpack(op), saved, scale, causal,
                                                   bf16);
                });
}

namespace {

// The rotary kernels' case: float32 q, k, v of one length T, T shared positions, on a device that
// has the kernels.
bool rotary_kernel_case(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, double base,
                        double position_scale) {
  return q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.dtype() == DType::f32 && k.dtype() == DType::f32 &&
         v.dtype() == DType::f32 && q.size(2) == k.size(2) && q.size(3) > 0 && q.size(3) % 2 == 0 &&
         positions.dim() == 1 && positions.size(0) == q.size(2) && positions.device() == q.device() &&
         (positions.dtype() == DType::i32 || positions.dtype() == DType::i64) && base > 0 && position_scale > 0 &&
         std::isfinite(position_scale) && fused::kernels(q.device()).forward_rotary != nullptr;
}

// The rotary kernels' forward and, for the backward, the tables it rotates by.
struct RotaryForward {
  Tensor out, lse;                                        // (B, H, T, D), (B, H, T)
  std::shared_ptr<const fused::RopeTable> table, inverse;  // inverse: only when a gradient is wanted
  bool bf16 = false;                                       // bf16 products (the policy of linear and matmul)
  // For a gradient under bf16 products with as many kv heads as heads: q, k and v as the kernels
  // rounded them (bfloat16, q and k rotated), for the backward in place of the float32 ones; and,
  // where they are no larger than twice those, the probabilities (NOTE [ Kept probabilities ] in
  // attention_cpu.cpp).
  std::vector<Tensor> kept;
};
// token_major: out is the (B, H, T, D) view of a (B, T, H, D) tensor, so that the model's transpose
// back to (B, T, H D) for the output projection is a view, not a copy (rotary_attention_packed).
RotaryForward rotary_forward(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                             double base, RopeLayout layout, double position_scale, double scale, bool causal,
                             bool grad, bool token_major = false) {
  const fused::AttentionShapes s = fused::check_attention(op, q, k, v, scale, causal);
  const Tensor pos = ops::contiguous(positions);
  RotaryForward r;
  r.bf16 = autograd::detail::bf16_products(q, k);
  r.table = std::make_shared<const fused::RopeTable>(fused::rope_table(pos, s.D, base, false, position_scale));
  r.out = token_major ? ops::transpose(Tensor::empty({s.B, s.Tq, s.H, s.D}, DType::f32, q.device()), 1, 2)
                      : Tensor::empty(q.shape(), DType::f32, q.device());
  r.lse = Tensor::empty({s.B, s.H, s.Tq}, DType::f32, q.device());
  if (grad && r.bf16 && s.H == s.Hkv) {
    for (const Tensor* t : {&q, &k, &v}) r.kept.push_back(Tensor::empty(t->shape(), DType::bf16, q.device()));
    if (s.Tk <= 6 * s.D) r.kept.push_back(Tensor::empty({s.B, s.H, s.Tq, s.Tk}, DType::bf16, q.device()));
  }
  {
    const profile::Span span("attention");
    fused::kernels(q.device())
        .forward_rotary(fused::prepared_heads(q, DType::f32), fused::prepared_heads(k, DType::f32),
                        fused::prepared_heads(v, DType::f32), scale, causal, r.bf16, *r.table, layout, r.out,
                        r.lse, r.kept.empty() ? nullptr : &r.kept);
  }
  if (grad) r.inverse = std::make_shared<const fused::RopeTable>(fused::inverse_rope_table(*r.table));
  return r;
}

void rotary_backward(const char* op, const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& out, const Tensor& lse, bool bf16, const fused::RopeTable& table,
                     const fused::RopeTable& inverse, RopeLayout layout, double scale, bool causal, const Tensor& dq,
                     const Tensor& dk, const Tensor& dv, const Tensor* probabilities) {
  fused::check_grad_like(op, g, q, "grad");
  const profile::Span span("attention backward");
  // q, k and v: the float32 inputs, or the forward's kept bf16 operands, which go as they are.
  auto operand = [](const Tensor& t) { return t.dtype() == DType::bf16 ? t : fused::prepared_heads(t, DType::f32); };
  fused::kernels(q.device())
      .backward_rotary(fused::prepared_heads(g, DType::f32), operand(q), operand(k), operand(v),
                       fused::prepared_heads(out, DType::f32), ops::contiguous(lse), scale, causal, bf16, table,
                       inverse, layout, dq, dk, dv, probabilities);
}

// q, k and v (B, heads, T, D) as views of the packed qkv (B, T, H + 2 Hkv, D).
std::vector<Tensor> packed_views(const Tensor& qkv, int64_t H, int64_t Hkv) {
  return {ops::transpose(ops::narrow(qkv, 2, 0, H), 1, 2), ops::transpose(ops::narrow(qkv, 2, H, Hkv), 1, 2),
          ops::transpose(ops::narrow(qkv, 2, H + Hkv, Hkv), 1, 2)};
}

}  // namespace

Tensor rotary_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, double base,
                        RopeLayout layout, double position_scale, double scale, bool causal) {
  const char* op = "rotary_attention";
  if (!rotary_kernel_case(q, k, v, positions, base, position_scale))
    return attention(rope(q, positions, base, layout, position_scale), rope(k, positions, base, layout, position_scale),
                     v, scale, causal);
  const autograd::InternalOps internal;
  const bool grad = needs_grad(q, k, v);
  RotaryForward f = rotary_forward(op, q, k, v, positions, base, layout, position_scale, scale, causal, grad);
  if (!grad) return f.out;
  Tensor saved_out = f.out;
  const bool kept = !f.kept.empty();
  std::vector<SavedTensor> probabilities;  // the kept probabilities, where there are
  if (f.kept.size() > 3) probabilities.emplace_back(f.kept[3]);
  return record(op, std::move(f.out), {edge_to(q), edge_to(k), edge_to(v)},
                [sq = SavedTensor(kept ? f.kept[0] : q), sk = SavedTensor(kept ? f.kept[1] : k),
                 sv = SavedTensor(kept ? f.kept[2] : v), sp = std::move(probabilities), so = SavedTensor(saved_out),
                 sl = SavedTensor(f.lse), table = f.table, inverse = f.inverse, bf16 = f.bf16, layout, scale,
                 causal](const Tensor& g) -> Grads {
                  const char* op = "rotary_attention";
                  const Tensor q = sq.unpack(op), k = sk.unpack(op), v = sv.unpack(op);
                  const Tensor p = sp.empty() ? Tensor() : sp[0].unpack(op);
                  Tensor dq = Tensor::empty(q.shape(), DType::f32, q.device());
                  Tensor dk = Tensor::empty(k.shape(), DType::f32, q.device());
                  Tensor dv = Tensor::empty(v.shape(), DType::f32, q.device());
                  rotary_backward(op, g, q, k, v, so.unpack(op), sl.unpack(op), bf16, *table, *inverse, layout, scale,
                                  causal, dq, dk, dv, sp.empty() ? nullptr : &p);
                  return {dq, dk, dv};
                });
}

Tensor rotary_attention_packed(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, const Tensor& positions,
                               double base, RopeLayout layout, double position_scale, double scale, bool causal) {
  const char* op = "rotary_attention_packed";
  if (qkv.dim() != 4 || n_head <= 0 || n_kv_head <= 0 || qkv.size(2) != n_head + 2 * n_kv_head)
    throw std::invalid_argument(std::string(op) + ": expected qkv (B, T, H + 2 Hkv, D) with H = " +
                                std::to_string(n_head) + " and Hkv = " + std::to_string(n_kv_head) +
                                " both positive, found qkv " + to_string(qkv.shape()));
  std::vector<Tensor> raw;
  {
    const autograd::InternalOps internal;  // raw views; the composition below records its own
    raw = packed_views(qkv, n_head, n_kv_head);
  }
  if (!rotary_kernel_case(raw[0], raw[1], raw[2], positions, base, position_scale)) {
    // The composition: differentiable views, whose gradients the engine writes into qkv's blocks.
    std::vector<Tensor> parts = split(qkv, {n_head, n_kv_head, n_kv_head}, 2);
    return rotary_attention(transpose(parts[0], 1, 2), transpose(parts[1], 1, 2), transpose(parts[2], 1, 2), positions,
                            base, layout, position_scale, scale, causal);
  }
  const autograd::InternalOps internal;
  const bool grad = needs_grad(qkv);
  RotaryForward f = rotary_forward(op, raw[0], raw[1], raw[2], positions, base, layout, position_scale, scale, causal,
                                   grad, /*token_major=*/true);
  if (!grad) return f.out;
  Tensor saved_out = f.out;
  // The kept bf16 operands where the forward made them (then the float32 projection is not kept).
  std::vector<SavedTensor> inputs;
  if (f.kept.empty()) inputs.emplace_back(qkv);
  for (const Tensor& t : f.kept) inputs.emplace_back(t);
  return record(op, std::move(f.out), {edge_to(qkv)},
                [inputs = std::move(inputs), shape = qkv.shape(), so = SavedTensor(saved_out), sl = SavedTensor(f.lse),
                 table = f.table, inverse = f.inverse, bf16 = f.bf16, layout, scale, causal, n_head,
                 n_kv_head](const Tensor& g) -> Grads {
                  const char* op = "rotary_attention_packed";
                  std::vector<Tensor> in;
                  for (const SavedTensor& t : inputs) in.push_back(t.unpack(op));
                  if (in.size() == 1) in = packed_views(in[0], n_head, n_kv_head);
                  // The kernels write dq, dk and dv into their blocks of qkv's gradient.
                  Tensor dqkv = Tensor::empty(shape, DType::f32, in[0].device());
                  const std::vector<Tensor> d = packed_views(dqkv, n_head, n_kv_head);
                  rotary_backward(op, g, in[0], in[1], in[2], so.unpack(op), sl.unpack(op), bf16, *table, *inverse,
                                  layout, scale, causal, d[0], d[1], d[2], in.size() > 3 ? &in[3] : nullptr);
                  return {dqkv};
                });
}

// ---------------------------------------------------------------- the unit's cases

namespace fused {
namespace {

void add_gradchecks(autograd::OpRegistry& r) {
  using autograd::Inputs;
  namespace gc = autograd::gc;
  r.add("attention", {{"causal, grouped heads", {gc::input({1, 2, 3, 4}), gc::input({1, 1, 3, 4}), gc::input({1, 1, 3, 4})},
                       [](const Inputs& x) { return mvgpt::attention(x[0], x[1], x[2], 0.5, true); }},
                      {"not causal, fewer queries than keys", {gc::input({2, 1, 2, 3}), gc::input({2, 1, 4, 3}), gc::input({2, 1, 4, 3})},
                       [](const Inputs& x) { return mvgpt::attention(x[0], x[1], x[2], 0.7, false); }},
                      {"causal, fewer queries, transposed v", {gc::input({1, 1, 2, 2}), gc::input({1, 1, 3, 2}),
                                                                gc::transposed({1, 1, 3, 2})},
                       [](const Inputs& x) { return mvgpt::attention(x[0], x[1], x[2], 1.0, true); }}});
  // In float64 the composition (the kernels' case is bf16 products); its cases are in attention_test.cpp.
  r.add("rotary_attention",
        {{"causal, grouped heads, interleaved",
          {gc::input({1, 2, 3, 4}), gc::input({1, 1, 3, 4}), gc::input({1, 1, 3, 4})}, [](const Inputs& x) {
            const Tensor positions = Tensor::from_vector(std::vector<int64_t>{2, 3, 4}, Shape{3});
            return mvgpt::rotary_attention(x[0], x[1], x[2], positions, 100, RopeLayout::interleaved, 0.5, 0.5, true);
          }}});
  r.add("rotary_attention_packed",
        {{"causal, grouped heads", {gc::input({1, 3, 4, 4})}, [](const Inputs& x) {
            const Tensor positions = Tensor::from_vector(std::vector<int64_t>{0, 1, 2}, Shape{3});
            return mvgpt::rotary_attention_packed(x[0], 2, 1, positions, 100, RopeLayout::split_half, 1.0, 0.5, true);
          }}});
}

std::vector<DeviceCase> device_cases() {
  std::vector<DeviceCase> cases;
  cases.push_back({"attention", [](Device d) {
    std::vector<Tensor> r;
    struct Shape4 {
      int64_t B, H, Hkv, Tq, Tk, D;
      bool causal;
    };
    const Shape4 shapes[] = {{2, 2, 2, 5, 5, 8, true},   {1, 4, 2, 3, 7, 6, true},  {2, 2, 1, 4, 6, 5, false},
                             {1, 2, 2, 150, 150, 4, true}, {1, 1, 1, 1, 300, 16, true}, {1, 2, 2, 2, 0, 4, false}};
    for (DType dt : {DType::f32, DType::f64})
      for (const Shape4& s : shapes) {
        Tensor q = uniform_on(d, {s.B, s.H, s.Tq, s.D}, dt, 72);
        // k and v as strided views split out of one packed (B, Tk, 2, Hkv, D) tensor.
        Tensor kv = uniform_on(d, {s.B, s.Tk, 2, s.Hkv, s.D}, dt, 73);
        Tensor k = ops::permute(ops::select(kv, 2, 0), {0, 2, 1, 3});
        Tensor v = ops::permute(ops::select(kv, 2, 1), {0, 2, 1, 3});
        const double scale = 1 / std::sqrt(double(s.D));
        AttentionResult a = attention_forward(q, k, v, scale, s.causal);
        r.insert(r.end(), {a.out, a.lse});
        Tensor dout = uniform_on(d, {s.B, s.H, s.Tq, s.D}, dt, 74);
        for (const Tensor& g : attention_backward(dout, q, k, v, a, scale, s.causal)) r.push_back(g);
      }
    return r;
  }, {"forward", "backward"}, 5e-5});
  // GPT-2 small's head size at a full context: on CUDA the batched route (16 queries or more; the
  // per-row kernels' multi-tile paths are held against it in tests/fused/attention_test.cpp).
  cases.push_back({"attention_head64_long", [](Device d) {
    std::vector<Tensor> r;
    for (const auto& [T, causal] : std::vector<std::pair<int64_t, bool>>{{512, true}, {640, true}, {520, false}}) {
      Tensor q = uniform_on(d, {1, 2, T, 64}, DType::f32, 93, -1, 1);
      Tensor k = uniform_on(d, {1, 2, T, 64}, DType::f32, 94, -1, 1);
      Tensor v = uniform_on(d, {1, 2, T, 64}, DType::f32, 95);
      const double scale = 0.125;
      AttentionResult a = attention_forward(q, k, v, scale, causal);
      r.insert(r.end(), {a.out, a.lse});
      for (const Tensor& g : attention_backward(uniform_on(d, {1, 2, T, 64}, DType::f32, 96), q, k, v, a, scale, causal))
        r.push_back(g);
    }
    return r;
  }, {"forward", "backward"}, 1e-4});
  // Under bf16 products: the CPU's rotary kernels, and where a device has none, rope then attention.
  // The bf16 roundings of two routes may differ by a bfloat16 ulp, hence the tolerance.
  cases.push_back({"rotary_attention_bf16", [](Device d) {
    const autograd::PrecisionGuard bf16(autograd::Precision::bf16);
    Tensor q = uniform_on(d, {2, 4, 70, 16}, DType::f32, 97, -1, 1);
    Tensor k = uniform_on(d, {2, 2, 70, 16}, DType::f32, 98, -1, 1);
    Tensor v = uniform_on(d, {2, 2, 70, 16}, DType::f32, 99);
    Tensor pos = arange(3, 73, 1, DType::i64, d);
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_(true);
    Tensor y = rotary_attention(q, k, v, pos, 10000, RopeLayout::split_half, 1.0, 0.25, true);
    backward(sum(mul(y, uniform_on(d, {2, 4, 70, 16}, DType::f32, 100))));
    return std::vector<Tensor>{y.detach(), q.grad(), k.grad(), v.grad()};
  }, {"forward_rotary", "backward_rotary"}, 2e-2});
  // The same heads packed in one qkv: the CPU's kernels write the gradient's blocks in place. Under
  // bf16 products and in float32 (the CPU's kernels with float32 products; a device without them,
  // rope then attention).
  for (const bool bf16 : {true, false})
    cases.push_back({bf16 ? "rotary_attention_packed_bf16" : "rotary_attention_packed", [bf16](Device d) {
      const autograd::PrecisionGuard precision(bf16 ? autograd::Precision::bf16 : autograd::Precision::fp32);
      Tensor qkv = uniform_on(d, {2, 70, 8, 16}, DType::f32, 101, -1, 1);
      Tensor pos = arange(3, 73, 1, DType::i64, d);
      qkv.requires_grad_(true);
      Tensor y = rotary_attention_packed(qkv, 4, 2, pos, 10000, RopeLayout::split_half, 1.0, 0.25, true);
      backward(sum(mul(y, uniform_on(d, {2, 4, 70, 16}, DType::f32, 102))));
      return std::vector<Tensor>{y.detach(), qkv.grad()};
    }, {"forward_rotary", "backward_rotary"}, bf16 ? 2e-2 : 1e-4});
  return cases;
}

}  // namespace

Unit attention_unit() {
  return {"attention", {"forward", "backward", "forward_rotary", "backward_rotary"}, add_gradchecks, device_cases};
}

}  // namespace fused
}  // namespace mvgpt
