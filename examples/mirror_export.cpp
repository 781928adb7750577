// mirror-export: writes a trained checkpoint's model as an ONNX file (opset 17) that ONNX
// runtimes run with the outputs mirror-predict gives, and/or its weights as a Keras 3
// .weights.h5 file that the equivalent Keras model loads with load_weights. The op mapping is
// tools/onnx_export.cpp, the weight layouts include/mirror/train/keras_weights.h
// (docs/predict-export.md); the ONNX file is written with protobuf from the vendored schema subset.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "mirror/error.h"
#include "mirror/train/keras_weights.h"
#include "tools/command_line.h"
#include "tools/onnx_export.h"
#include "tools/predict.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kAbout =
    "mirror-export: a trained model (a mirror-train checkpoint) as an ONNX file.\n"
    "  mirror-export --checkpoint run/ck --onnx model.onnx\n"
    "  mirror-export --checkpoint run/ck --keras-weights model.weights.h5\n"
    "The graph (opset 17) takes 'input' (float [N, sample...], or int32 token ids [N, T] with\n"
    "0 as trailing padding) and gives 'output' (float [N, outputs]): the logits, or with\n"
    "--output-kind probabilities their softmax (the sigmoid of a sigmoid or one-output head), as\n"
    "mirror-predict computes them.\n"
    "--keras-weights writes Keras 3's .weights.h5: model.load_weights(FILE) loads it into the\n"
    "Keras model the spec was read from (channels_last images; docs/predict-export.md).\n"
    "Exit status: 0 written, 2 bad flags, input or a layer that cannot be exported, 1 other.\n\n"
    "Options";

void write_file(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MIRROR_CHECK(f != nullptr, mirror::Error, "cannot write " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) std::remove(tmp.c_str());
  MIRROR_CHECK(ok && closed, mirror::Error, "cannot write " + path + ": " + std::strerror(err));
  MIRROR_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, mirror::Error,
               "cannot write " + path + ": " + std::strerror(errno));
}

void export_keras(const mirror::predict::CheckpointModel& ck, const std::string& path) {
  // Keras 3's load_weights picks the format by name: only *.weights.h5 is read as this layout.
  const std::string suffix = ".weights.h5";
  MIRROR_CHECK(path.size() >= suffix.size() &&
                   path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0,
               mirror::InvalidArgument,
               "--keras-weights " + path +
                   ": the name must end in .weights.h5, the only name Keras 3's load_weights "
                   "reads as this layout (a plain .h5 is read as Keras's legacy format)");
  const auto variables = mirror::train::to_keras_weights(ck.spec, ck.weights);
  mirror::train::write_keras_weights_file(path, variables);
  std::size_t count = 0;
  for (const auto& v : variables) count += v.values.size();
  std::cerr << "mirror-export: model '" << ck.spec.name() << "' weights (" << variables.size()
            << " Keras objects, " << count << " variables) from " << ck.file.string() << " -> "
            << path << "\n";
}

int run(const std::string& checkpoint, const std::string& onnx, const std::string& keras,
        const std::string& kind, bool allow_extra_tensors) {
  MIRROR_CHECK(!checkpoint.empty() && (!onnx.empty() || !keras.empty()), mirror::InvalidArgument,
               "--checkpoint and --onnx and/or --keras-weights are required (see mirror-export "
               "--help)");
  MIRROR_CHECK(kind == "logits" || kind == "probabilities", mirror::InvalidArgument,
               "--output-kind must be logits or probabilities, got '" + kind + "'");
  const mirror::predict::CheckpointModel ck = mirror::predict::load_checkpoint_model(checkpoint);
  // Built for both outputs: building checks the weights (names, shapes, finite values).
  mirror::nn::Sequential model =
      mirror::predict::build_model(ck, mirror::Device::cpu(), allow_extra_tensors);
  if (!keras.empty()) export_keras(ck, keras);
  if (onnx.empty()) return 0;
  mirror::onnx::ExportOptions options;
  options.probabilities = kind == "probabilities";
  options.sigmoid =
      mirror::predict::sigmoid_outputs(ck.spec, mirror::shape_numel(model.output_shape()));
  options.tokens = mirror::predict::input_spec(model).tokens;
  options.name = ck.spec.name();
  const mirror::onnx::Graph graph = mirror::onnx::export_onnx(model, options);
  write_file(onnx, mirror::onnx::serialize(graph, MIRROR_VERSION));
  std::cerr << "mirror-export: model '" << ck.spec.name() << "' (" << model.layers().size()
            << " layers, " << graph.nodes.size() << " ONNX nodes, opset " << graph.opset
            << ") from " << ck.file.string() << " -> " << onnx << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string checkpoint, onnx, keras, kind = "logits";
  bool allow_extra_tensors = false;
  po::options_description options(kAbout);
  options.add_options()("help,h", "show this help")(
      "checkpoint", po::value(&checkpoint),
      "a checkpoint file, or a --checkpoint-dir (its newest valid checkpoint)")(
      "onnx", po::value(&onnx), "the ONNX file to write")("keras-weights", po::value(&keras),
                                                          "the Keras .weights.h5 file to write")(
      "output-kind", po::value(&kind)->default_value("logits"),
      "logits, or probabilities (a Softmax at the end; a Sigmoid for a sigmoid head)")(
      "allow-extra-tensors", po::bool_switch(&allow_extra_tensors),
      "ignore checkpoint tensors the model spec does not have (an error otherwise)");
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(argc, argv).options(options).run();
    mirror::tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "mirror-export: " << e.what() << " (see mirror-export --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  try {
    return run(checkpoint, onnx, keras, kind, allow_extra_tensors);
  } catch (const mirror::InvalidArgument& e) {
    std::cerr << "mirror-export: error: " << e.what() << "\n";
    return 2;
  } catch (const mirror::DataError& e) {
    std::cerr << "mirror-export: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mirror-export: error: " << e.what() << "\n";
    return 1;
  }
}
