#pragma once

#include "io/zoo/zoo.h"

#include <string>

namespace tapestry::io::zoo {

// Rejects knob values that make no model. Errors name the preset
// ("zoo:NAME") as the input and the offending knob as the place; the zoo and
// the config.json loader replace the input with what the user typed.
class KnobCheck {
public:
    KnobCheck(const std::string &model, const Knobs &knobs) : m_model(model), m_knobs(knobs) {}

    // The knob's value; a knob the family needs and the caller left out is
    // named as missing.
    std::int64_t operator[](const std::string &knob) const
    {
        const auto it = m_knobs.find(knob);
        if (it == m_knobs.end())
            fail(knob, "missing knob " + knob);
        return it->second;
    }
    bool has(const std::string &knob) const { return m_knobs.count(knob) != 0; }

    // `divisor` divides `dividend`; the error names `divisor`.
    void divides(const std::string &divisor, const std::string &dividend) const;
    // `knob` <= `limit`; the error names `knob`.
    void atMost(const std::string &knob, const std::string &limit) const;
    // The quotient dividend/divisor is even (rotary embedding halves a head);
    // the error names `divisor`.
    void evenQuotient(const std::string &dividend, const std::string &divisor) const;

    [[noreturn]] void fail(const std::string &knob, const std::string &problem) const;

private:
    std::string describe(const std::string &knob) const;

    std::string m_model;
    const Knobs &m_knobs;
};

} // namespace tapestry::io::zoo
