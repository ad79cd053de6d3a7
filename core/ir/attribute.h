#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tapestry::ir {

// An op attribute: the value kinds ONNX attributes take that matter for
// planning (tensors-valued attributes are folded or dropped at load time).
using Attribute = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>,
                               std::vector<double>, std::vector<std::string>>;

// Ordered so that printing and hashing are deterministic.
using Attributes = std::map<std::string, Attribute>;

std::optional<std::int64_t> intAttr(const Attributes &attrs, const std::string &key);
std::optional<double> floatAttr(const Attributes &attrs, const std::string &key);
std::optional<std::vector<std::int64_t>> intsAttr(const Attributes &attrs, const std::string &key);
std::optional<std::string> stringAttr(const Attributes &attrs, const std::string &key);

// A hash of an op's domain and attributes, keys and values, for structural
// comparison: equal for equal attributes, whatever order they were set in.
std::uint64_t hashAttributes(std::string_view domain, const Attributes &attrs);

} // namespace tapestry::ir
