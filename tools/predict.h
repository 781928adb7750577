// defines: the engine of mirror-predict (and the model half of mirror-export): a model rebuilt
// from a checkpoint's recorded spec and weights, the prediction inputs read from .npy, CSV or
// token-text files and checked against the model, batched inference, and the .npy writer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "mirror/data/numeric_array.h"
#include "mirror/data/photo_transforms.h"
#include "mirror/nn/image_layout.h"
#include "mirror/nn/models.h"
#include "mirror/train/checkpoint.h"

namespace mirror::predict {

/// A checkpoint's model: the bound spec it recorded ('mirror.model') and its weights.
struct CheckpointModel {
  std::filesystem::path file;   // the checkpoint that was read
  std::int64_t step = 0;        // 'mirror.step' (0 when absent)
  nn::ModelSpec spec;           // bound
  train::NamedTensors weights;  // parameters and buffers (no optimizer state)
  std::vector<std::string> classes;  // 'mirror.classes': an image folder's class names, or empty
  /// The evaluation half of the photograph recipe the model was trained with ('mirror.config's
  /// normalize and eval_resize): --input-images are transformed as its test split was.
  data::PhotoRecipe eval_transforms;
  /// 'mirror.config' data_format: how training read image arrays (--data-format).
  nn::DataFormat data_format = nn::DataFormat::kAuto;
};

/// Reads FILE, or the newest valid checkpoint of DIR (each corrupt one skipped is listed in the
/// error when none is valid). Error (with the system's reason) for a missing path; DataError for
/// a corrupt file or one without a model spec (a C++ Task's checkpoint, or another tool's).
CheckpointModel load_checkpoint_model(const std::string& path);

/// Builds the spec on `device` and loads the checkpoint's weights and moving statistics into it;
/// DataError naming the tensor when one is missing, has another shape or holds a NaN or
/// infinity, and (unless `allow_extra_tensors`) when the file holds a tensor the spec lacks.
nn::Sequential build_model(const CheckpointModel& checkpoint, Device device = Device::cpu(),
                           bool allow_extra_tensors = false);

/// What the model reads: one sample's shape, token ids or floats, and the vocabulary.
struct InputSpec {
  Shape sample_shape;  // [C, H, W], [T, F], [F] or [T] (ids); -1 = any
  bool tokens = false;
  std::int64_t vocab = 0;  // token models: ids lie in [0, vocab)
};
InputSpec input_spec(nn::Sequential& model);

/// Samples to predict: float32 values or int32 token ids, [count, sample...] row-major.
struct Inputs {
  Shape shape;  // with the sample count first
  bool tokens = false;
  std::vector<float> floats;
  std::vector<std::int32_t> ids;
  std::int64_t count() const { return shape.empty() ? 0 : shape[0]; }
};

/// A .npy or IDX file (gzip accepted): uint8 is scaled by 1/255 as mirror-train does, other
/// numbers are read as floats; int32/int64 [N, T] are token ids.
/// `scale_uint8` false: uint8 as stored, for a model that reads raw values (Note [Raw values]).
Inputs read_array_input(const std::string& path, bool scale_uint8 = true);
/// The same for an array already in memory (the Python module's NumPy input); `name` is used
/// in errors.
Inputs array_input(const data::NumericArray& array, const std::string& name,
                   bool scale_uint8 = true);
/// A CSV of numeric feature columns (a header row is detected as in training); `label_column`
/// (a name or 0-based index) is dropped when given, so a training file can be used as is.
Inputs read_csv_input(const std::string& path, const std::string& label_column);
/// Images (files, or folders: every .jpg/.jpeg/.png below them, in sorted path order) decoded
/// as mirror-train's image folders are, to the model's input: [C, H, W] with C 1 (grayscale) or
/// 3 (RGB). `files` receives each sample's file. InvalidArgument when the model does not read
/// images; DataError naming the file (and its index) for a bad image. `transforms`: the
/// evaluation resize + centre crop and normalisation (CheckpointModel::eval_transforms).
Inputs read_image_input(const std::vector<std::string>& paths, const InputSpec& spec,
                        std::vector<std::string>& files, bool raw = false,
                        const data::PhotoRecipe& transforms = {});
/// Writes "sample,class" lines: each row's arg-max class, named by `class_names` when it has
/// one name per output; `names` (one per row, e.g. the image files) or the row index names the
/// sample. One output is a binary head (Note [Binary heads]): class 1 when the output is above
/// `binary_threshold` (0 for a logit, 0.5 for a probability), named by two class names.
void write_class_csv(const std::string& path, const std::vector<float>& outputs,
                     std::int64_t classes, const std::vector<std::string>& class_names,
                     const std::vector<std::string>& names, double binary_threshold = 0.0);
/// Token text: one sequence per line, ids separated by spaces or tabs, padded with 0 to the
/// longest line; `labeled` skips the first field (the training format "label id id ...").
Inputs read_token_input(const std::string& path, bool labeled);

/// Reshapes float samples to `shape` (mirror-train's --input-shape): InvalidArgument when the
/// element counts differ.
void reshape_samples(Inputs& inputs, const Shape& shape);
/// Token ids padded with trailing zeros to at least `steps` per sample (Note [Sequence masks]: a
/// Keras model sees its sequences at the length it was trained with).
void pad_tokens(Inputs& inputs, std::int64_t steps);
/// InvalidArgument naming what the model expects and what the input holds (the sample shape,
/// ids versus floats); DataError for a token id outside the vocabulary or an all-padding row.
/// `reshaped_by`: the --input-shape the samples were given, if any (named in the message).
void check_inputs(const Inputs& inputs, const InputSpec& spec, const std::string& what,
                  const std::string& reshaped_by = "");
/// mirror-predict's steps between reading the samples and running `model`, which the Python
/// module shares: `input_shape` when given (`reshaped_by`: how the caller named it, for the
/// messages), a Keras model's token ids padded to its input length (Note [Sequence masks]),
/// then check_inputs.
/// `format`: how the samples are laid out (--data-format; image files are decoded [C, H, W]).
void prepare_inputs(Inputs& inputs, nn::Sequential& model, const std::string& what,
                    const Shape& input_shape, const std::string& reshaped_by,
                    nn::DataFormat format = nn::DataFormat::kAuto);

/// The model's outputs for samples [begin, end) in batches of `batch_size`: inference mode
/// (BatchNormalization's moving statistics, no dropout); token sequences get their lengths
/// (last non-zero id + 1) as in training. Returns [end - begin, output...] row-major floats.
std::vector<float> run_model(nn::Sequential& model, const Inputs& inputs, std::int64_t begin,
                             std::int64_t end, std::int64_t batch_size);

/// Softmax over each row of `classes` values, in double; with `sigmoid`, the sigmoid of each value
/// instead (Note [Folded sigmoid]: a binary or multi-label head, see sigmoid_outputs).
void to_probabilities(std::vector<float>& values, std::int64_t classes, bool sigmoid);
/// Whether a model's probabilities are the sigmoid of each output rather than a softmax: its
/// sigmoid was folded into binary cross-entropy, or it has one output (a binary logit, whose
/// softmax would be 1 whatever the input).
bool sigmoid_outputs(const nn::ModelSpec& spec, std::int64_t outputs);
/// `values` (rows of `outputs` logits) left as they are for `output_kind` "logits", or turned
/// into probabilities: the softmax of each row, or each output's sigmoid (sigmoid_outputs).
void apply_output_kind(std::vector<float>& values, const nn::ModelSpec& spec,
                       std::int64_t outputs, const std::string& output_kind);

/// Note [Dense labels] (mirror/data/dataset.h): the shape mirror-predict writes per sample: the
/// model's output ([K], [T, K] per step), with an image output [K, H, W] as Keras's [H, W, K] for
/// a channels_last (Keras) model; run_model returns its values in this layout.
Shape written_output_shape(const nn::Sequential& model);
/// The softmax axis of that shape: rows of `classes` values `stride` apart (stride 1 but for a
/// Mirror image output [K, H, W], whose classes are H * W apart).
struct ClassAxis {
  std::int64_t classes = 1, stride = 1;
};
ClassAxis class_axis(const nn::Sequential& model);
/// apply_output_kind over `axis`: the softmax of each step's or pixel's classes.
void apply_output_kind(std::vector<float>& values, const nn::ModelSpec& spec, ClassAxis axis,
                       const std::string& output_kind);

/// Writes a float32 .npy; Error naming the file and the system's reason when it cannot.
void write_npy(const std::string& path, const Shape& shape, const std::vector<float>& values);

}  // namespace mirror::predict
