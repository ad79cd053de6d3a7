#include "io/jsonmodel.h"

#include "io/files.h"

#include "ir/error.h"
#include "ir/sizes.h"
#include "ir/validate.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <sstream>

namespace tapestry::io {

using nlohmann::json;

namespace {

constexpr const char *kFormat = "tapestry.model";
constexpr int kVersion = 1;

class Reader {
public:
    explicit Reader(std::string input) : m_input(std::move(input)) {}

    [[noreturn]] void fail(const std::string &path, const std::string &problem) const
    {
        throw TapestryError(Error{m_input, path, problem});
    }

    const json &field(const json &object, const std::string &path, const char *key) const
    {
        if (!object.is_object())
            fail(path, "expected an object");
        auto it = object.find(key);
        if (it == object.end())
            fail(path, std::string("missing field \"") + key + "\"");
        return *it;
    }

    std::string string(const json &value, const std::string &path) const
    {
        if (!value.is_string())
            fail(path, "expected a string");
        return value.get<std::string>();
    }

    std::int64_t integer(const json &value, const std::string &path) const
    {
        if (value.is_number_unsigned()) {
            if (value.get<std::uint64_t>() >
                static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                fail(path, "integer overflows 64 bits");
            return static_cast<std::int64_t>(value.get<std::uint64_t>());
        }
        if (value.is_number_integer())
            return value.get<std::int64_t>();
        if (value.is_number_float())
            fail(path, "integer overflows 64 bits or is not whole: " + value.dump());
        fail(path, "expected an integer");
    }

    const json &array(const json &value, const std::string &path) const
    {
        if (!value.is_array())
            fail(path, "expected an array");
        return value;
    }

    ir::Shape shape(const json &value, const std::string &path) const
    {
        ir::Shape s;
        std::int64_t elements = 1;
        const auto &a = array(value, path);
        for (std::size_t i = 0; i < a.size(); ++i) {
            const std::string p = path + "[" + std::to_string(i) + "]";
            const std::int64_t d = integer(a[i], p);
            if (d < 0)
                fail(p, "negative dim " + std::to_string(d));
            const auto next = ir::checkedMul(elements, d);
            if (!next)
                fail(p, "shape's element count overflows 64 bits");
            elements = *next;
            s.push_back(d);
        }
        return s;
    }

    ir::Attribute attribute(const json &value, const std::string &path) const
    {
        if (value.is_number_integer())
            return integer(value, path);
        if (value.is_number_float())
            return value.get<double>();
        if (value.is_string())
            return value.get<std::string>();
        if (value.is_array()) {
            if (value.empty() || value[0].is_number_integer()) {
                std::vector<std::int64_t> v;
                for (std::size_t i = 0; i < value.size(); ++i) {
                    if (!value[i].is_number_integer())
                        fail(path + "[" + std::to_string(i) + "]", "expected an integer like the first element");
                    v.push_back(integer(value[i], path + "[" + std::to_string(i) + "]"));
                }
                return v;
            }
            if (value[0].is_number()) {
                std::vector<double> v;
                for (std::size_t i = 0; i < value.size(); ++i) {
                    if (!value[i].is_number())
                        fail(path + "[" + std::to_string(i) + "]", "expected a number");
                    v.push_back(value[i].get<double>());
                }
                return v;
            }
            if (value[0].is_string()) {
                std::vector<std::string> v;
                for (std::size_t i = 0; i < value.size(); ++i)
                    v.push_back(string(value[i], path + "[" + std::to_string(i) + "]"));
                return v;
            }
        }
        fail(path, "unsupported attribute value " + value.dump());
    }

private:
    std::string m_input;
};

} // namespace

ir::Graph readModelJson(const std::string &text, const std::string &input)
{
    json doc;
    try {
        doc = json::parse(text);
    } catch (const json::parse_error &e) {
        throw TapestryError(Error{input, {}, "not valid JSON (syntax error at byte " +
                                                 std::to_string(e.byte) + ")"});
    } catch (const json::out_of_range &e) {
        // A number past a double's range (1e999): "[json.exception...] number overflow parsing '1e999'".
        const std::string what = e.what();
        throw TapestryError(Error{input, {}, "not valid JSON (" + what.substr(what.find("] ") + 2) + ")"});
    }
    Reader r(input);
    if (!doc.is_object())
        r.fail("$", "expected a JSON object");
    if (r.string(r.field(doc, "$", "format"), "$.format") != kFormat)
        r.fail("$.format", std::string("expected \"") + kFormat + "\"");
    const auto version = r.integer(r.field(doc, "$", "version"), "$.version");
    if (version != kVersion)
        r.fail("$.version", "unsupported version " + std::to_string(version) + " (this build reads " +
                                std::to_string(kVersion) + ")");

    ir::Graph graph;
    if (auto it = doc.find("name"); it != doc.end())
        graph.name = r.string(*it, "$.name");

    const auto &tensors = r.array(r.field(doc, "$", "tensors"), "$.tensors");
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::string p = "$.tensors[" + std::to_string(i) + "]";
        const auto &t = tensors[i];
        auto name = r.string(r.field(t, p, "name"), p + ".name");
        auto shape = r.shape(r.field(t, p, "shape"), p + ".shape");
        auto dtypeName = r.string(r.field(t, p, "dtype"), p + ".dtype");
        auto dtype = ir::dtypeFromString(dtypeName);
        if (!dtype)
            r.fail(p + ".dtype", "unknown dtype \"" + dtypeName + "\"");
        auto roleName = r.string(r.field(t, p, "role"), p + ".role");
        auto role = ir::roleFromString(roleName);
        if (!role)
            r.fail(p + ".role", "unknown role \"" + roleName + "\"");
        if (graph.findTensor(name))
            r.fail(p + ".name", "duplicate tensor name \"" + name + "\"");
        graph.addTensor(std::move(name), std::move(shape), *dtype, *role);
    }

