#pragma once

#include <stdexcept>
#include <string>

namespace tapestry {

// An error names the input (a file, a model, a plan), where in it the problem
// is (a JSON path, a node or tensor name; may be empty) and the problem. It is
// raised where it is found and shown once, where the user is, as one line.
struct Error {
    std::string input;
    std::string where;
    std::string problem;

    std::string toString() const
    {
        std::string s = input;
        if (!where.empty())
            s += s.empty() ? where : ": " + where;
        s += s.empty() ? problem : ": " + problem;
        return s;
    }
};

class TapestryError : public std::runtime_error {
public:
    explicit TapestryError(Error e) : std::runtime_error(e.toString()), m_error(std::move(e)) {}
    const Error &error() const { return m_error; }

private:
    Error m_error;
};

} // namespace tapestry
