// mirror-predict: runs a trained checkpoint's model on new samples and writes its outputs as a
// float32 .npy [N, classes]. Under mpirun the batches are dealt to the ranks round-robin and
// rank 0 writes the one file, in input order. The engine is tools/predict.cpp.
#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "mirror/distributed/device_selection.h"
#include "mirror/distributed/runtime.h"
#include "mirror/error.h"
#include "tools/command_line.h"
#include "tools/predict.h"

namespace po = boost::program_options;
namespace pr = mirror::predict;

namespace {

constexpr const char* kAbout =
    "mirror-predict: the outputs of a trained model (a mirror-train checkpoint) on new samples.\n"
    "  mirror-predict --checkpoint run/ck --input x.npy --output y.npy\n"
    "  mpirun -np 2 mirror-predict --checkpoint run/ck/ckpt-000000000100.safetensors \\\n"
    "      --input-tokens sentences.txt --output-kind probabilities --output p.npy\n"
    "The model is rebuilt from the spec the checkpoint records and runs in inference mode\n"
    "(BatchNormalization's moving statistics, no dropout). Inputs: .npy/IDX float or uint8\n"
    "samples (uint8 scaled by 1/255 as in training), int32/int64 [N, T] token ids, a CSV of\n"
    "feature columns, token text, or images (--input-images). Output: float32 [N, outputs] in\n"
    "input order (and with --output-classes a CSV of each sample's class).\n"
    "Exit status: 0 done, 2 bad flags or input (the message says what was expected), 1 other.\n\n"
    "Options";

struct Flags {
  std::string checkpoint, input, input_csv, input_tokens, output, output_kind = "logits";
  std::vector<std::string> input_images;
  std::string output_classes;
  std::string label_column, input_shape;
  std::string data_format;  // empty: as the checkpoint's training read its arrays
  bool tokens_labeled = false;
  bool allow_extra_tensors = false;
  std::int64_t batch_size = 256;
  mirror::dist::DeviceRequest devices;
};

mirror::Shape parse_shape(const std::string& text) {
  mirror::Shape dims;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
    }
    MIRROR_CHECK(used == part.size() && v > 0, mirror::InvalidArgument,
                 "--input-shape '" + text +
                     "': expected positive integers separated by commas, "
                     "e.g. 1,28,28");
    dims.push_back(v);
    at = comma + 1;
  }
  return dims;
}

/// `raw`: uint8 arrays and images as stored, for a model that rescales its own input (Note [Raw
/// values]).
pr::Inputs read_inputs(const Flags& f, std::string& what, const pr::InputSpec& spec, bool raw,
                       std::vector<std::string>& files, const mirror::data::PhotoRecipe& photo) {
  const int given = !f.input.empty() + !f.input_csv.empty() + !f.input_tokens.empty() +
                    !f.input_images.empty();
  MIRROR_CHECK(given == 1, mirror::InvalidArgument,
               "give exactly one of --input, --input-csv, --input-tokens, --input-images (got " +
                   std::to_string(given) + ")");
  if (!f.input_images.empty()) {
    MIRROR_CHECK(f.input_shape.empty(), mirror::InvalidArgument,
                 "--input-shape does not apply to --input-images: images are resized to the "
                 "model's input");
    what = f.input_images.size() == 1 ? f.input_images.front() : "--input-images";
    // As the test split was: the checkpoint's --eval-resize and --normalize.
    return pr::read_image_input(f.input_images, spec, files, raw, photo);
  }
  MIRROR_CHECK(f.label_column.empty() || !f.input_csv.empty(), mirror::InvalidArgument,
               "--label-column applies to --input-csv only");
  if (!f.input.empty()) {
    what = f.input;
    return pr::read_array_input(f.input, !raw);
  }
  if (!f.input_csv.empty()) {
    what = f.input_csv;
    return pr::read_csv_input(f.input_csv, f.label_column);
  }
  what = f.input_tokens;
  return pr::read_token_input(f.input_tokens, f.tokens_labeled);
}

