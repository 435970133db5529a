#pragma once
// What a training step does to every parameter at once, as one fused unit (NOTE [ A fused op is one
// unit ] in unit.h): the gradients' sum of squares and their scaling (gradient clipping) and the
// AdamW step. On CUDA each is a multi-tensor kernel (NOTE [ Multi-tensor kernels ] in
// multi_tensor.cu): one launch for up to 80 tensors, where a kernel per tensor (and, for the norm,
// several per chunk) took about 535 launches a step of the series' model. On the CPU scale_ and
// AdamW give the per-tensor code's results bit for bit, and the sum of squares is a float64 sum in
// an order fixed by the tensors alone (multi_tensor_cpu.cpp). On CUDA a tensor (its storage)
// must appear at most once in a call: its chunks would race.
#include <vector>

#include <mvgpt/fused/adamw.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::fused {

// The sum of the squares of all elements of xs, summed in float64 (floating tensors, any layout, on
// any devices; none: 0). Reads each device's result once (a host synchronisation on a GPU).
double sum_squares(const std::vector<Tensor>& xs);

// x *= factor for each x of xs, in place, rounded once in x's dtype (x * T(factor), as ops::mul).
void scale_(const std::vector<Tensor>& xs, double factor);

// One AdamW step of each slot, exactly adamw_step_(param, grad, m, v, hp) for each (the same checks,
// the same bits), slots on any devices.
// rounded: undefined, or (a float32 param on the CPU) a contiguous bfloat16 tensor of param's size
// that the step writes param's new value into, rounded (NOTE [ Weights rounded by the optimizer ]
// in adamw_cpu.cpp).
struct AdamWSlot {
  Tensor param, grad, m, v;
  AdamWParams hp;
  Tensor rounded = {};  // (a default: slots written {param, grad, m, v, hp} need not name it)
};
void adamw_step_many_(const std::vector<AdamWSlot>& slots);

// The kernels of one device; each call's tensors are on that device. sum_squares and scale take
// float32 or float64 tensors on CUDA (the entry points convert or fall back for others); the CPU's
// take any floating tensor.
struct MultiTensorKernels {
  double (*sum_squares)(const std::vector<Tensor>& xs);
  void (*scale)(const std::vector<Tensor>& xs, double factor);
  void (*adamw)(const std::vector<AdamWSlot>& slots);
};
MultiTensorKernels multi_tensor_cpu_kernels();   // multi_tensor_cpu.cpp
MultiTensorKernels multi_tensor_cuda_kernels();  // multi_tensor.cu (only with the CUDA backend)

}  // namespace mvgpt::fused
