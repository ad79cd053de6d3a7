#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// param −= lr · grad.
void sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate);

struct AdamConfig {
    float learningRate = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float epsilon = 1e-8f;
};

// Adam with bias correction (Kingma & Ba); m and v are the first and second
// moment buffers of this parameter, `step` counts updates from 1.
void adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m,
                const TensorView &v, std::int64_t step, const AdamConfig &config);

} // namespace tapestry::exec::kernels