    const auto &ops = r.array(r.field(doc, "$", "ops"), "$.ops");
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const std::string p = "$.ops[" + std::to_string(i) + "]";
        const auto &o = ops[i];
        auto name = r.string(r.field(o, p, "name"), p + ".name");
        auto type = r.string(r.field(o, p, "type"), p + ".type");
        auto refs = [&](const char *key) {
            std::vector<ir::TensorId> ids;
            const auto &a = r.array(r.field(o, p, key), p + "." + key);
            for (std::size_t k = 0; k < a.size(); ++k) {
                const std::string kp = p + "." + key + "[" + std::to_string(k) + "]";
                auto tensorName = r.string(a[k], kp);
                auto id = graph.findTensor(tensorName);
                if (!id)
                    r.fail(kp, "unknown tensor \"" + tensorName + "\"");
                ids.push_back(*id);
            }
            return ids;
        };
        auto inputs = refs("inputs");
        auto outputs = refs("outputs");
        ir::Attributes attributes;
        if (auto it = o.find("attributes"); it != o.end()) {
            if (!it->is_object())
                r.fail(p + ".attributes", "expected an object");
            for (const auto &[key, value] : it->items())
                attributes.emplace(key, r.attribute(value, p + ".attributes." + key));
        }
        auto id = graph.addOp(std::move(type), std::move(name), std::move(inputs), std::move(outputs),
                              std::move(attributes));
        if (auto it = o.find("domain"); it != o.end())
            graph.setDomain(id, r.string(*it, p + ".domain"));
    }

    if (auto problem = ir::validate(graph, input))
        throw TapestryError(*problem);
    return graph;
}

ir::Graph readModelJsonFile(const std::string &path)
{
    return readModelJson(readFile(path), path);
}

std::string writeModelJson(const ir::Graph &graph)
{
    // One tensor and one op per line, keys in a fixed order: files stay short,
    // diff well and are easy to edit by hand.
    using ordered = nlohmann::ordered_json;
    std::string out = "{\n \"format\": \"" + std::string(kFormat) +
                      "\",\n \"version\": " + std::to_string(kVersion) +
                      ",\n \"name\": " + ordered(graph.name).dump() + ",\n \"tensors\": [";
    bool first = true;
    for (const auto &t : graph.tensors()) {
        ordered line;
        line["name"] = t.name;
        line["shape"] = t.shape;
        line["dtype"] = std::string(ir::toString(t.dtype));
        line["role"] = std::string(ir::toString(t.role));
        out += (first ? "\n  " : ",\n  ") + line.dump();
        first = false;
    }
    out += "\n ],\n \"ops\": [";
    first = true;
    for (const auto &o : graph.ops()) {
        ordered line;
        line["name"] = o.name;
        line["type"] = o.type;
        if (!o.domain.empty())
            line["domain"] = o.domain;
        ordered ins = ordered::array(), outs = ordered::array();
        for (auto t : o.inputs)
            ins.push_back(graph.tensor(t).name);
        for (auto t : o.outputs)
            outs.push_back(graph.tensor(t).name);
        line["inputs"] = std::move(ins);
        line["outputs"] = std::move(outs);
        if (!o.attributes.empty()) {
            ordered attrs = ordered::object();
            for (const auto &[k, v] : o.attributes)
                attrs[k] = std::visit([](const auto &value) { return ordered(value); }, v);
            line["attributes"] = std::move(attrs);
        }
        out += (first ? "\n  " : ",\n  ") + line.dump();
        first = false;
    }
    out += "\n ]\n}\n";
    return out;
}

} // namespace tapestry::io
