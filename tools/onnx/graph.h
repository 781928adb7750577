// defines: an ONNX graph held without protobuf (nodes, initializers, inputs and outputs), the
// GraphBuilder that mirror-export's layer mapping writes through, and serialize(), the one
// function that turns it into ModelProto bytes with the classes generated from the vendored
// schema subset tools/onnx/onnx_subset.proto (built only when CMake finds protobuf).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mirror::onnx {

/// TensorProto.DataType values used here.
enum class ElemType : int { kFloat = 1, kInt32 = 6, kInt64 = 7, kBool = 9 };

struct Attribute {
  enum class Kind { kInt, kFloat, kInts, kString };
  std::string name;
  Kind kind = Kind::kInt;
  std::int64_t i = 0;
  float f = 0;
  std::vector<std::int64_t> ints;
  std::string s;
};
Attribute attr(const std::string& name, std::int64_t value);
Attribute attr(const std::string& name, int value);
Attribute attr_f(const std::string& name, float value);
Attribute attr(const std::string& name, std::vector<std::int64_t> values);
Attribute attr(const std::string& name, const std::string& value);
Attribute attr(const std::string& name, const char* value);

struct Node {
  std::string op, name;
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input or output
  std::vector<Attribute> attributes;
};

struct Initializer {
  std::string name;
  ElemType type = ElemType::kFloat;
  std::vector<std::int64_t> dims;
  std::string raw;  // little-endian elements
};

/// A graph input or output: a dimension is a number, or a name (e.g. "N") for a dynamic one.
struct ValueInfo {
  std::string name;
  ElemType type = ElemType::kFloat;
  std::vector<std::string> dims;
};

struct Graph {
  std::string name, doc;
  int opset = 17;
  std::vector<Node> nodes;
  std::vector<Initializer> initializers;
  std::vector<ValueInfo> inputs, outputs;
};

/// Whether this build can serialize (it has protobuf).
bool available();
/// ModelProto bytes (IR version 8, the default domain at graph.opset). Unavailable without
/// protobuf, naming how to get it.
std::string serialize(const Graph& graph, const std::string& producer_version);

/// Adds nodes and constants with unique names ("<prefix>_<n>").
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& graph) : graph_(graph) {}
  /// A node with `outputs` fresh outputs named after `hint`; returns their names.
  std::vector<std::string> node(const std::string& op, std::vector<std::string> inputs,
                                std::vector<Attribute> attributes, int outputs,
                                const std::string& hint);
  /// A node with one output.
  std::string op(const std::string& op, std::vector<std::string> inputs,
                 std::vector<Attribute> attributes = {}, const std::string& hint = "");
  std::string floats(const std::string& hint, std::vector<std::int64_t> dims,
                     const std::vector<float>& values);
  std::string int64s(const std::string& hint, std::vector<std::int64_t> dims,
                     const std::vector<std::int64_t>& values);
  /// A scalar ([] dims) constant.
  std::string scalar_f(float value);
  std::string scalar_i64(std::int64_t value);
  /// A 1-D int64 constant (axes, shapes, pads).
  std::string ints(const std::vector<std::int64_t>& values);
  std::string fresh(const std::string& hint);

 private:
  Graph& graph_;
  std::int64_t counter_ = 0;
};

}  // namespace mirror::onnx
