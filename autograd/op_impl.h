#pragma once
// INTERNAL: not part of the public API. What the .cpp files that define differentiable ops share
// (autograd/*.cpp and the fused units, autograd/fused/*.cpp): the recording machinery
// (autograd/function.h), the op registry, the op declarations and the raw ops, and the names they
// use unqualified. Include it only from those .cpp files: the using-declarations below put autograd
// names into namespace mvgpt.
#include <mvgpt/autograd/function.h>
#include <mvgpt/autograd/op_registry.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>  // the raw ops the differentiable ones are made of
#include <mvgpt/tensor/grad_state.h>

namespace mvgpt {

using autograd::edge_to;
using autograd::Grads;
using autograd::InternalOps;  // first line of every differentiable op: NOTE [ Raw ops and gradients ]
using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

}  // namespace mvgpt
