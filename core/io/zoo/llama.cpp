#include "io/zoo/families.h"
#include "io/zoo/llamastack.h"

namespace tapestry::io::zoo {

// LLaMA 2 and 3: the LLaMA decoder with a SwiGLU MLP in every layer.
ir::Graph buildLlama(const std::string &name, const Knobs &knobs)
{
    const std::int64_t ffn = knobs.at("ffn");
    return buildLlamaStack(name, knobs, [ffn](GraphBuilder &g, ir::TensorId x) {
        g.push("mlp");
        auto y = swiGlu(g, x, ffn, "gate_proj", "up_proj", "down_proj");
        g.pop();
        return y;
    });
}

} // namespace tapestry::io::zoo
