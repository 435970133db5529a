// NOTE [ oneDNN on the TBB pool ]
// Debian's oneDNN is built on OpenMP: left alone, its first matmul starts an OpenMP team of one
// thread per core whose threads spin after every call, the fight NOTE [ One thread pool ] (blas.cpp)
// describes for OpenBLAS. So oneDNN is held to one thread on every thread that calls it
// (omp_set_num_threads(1) sets the calling thread's own OpenMP setting, and oneDNN runs a
// one-thread call inline, with no team), and blas::gemm cuts large products into blocks, one
// oneDNN call per TBB task, as it does for OpenBLAS. A matmul primitive is made once per shape and
// thread and kept (the blocks repeat the same few shapes every step); a primitive descriptor costs
// tens of microseconds, as much as a whole decoding product. The kept primitives are bounded
// (kMaxPlans a thread): a caller that runs ever new shapes (a window growing token by token) makes
// them again rather than keeping each one's scratchpad for the life of the thread.
#include <mvgpt/backends/cpu/onednn_matmul.h>

#include <omp.h>

#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include <mvgpt/backends/cpu/bf16_gemm.h>  // cpu_support

namespace mvgpt::cpu::onednn {
namespace {

// Primitives kept per thread: the training step's blocks and the attention's are a few dozen shapes.
constexpr size_t kMaxPlans = 512;

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    (void)bf16::cpu_support();  // AMX permission before oneDNN looks at the CPU
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// This thread's oneDNN setup: one OpenMP thread (NOTE [ oneDNN on the TBB pool ]) and a stream.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s = [] {
    omp_set_num_threads(1);
    return dnnl::stream(engine());
  }();
  return s;
}

struct ProductHash {
  size_t operator()(const Product& k) const {
    size_t h = std::hash<int64_t>()(k.M);
    for (int64_t v : {k.N, k.K, k.lda, k.ldb, k.ldc,
                      int64_t(k.ta) * 4 + int64_t(k.tb) * 2 + int64_t(k.bias) + int64_t(k.operands) * 8 +
                          int64_t(k.result) * 256})
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h * 1000003u ^ std::hash<float>()(k.alpha) ^ (std::hash<float>()(k.beta) << 1);
  }
};

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
// A shape's primitive with what each call reuses: the memory objects of its operands (each call only
// points them at its data) and its scratchpad, made once. Made per call, they cost one oneDNN call
// of the attention's small products (64 x 64 x 64) a third of its time in malloc and the library.
struct Plan {
  std::optional<dnnl::matmul> matmul;  // empty: no implementation that multiply takes
  dnnl::memory mem_a, mem_b, mem_c, mem_bias, scratchpad;
  std::vector<char> scratch;
  std::string impl;
};

// The product's primitive as oneDNN picks it (impl), and with `build`, where takes() accepts it, what
// multiply reuses: the primitive, its memory objects and scratchpad.
Plan make_plan(const Product& k, bool build) {
  if (k.operands != DType::f32 && k.operands != DType::bf16)
    throw std::logic_error("onednn::multiply: operands of type " + std::string(dtype_name(k.operands)));
  Plan p;
  const dt op = k.operands == DType::f32 ? dt::f32 : dt::bf16;
  const dnnl::memory::desc a({k.M, k.K}, op, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  const dnnl::memory::desc b({k.K, k.N}, op, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  if (k.result != DType::f32 && !(k.result == DType::bf16 && k.operands == DType::bf16))
    throw std::logic_error("onednn::multiply: a " + std::string(dtype_name(k.result)) + " result of " +
                           std::string(dtype_name(k.operands)) + " operands");
  const dnnl::memory::desc c({k.M, k.N}, k.result == DType::bf16 ? dt::bf16 : dt::f32, dims{k.ldc, 1});
  const dnnl::memory::desc bias = k.bias ? dnnl::memory::desc({1, k.N}, dt::f32, dims{k.N, 1}) : dnnl::memory::desc();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
  if (k.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(k.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(k.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr,
                                    engine());
    p.impl = pd.impl_info_str();
    if (build && takes(k.operands, p.impl, k.ta)) {
      p.matmul.emplace(pd);
      p.mem_a = dnnl::memory(a, engine(), DNNL_MEMORY_NONE);
      p.mem_b = dnnl::memory(b, engine(), DNNL_MEMORY_NONE);
      p.mem_c = dnnl::memory(c, engine(), DNNL_MEMORY_NONE);
      if (k.bias) p.mem_bias = dnnl::memory(bias, engine(), DNNL_MEMORY_NONE);
      const dnnl::memory::desc sd = pd.scratchpad_desc();
      if (sd.get_size() > 0) {
        p.scratch.resize(sd.get_size());
        p.scratchpad = dnnl::memory(sd, engine(), p.scratch.data());
      }
    }
  } catch (const dnnl::error& e) {
    p.impl = std::string("none (") + e.what() + ")";
  }
  return p;
}

}  // namespace

bool float32_brgemm() {
  // Not built (build = false): building asks takes(), which asks this.
  static const bool yes =
      make_plan(kTypicalFloat32, /*build=*/false).impl.rfind("brg", 0) == 0;
  return yes;
}

bool takes(DType operands, const std::string& implementation, bool a_transposed) {
  if (operands == DType::f32)
    return implementation.rfind("brg", 0) == 0 ||
           (implementation.rfind("gemm:jit", 0) == 0 && !a_transposed && !float32_brgemm());
  return implementation.rfind("ref", 0) != 0 && implementation.rfind("none", 0) != 0;
}

std::string implementation(const Product& p) {
  static std::mutex mutex;
  static std::unordered_map<Product, std::string, ProductHash> names;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(p);
  if (it == names.end()) it = names.emplace(p, make_plan(p, /*build=*/false).impl).first;
  return it->second;
}

bool multiply(const Product& k, const void* A, const void* B, void* C, const float* bias) {
  if (k.bias != (bias != nullptr))
    throw std::logic_error("onednn::multiply: a bias where the product has none, or none where it has one");
  dnnl::stream& stream = thread_stream();
  thread_local std::unordered_map<Product, Plan, ProductHash> plans;
  auto it = plans.find(k);
  if (it == plans.end()) {
    if (plans.size() >= kMaxPlans) plans.clear();
    it = plans.emplace(k, make_plan(k, /*build=*/true)).first;
  }
  const Plan& p = it->second;
  if (!p.matmul) return false;
  p.mem_a.set_data_handle(const_cast<void*>(A));
  p.mem_b.set_data_handle(const_cast<void*>(B));
  p.mem_c.set_data_handle(C);
  if (bias) p.mem_bias.set_data_handle(const_cast<float*>(bias));
  // The C interface takes the arguments as an array; the C++ one builds a hash map per call.
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, p.mem_a.get()}, {DNNL_ARG_WEIGHTS, p.mem_b.get()},
                             {DNNL_ARG_DST, p.mem_c.get()}};
  int nargs = 3;
  if (!p.scratch.empty()) args[nargs++] = {DNNL_ARG_SCRATCHPAD, p.scratchpad.get()};
  if (bias) args[nargs++] = {DNNL_ARG_BIAS, p.mem_bias.get()};
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.matmul->get(), stream.get(), nargs, args), "oneDNN matmul");
  stream.wait();
  return true;
}

float bias_first(int64_t M, int64_t N, const float* bias, float beta, float* C, int64_t ldc) {
  if (!bias) return beta;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? bias[j] : beta * C[i * ldc + j] + bias[j];
  return 1.0f;
}

}  // namespace mvgpt::cpu::onednn
