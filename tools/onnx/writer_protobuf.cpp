// serialize(): the Graph as an ONNX ModelProto, through the classes protoc generates from the
// vendored schema subset (tools/onnx/onnx_subset.proto). Built only when CMake finds protobuf.
#include "onnx_subset.pb.h"
#include "tools/onnx/graph.h"

namespace mirror::onnx {
namespace {

void set_value_info(ValueInfoProto* out, const ValueInfo& in) {
  out->set_name(in.name);
  TypeProto::Tensor* t = out->mutable_type()->mutable_tensor_type();
  t->set_elem_type(static_cast<int>(in.type));
  TensorShapeProto* shape = t->mutable_shape();
  for (const std::string& d : in.dims) {
    TensorShapeProto::Dimension* dim = shape->add_dim();
    if (!d.empty() && (d[0] == '-' || (d[0] >= '0' && d[0] <= '9')))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

void set_attribute(AttributeProto* out, const Attribute& in) {
  out->set_name(in.name);
  switch (in.kind) {
    case Attribute::Kind::kInt:
      out->set_type(AttributeProto::INT);
      out->set_i(in.i);
      break;
    case Attribute::Kind::kFloat:
      out->set_type(AttributeProto::FLOAT);
      out->set_f(in.f);
      break;
    case Attribute::Kind::kInts:
      out->set_type(AttributeProto::INTS);
      for (std::int64_t v : in.ints) out->add_ints(v);
      break;
    case Attribute::Kind::kString:
      out->set_type(AttributeProto::STRING);
      out->set_s(in.s);
      break;
  }
}

}  // namespace

bool available() { return true; }

std::string serialize(const Graph& graph, const std::string& producer_version) {
  ModelProto model;
  model.set_ir_version(8);  // the IR of opsets 17-18
  model.set_producer_name("mirror-export");
  model.set_producer_version(producer_version);
  OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(graph.opset);
  GraphProto* g = model.mutable_graph();
  g->set_name(graph.name);
  g->set_doc_string(graph.doc);
  for (const Node& n : graph.nodes) {
    NodeProto* node = g->add_node();
    node->set_op_type(n.op);
    node->set_name(n.name);
    for (const std::string& i : n.inputs) node->add_input(i);
    for (const std::string& o : n.outputs) node->add_output(o);
    for (const Attribute& a : n.attributes) set_attribute(node->add_attribute(), a);
  }
  for (const Initializer& i : graph.initializers) {
    TensorProto* t = g->add_initializer();
    t->set_name(i.name);
    t->set_data_type(static_cast<int>(i.type));
    for (std::int64_t d : i.dims) t->add_dims(d);
    t->set_raw_data(i.raw);
  }
  for (const ValueInfo& v : graph.inputs) set_value_info(g->add_input(), v);
  for (const ValueInfo& v : graph.outputs) set_value_info(g->add_output(), v);
  return model.SerializeAsString();
}

}  // namespace mirror::onnx
