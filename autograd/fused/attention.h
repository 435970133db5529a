#pragma once
// Scaled dot-product attention with grouped kv heads and a causal offset, as one fused unit (NOTE [ A
// fused op is one unit ] in unit.h): only the log-sum-exp is saved, and the backward recomputes the
// probabilities from it. The CPU kernels and the CUDA per-row kernels never hold the (Tq, Tk) scores;
// the CUDA batched route holds them a slice at a time (NOTE [ Attention through batched products ]).
// The one exception: rotary_attention under bf16 products on the CPU keeps the bf16 probabilities
// where they are small (T <= 6 D) and the backward multiplies those (NOTE [ Kept probabilities ]).
#include <vector>

#include <mvgpt/fused/rope.h>  // RopeTable, RopeLayout
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// Differentiable. q (B, H, Tq, D), k and v (B, Hkv, Tk, D) with H a multiple of Hkv -> (B, H, Tq, D).
// Query i sits at key position (Tk - Tq) + i and, when causal, sees keys 0..(Tk - Tq) + i.
// k and v have q's dtype, or are both bfloat16 with a float32 q (a bf16 KV cache): then the result
// is that of k and v widened to float32 (their gradients come back in bfloat16), and the CPU reads
// them in place when Tq is 1 (decoding), where a float32 cache is twice the bytes a token reads.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal);

// Differentiable: attention(rope(q, positions, ...), rope(k, positions, ...), v, scale, causal), the
// rotary embedding of q and k (fused/rope.h) inside the attention. Where float32 q, k and v of the
// same T positions reach the CPU's kernels, they rotate q and k as they read them (and round them,
// under bf16 products: NOTE [ Precision policy ]) and rotate the gradients back where they make
// them: no rotated copies of q and k, and no passes of rope's own. In float32 products the values
// are the composition's, bit for bit. Elsewhere (float64, another device, fewer queries than keys,
// per-sequence positions) the composition.
Tensor rotary_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions, double base,
                        RopeLayout layout, double position_scale, double scale, bool causal);

// Differentiable: rotary_attention over the heads of one packed projection qkv (B, T, H + 2 Hkv, D),
// q's H heads, then k's Hkv, then v's Hkv (split(qkv, {H, Hkv, Hkv}, 2), each transposed to
// (B, heads, T, D)) -> (B, H, T, D). Where rotary_attention's kernels run, the gradient is qkv's whole,
// the kernels writing dq, dk and dv into its blocks: no copy of each into its place; and the result
// is the (B, H, T, D) view of a (B, T, H, D) tensor, so that transposing it back to (B, T, H, D) for
// the output projection is itself a view (no copy). Elsewhere rotary_attention of the split views,
// the same values.
Tensor rotary_attention_packed(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, const Tensor& positions,
                               double base, RopeLayout layout, double position_scale, double scale, bool causal);

namespace fused {

// The raw kernels (no gradient history): any floating dtype, views with a unit stride on D (q, k,
// v split out of a packed qkv need no copy). out has q's dtype; lse (B, H, Tq) the compute dtype.
// bf16_products (float32 inputs; the differentiable op sets it under the bf16 policy, NOTE
// [ Precision policy ] in autograd/precision.h): the products (q k^T, P v, and the backward's)
// multiply operands rounded to bfloat16 and sum in float32; softmax and the rest stay float32. The
// CPU kernels honour it, and so does the CUDA batched route on bf16 tensor cores (sm_80 on); the
// CUDA per-row kernels compute in float32 either way.
struct AttentionResult {
  Tensor out, lse;
};
AttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                                  bool bf16_products = false);
// Returns {dq, dk, dv}.
std::vector<Tensor> attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionResult& saved, double scale, bool causal,
                                       bool bf16_products = false);

namespace reference {
// From matmul, softmax and masked_fill, with the (Tq, Tk) scores materialised: {out, lse}. With
// bf16_products the products' operands (q, k, the probabilities, v) are rounded to bfloat16 first.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                          bool bf16_products = false);
}  // namespace reference

// The kernels of one device: float32 or float64 inputs (B, H, T, D) with a unit stride on D and
// rows that do not overlap; outputs contiguous (but forward_rotary's out, below), allocated by the caller. The CPU forward also takes
// bfloat16 k and v with a float32 q of one query row (attention_forward passes no other).
struct AttentionKernels {
  void (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool bf16_products,
                  const Tensor& out, const Tensor& lse);
  void (*backward)(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, double scale, bool causal, bool bf16_products, const Tensor& dq,
                   const Tensor& dk, const Tensor& dv);
  // Where a device has them (the CPU): kernels with q and k of one length T rotated by a rope table
  // (row t by table row t, the angles of positions[t]) as they are read (and rounded, for bf16
  // products), and dq and dk rotated back by the inverse table; float32 tensors as above, except that
  // backward_rotary's dq, dk and dv may also be strided views (a unit stride on D, rows that do not
  // overlap, no two sharing an element): the blocks of a packed qkv's gradient
  // (rotary_attention_packed).
  // forward_rotary's out may be a view with a unit stride on D whose rows do not overlap (the (B, H,
  // T, D) view of a (B, T, H, D) tensor: rotary_attention_packed).
  // keep (bf16 products, H == Hkv; may be null): contiguous bfloat16 (B, H, T, D) tensors the forward
  // writes its rounded operands into, q and k rotated, q unscaled (NOTE [ Kept bf16 operands ] in
  // attention_cpu.cpp). Handed to backward_rotary as its q, k and v (bfloat16), they are read as they
  // lie: no rotation or rounding again, and the float32 projection need not be kept. A fourth,
  // contiguous bfloat16 (B, H, T, T), takes the probabilities the forward multiplied V by; handed to
  // backward_rotary as its probabilities, the backward multiplies them where it would recompute them
  // (NOTE [ Kept probabilities ]); they must come from the forward of the same q, k, v, scale and
  // causal (it writes only the entries its blocks reach). probabilities may be null.
  void (*forward_rotary)(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                         bool bf16_products, const RopeTable& table, RopeLayout layout, const Tensor& out,
                         const Tensor& lse, const std::vector<Tensor>* keep) = nullptr;
  void (*backward_rotary)(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, double scale, bool causal, bool bf16_products, const RopeTable& table,
                          const RopeTable& inverse, RopeLayout layout, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv, const Tensor* probabilities) = nullptr;
};
AttentionKernels attention_cpu_kernels();   // attention_cpu.cpp
AttentionKernels attention_cuda_kernels();  // attention.cu (only with the CUDA backend)

// Which CUDA kernels run (NOTE [ Attention through batched products ] in attention.cu): automatic
// (batched cuBLAS products from 16 queries on, the per-row kernels for fewer, as in decoding), or
// one route forced, so that tests can hold the batched route against the per-row kernels it
// replaced. Process-wide; the CPU ignores it; a shape the batched route cannot take (no keys, an
// empty head) runs per row whatever is asked.
enum class CudaAttentionRoute { automatic, rows, batched };
void set_cuda_attention_route(CudaAttentionRoute route);
CudaAttentionRoute cuda_attention_route();
// Tests only: the bytes of one scores buffer the batched route may hold (0: its default, 256 MiB),
// so that small shapes run in several slices. Process-wide, as the route.
void set_cuda_attention_score_budget(int64_t bytes);
int64_t cuda_attention_score_budget();

}  // namespace fused
}  // namespace mvgpt
