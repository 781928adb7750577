// GraphBuilder and the attribute helpers: plain data, no protobuf (tools/onnx/graph.h).
#include "tools/onnx/graph.h"

#include <cstring>

namespace mirror::onnx {

Attribute attr(const std::string& name, std::int64_t value) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = value;
  return a;
}

Attribute attr(const std::string& name, int value) {
  return attr(name, static_cast<std::int64_t>(value));
}

Attribute attr_f(const std::string& name, float value) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kFloat;
  a.f = value;
  return a;
}

Attribute attr(const std::string& name, std::vector<std::int64_t> values) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(values);
  return a;
}

Attribute attr(const std::string& name, const std::string& value) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kString;
  a.s = value;
  return a;
}

Attribute attr(const std::string& name, const char* value) {
  return attr(name, std::string(value));
}

std::string GraphBuilder::fresh(const std::string& hint) {
  return (hint.empty() ? std::string("t") : hint) + "_" + std::to_string(++counter_);
}

std::vector<std::string> GraphBuilder::node(const std::string& op, std::vector<std::string> inputs,
                                            std::vector<Attribute> attributes, int outputs,
                                            const std::string& hint) {
  Node n;
  n.op = op;
  n.name = fresh(hint.empty() ? op : hint + "/" + op);
  n.inputs = std::move(inputs);
  n.attributes = std::move(attributes);
  for (int i = 0; i < outputs; ++i) n.outputs.push_back(n.name + ":" + std::to_string(i));
  graph_.nodes.push_back(n);
  return n.outputs;
}

std::string GraphBuilder::op(const std::string& op, std::vector<std::string> inputs,
                             std::vector<Attribute> attributes, const std::string& hint) {
  return node(op, std::move(inputs), std::move(attributes), 1, hint).front();
}

std::string GraphBuilder::floats(const std::string& hint, std::vector<std::int64_t> dims,
                                 const std::vector<float>& values) {
  Initializer init;
  init.name = fresh(hint);
  init.type = ElemType::kFloat;
  init.dims = std::move(dims);
  init.raw.resize(values.size() * sizeof(float));
  std::memcpy(init.raw.data(), values.data(), init.raw.size());  // little-endian hosts only
  graph_.initializers.push_back(std::move(init));
  return graph_.initializers.back().name;
}

std::string GraphBuilder::int64s(const std::string& hint, std::vector<std::int64_t> dims,
                                 const std::vector<std::int64_t>& values) {
  Initializer init;
  init.name = fresh(hint);
  init.type = ElemType::kInt64;
  init.dims = std::move(dims);
  init.raw.resize(values.size() * sizeof(std::int64_t));
  std::memcpy(init.raw.data(), values.data(), init.raw.size());
  graph_.initializers.push_back(std::move(init));
  return graph_.initializers.back().name;
}

std::string GraphBuilder::scalar_f(float value) { return floats("c", {}, {value}); }
std::string GraphBuilder::scalar_i64(std::int64_t value) { return int64s("c", {}, {value}); }
std::string GraphBuilder::ints(const std::vector<std::int64_t>& values) {
  return int64s("c", {static_cast<std::int64_t>(values.size())}, values);
}

}  // namespace mirror::onnx