/// Runs `step` on every rank and agrees on its outcome: every rank reads the same files, so
/// they usually fail alike; one message (rank 0's, or the first failing rank's) is printed by
/// rank 0 and every rank gets the exit code, so no rank waits in a collective for another.
/// Returns 0 when every rank succeeded.
template <class F>
int agreed(mirror::dist::Runtime& rt, F&& step) {
  std::string error;
  int code = 0;
  try {
    step();
  } catch (const mirror::InvalidArgument& e) {
    error = e.what(), code = 2;
  } catch (const mirror::DataError& e) {
    error = e.what(), code = 2;
  } catch (const mirror::Error& e) {
    error = e.what(), code = 1;
  }
  for (const std::string& e : rt.all_gather_string(std::to_string(code) + ":" + error)) {
    if (e.rfind("0:", 0) == 0) continue;
    if (rt.world_rank() == 0) std::cerr << "mirror-predict: error: " << e.substr(2) << "\n";
    return e[0] - '0';
  }
  return 0;
}

/// Every rank predicts its share; rank 0 writes the gathered rows in input order.
int predict(mirror::dist::Runtime& rt, const Flags& f) {
  mirror::dist::DeviceSelection sel;
  if (int code = agreed(rt, [&] { sel = rt.setup_devices(f.devices); })) return code;
  if (!sel.warning.empty() && rt.world_rank() == 0) std::cerr << sel.warning;
  pr::CheckpointModel ck;
  pr::Inputs inputs;
  std::vector<std::string> files;  // --input-images: each sample's file
  mirror::nn::Sequential model;
  int code = agreed(rt, [&] {
    MIRROR_CHECK(!f.checkpoint.empty() && !f.output.empty(), mirror::InvalidArgument,
                 "--checkpoint and --output are required (see mirror-predict --help)");
    MIRROR_CHECK(f.output_kind == "logits" || f.output_kind == "probabilities",
                 mirror::InvalidArgument,
                 "--output-kind must be logits or probabilities, got '" + f.output_kind + "'");
    MIRROR_CHECK(f.batch_size >= 1, mirror::InvalidArgument,
                 "--batch-size must be >= 1, got " + std::to_string(f.batch_size));
    ck = pr::load_checkpoint_model(f.checkpoint);
    model = pr::build_model(ck, sel.devices.at(0), f.allow_extra_tensors);
    std::string what;
    const pr::InputSpec spec = pr::input_spec(model);
    inputs = read_inputs(f, what, spec, ck.spec.reads_raw_values(), files, ck.eval_transforms);
    // Image files are decoded [C, H, W]; arrays are laid out as --data-format says, by default
    // as in training.
    const mirror::nn::DataFormat format =
        f.data_format.empty() ? ck.data_format : mirror::nn::parse_data_format(f.data_format);
    MIRROR_CHECK(f.input_images.empty() || format == mirror::nn::DataFormat::kAuto ||
                     f.data_format.empty(),
                 mirror::InvalidArgument,
                 "--data-format is for array input; --input-images are decoded in the model's "
                 "layout");
    pr::prepare_inputs(inputs, model, what,
                       f.input_shape.empty() ? mirror::Shape{} : parse_shape(f.input_shape),
                       f.input_shape,
                       f.input_images.empty() ? format : mirror::nn::DataFormat::kChannelsFirst);
  });
  if (code) return code;
  const std::int64_t n = inputs.count(), r = rt.world_rank(), size = rt.world_size();
  const std::int64_t classes = mirror::shape_numel(model.output_shape());
  // Note [Predict batches]: the batches are the same whatever the number of ranks (rows
  // [k B, (k + 1) B)), dealt round-robin (batch k to rank k mod size), so every row meets the
  // same kernels with the same batch and the file is bit for bit that of one rank.
  const std::int64_t batches = (n + f.batch_size - 1) / f.batch_size;
  std::vector<float> mine;
  code = agreed(rt, [&] {
    for (std::int64_t k = r; k < batches; k += size) {
      const std::int64_t begin = k * f.batch_size, end = std::min(n, begin + f.batch_size);
      const std::vector<float> part = pr::run_model(model, inputs, begin, end, f.batch_size);
      mine.insert(mine.end(), part.begin(), part.end());
    }
    pr::apply_output_kind(mine, ck.spec, pr::class_axis(model), f.output_kind);
  });
  if (code) return code;
  const auto shares = rt.all_gather_string(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(float)));
  mirror::Shape shape = pr::written_output_shape(model);  // Note [Dense labels]
  shape.insert(shape.begin(), n);
  return agreed(rt, [&] {
    if (r != 0) return;
    std::vector<float> all;
    all.reserve(static_cast<std::size_t>(n * classes));
    std::vector<std::size_t> read(shares.size(), 0);  // floats taken from each rank's share
    for (std::int64_t k = 0; k < batches; ++k) {  // input order: batch k came from rank k % size
      const std::string& s = shares[static_cast<std::size_t>(k % size)];
      const auto rows = std::min(n, (k + 1) * f.batch_size) - k * f.batch_size;
      const auto* p = reinterpret_cast<const float*>(s.data()) + read[k % size];
      all.insert(all.end(), p, p + rows * classes);
      read[k % size] += static_cast<std::size_t>(rows * classes);
    }
    pr::write_npy(f.output, shape, all);
    if (!f.output_classes.empty()) {
      // A binary head's output is a logit unless it was turned into a probability.
      const bool probability = f.output_kind == "probabilities" || ck.spec.ends_in_sigmoid();
      pr::write_class_csv(f.output_classes, all, classes, ck.classes, files,
                          probability ? 0.5 : 0.0);
    }
    std::cerr << "mirror-predict: " << n << " samples -> " << f.output << " (" << f.output_kind
              << " " << mirror::shape_str(shape) << ", model '" << ck.spec.name() << "' from "
              << ck.file.string() << ", step " << ck.step << ")\n";
    if (!ck.classes.empty()) {
      std::cerr << "mirror-predict: classes (output order):";
      for (const auto& c : ck.classes) std::cerr << " " << c;
      std::cerr << "\n";
    }
    if (!f.output_classes.empty())
      std::cerr << "mirror-predict: predicted classes -> " << f.output_classes << "\n";
  });
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  po::options_description options(kAbout);
  options.add_options()("help,h", "show this help")(
      "checkpoint", po::value(&f.checkpoint),
      "a checkpoint file, or a --checkpoint-dir (its newest valid checkpoint)")(
      "input", po::value(&f.input), "samples: .npy or IDX [N, ...] (floats, uint8, or token ids)")(
      "input-csv", po::value(&f.input_csv), "samples: a CSV of numeric feature columns")(
      "label-column", po::value(&f.label_column),
      "with --input-csv: a column to drop (name or 0-based index), e.g. the training label")(
      "input-images", po::value(&f.input_images)->multitoken(),
      "samples: JPEG/PNG files or folders of them (every image below, sorted), or one set of tar "
      "shards (a .tar, a folder of them or a quoted glob: every image member), resized to the "
      "model's input as in training")(
      "output-classes", po::value(&f.output_classes),
      "also write a CSV: each sample (its file for images) and its predicted class (named when "
      "the checkpoint records class names, as a model trained on --train-images does)")(
      "input-tokens", po::value(&f.input_tokens),
      "samples: token text, one sequence of ids per line (0 = padding)")(
      "tokens-labeled", po::bool_switch(&f.tokens_labeled),
      "with --input-tokens: each line starts with a label (the training format); it is skipped")(
      "input-shape", po::value(&f.input_shape),
      "reshape each float sample, e.g. 1,28,28 (as mirror-train's --input-shape)")(
      "data-format", po::value(&f.data_format),
      "auto | channels_last | channels_first: how image arrays are laid out (default: as the "
      "checkpoint's training read them, mirror-train --data-format)")(
      "output", po::value(&f.output), "where to write the float32 .npy [N, outputs]")(
      "output-kind", po::value(&f.output_kind)->default_value("logits"),
      "logits (the model's outputs) or probabilities (their softmax; the sigmoid of a sigmoid or "
      "one-output head)")("batch-size", po::value(&f.batch_size)->default_value(256),
                          "samples per forward pass")(
      "allow-extra-tensors", po::bool_switch(&f.allow_extra_tensors),
      "ignore checkpoint tensors the model spec does not have (an error otherwise)")(
      "devices", po::value(&f.devices.devices)->default_value("auto"),
      "auto, gpu, gpu:N, cpu (as mirror-train; the first device of the rank runs)");
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(argc, argv).options(options).run();
    mirror::tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "mirror-predict: " << e.what() << " (see mirror-predict --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  return mirror::dist::run_main(argc, argv,
                                [&](mirror::dist::Runtime& rt) { return predict(rt, f); });
}
