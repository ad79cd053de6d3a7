#include "kernels/optimizer.h"

#include <cmath>

namespace tapestry::exec::kernels {

void sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate)
{
    const std::int64_t n = param.size();
    for (std::int64_t i = 0; i < n; ++i)
        param.data[i] -= learningRate * grad.data[i];
}

void adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m,
                const TensorView &v, std::int64_t step, const AdamConfig &config)
{
    const std::int64_t n = param.size();
    const float c1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
    const float c2 = 1.0f - std::pow(config.beta2, static_cast<float>(step));
    for (std::int64_t i = 0; i < n; ++i) {
        const float g = grad.data[i];
        m.data[i] = config.beta1 * m.data[i] + (1.0f - config.beta1) * g;
        v.data[i] = config.beta2 * v.data[i] + (1.0f - config.beta2) * g * g;
        const float mhat = m.data[i] / c1, vhat = v.data[i] / c2;
        param.data[i] -= config.learningRate * mhat / (std::sqrt(vhat) + config.epsilon);
    }
}

} // namespace tapestry::exec::kernels
