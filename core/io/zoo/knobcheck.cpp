#include "io/zoo/knobcheck.h"

#include "ir/error.h"

namespace tapestry::io::zoo {

std::string KnobCheck::describe(const std::string &knob) const
{
    return knob + "=" + std::to_string(m_knobs.at(knob));
}

void KnobCheck::fail(const std::string &knob, const std::string &problem) const
{
    throw TapestryError(Error{"zoo:" + m_model, knob, problem});
}

void KnobCheck::divides(const std::string &divisor, const std::string &dividend) const
{
    if (m_knobs.at(dividend) % m_knobs.at(divisor) != 0)
        fail(divisor, describe(divisor) + " does not divide " + describe(dividend));
}

void KnobCheck::atMost(const std::string &knob, const std::string &limit) const
{
    if (m_knobs.at(knob) > m_knobs.at(limit))
        fail(knob, describe(knob) + " exceeds " + describe(limit));
}

void KnobCheck::evenQuotient(const std::string &dividend, const std::string &divisor) const
{
    if ((m_knobs.at(dividend) / m_knobs.at(divisor)) % 2 != 0)
        fail(divisor, "head size " + describe(dividend) + " / " + describe(divisor) +
                          " is odd; rotary embedding rotates pairs of dims");
}

} // namespace tapestry::io::zoo
