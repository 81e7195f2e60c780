// The gradient rules of Conv, MaxPool and AveragePool (ops/conv_grad.cc), which build the internal
// ops ConvGradData, ConvGradFilter, MaxPoolGrad and AveragePoolGrad registered there.
#pragma once

#include "compiler/grad_builder.h"

namespace ampc::ops {

absl::StatusOr<Grads> conv_gradient(GradBuilder& b);
absl::StatusOr<Grads> max_pool_gradient(GradBuilder& b);
absl::StatusOr<Grads> average_pool_gradient(GradBuilder& b);

}  // namespace ampc::ops
