// defines: export_onnx, the ONNX graph (opset 17) of a built Mirror model that computes what
// Sequential::forward computes in inference mode, sequence lengths included; the layer-by-layer
// op mapping is in docs/predict-export.md.
#pragma once

#include <string>

#include "mirror/nn/sequential.h"
#include "tools/onnx/graph.h"

namespace mirror::onnx {

struct ExportOptions {
  bool probabilities = false;  // end with a Softmax (mirror-predict --output-kind probabilities)
  bool tokens = false;         // the input is int32 token ids [N, T] (lengths from trailing 0s)
  std::string name = "mirror";
  bool sigmoid = false;  // probabilities by a Sigmoid, not a Softmax (predict::sigmoid_outputs)
};

/// The graph: input "input" (float [N, sample...], or int32 [N, T] ids), output "output"
/// (float [N, outputs...]). InvalidArgument naming the layer for one that cannot be exported
/// exactly (none of Mirror's layers today; a new kind must be added to the mapping).
Graph export_onnx(nn::Sequential& model, const ExportOptions& options);

}  // namespace mirror::onnx
