// mirror-predict's engine: the checkpoint's model and the inputs (files read here), and batched
// inference in the evaluation's mode. Inputs are checked against the model before anything runs
// so that a wrong file is one message naming both sides, never a failure deep in a layer.
#include "tools/predict.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "mirror/data/arrays.h"
#include "mirror/data/csv.h"
#include "mirror/data/idx.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/tar_shards.h"
#include "mirror/data/npy.h"
#include "mirror/data/token_text.h"
#include "mirror/error.h"
#include "mirror/memory.h"
#include "mirror/ops.h"
#include "train/step_memory.h"

namespace mirror::predict {
namespace fs = std::filesystem;

namespace {

constexpr const char* kOptimizerPrefix = "optimizer/";

train::LoadedCheckpoint read_checkpoint(const std::string& path) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  MIRROR_CHECK(fs::exists(status), DataError,
               "cannot open checkpoint " + path + ": " + std::strerror(ec ? ec.value() : ENOENT) +
                   " (give a checkpoint file or the --checkpoint-dir of a mirror-train run)");
  if (!fs::is_directory(status)) return {0, path, train::read_safetensors(path)};
  train::CheckpointManager manager(path, 0);
  train::CheckpointScan scan = manager.scan();
  if (scan.found) return std::move(*scan.found);
  std::string why = path + " holds no valid checkpoint";
  if (scan.files == 0) why += ": no ckpt-*.safetensors file in it";
  for (const auto& [file, reason] : scan.rejected) why += "\n  " + file.string() + ": " + reason;
  throw DataError(why);
}

}  // namespace

CheckpointModel load_checkpoint_model(const std::string& path) {
  train::LoadedCheckpoint loaded = read_checkpoint(path);
  CheckpointModel out;
  out.file = loaded.path;
  const train::Metadata& meta = loaded.file.metadata;
  // Only the keys read here matter: others (a newer trainer's) are ignored.
  const auto model = meta.find("mirror.model");
  MIRROR_CHECK(model != meta.end(), DataError,
               out.file.string() +
                   " has no model spec (metadata 'mirror.model'): it was not written by "
                   "mirror-train, so the model cannot be rebuilt; predict with the program that "
                   "trained it");
  const auto json = nlohmann::json::parse(model->second, nullptr, false);
  try {
    MIRROR_CHECK(!json.is_discarded() && json.is_object(), InvalidArgument, "not a JSON object");
    out.spec = nn::ModelSpec::from_json(json, out.file.string() + " 'mirror.model'");
    MIRROR_CHECK(out.spec.bound(), InvalidArgument, "the spec is not bound to data");
  } catch (const Error& e) {
    throw DataError(out.file.string() +
                    ": its model description (metadata 'mirror.model') is not a model spec (" +
                    e.what() +
                    "); a checkpoint of a C++ Task that builds its own model cannot be rebuilt "
                    "here: predict with the program that trained it");
  }
  if (const auto classes = meta.find("mirror.classes"); classes != meta.end()) {
    const auto names = nlohmann::json::parse(classes->second, nullptr, false);
    MIRROR_CHECK(names.is_array(), DataError,
                 out.file.string() + ": metadata 'mirror.classes' is not a JSON list of names");
    for (const auto& n : names) {
      MIRROR_CHECK(n.is_string(), DataError,
                   out.file.string() + ": metadata 'mirror.classes' holds a non-string name");
      out.classes.push_back(n.get<std::string>());
    }
  }
  if (const auto config = meta.find("mirror.config"); config != meta.end()) {
    // Older checkpoints have no recipe; a recipe that no longer parses is a corrupt file.
    const auto c = nlohmann::json::parse(config->second, nullptr, false);
    try {
      if (c.is_object() && c.contains("normalize") && c["normalize"].is_string())
        data::parse_normalize(c["normalize"].get<std::string>(), out.eval_transforms);
      if (c.is_object() && c.contains("eval_resize") && c["eval_resize"].is_number_integer())
        out.eval_transforms.eval_resize = std::max(0, c["eval_resize"].get<int>());
      if (c.is_object() && c.contains("data_format") && c["data_format"].is_string())
        out.data_format = nn::parse_data_format(c["data_format"].get<std::string>());
    } catch (const InvalidArgument& e) {
      throw DataError(out.file.string() + ": metadata 'mirror.config': " + e.what());
    }
  }
  if (const auto step = meta.find("mirror.step"); step != meta.end()) {
    const std::string& text = step->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out.step);
    MIRROR_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() &&
                     out.step >= 0,
                 DataError,
                 out.file.string() + ": checkpoint metadata 'mirror.step' is '" +
                     text.substr(0, 40) +
                     "': expected an integer >= 0 (the checkpoint was edited or written by "
                     "another tool)");
  }
  // Note [Parameter floor] (src/train/step_memory.h): a spec stating a layer of 10^9 units is
  // refused with the estimate before the model is built, as mirror-train refuses it.
  const std::uint64_t floor = train::parameter_floor(out.spec.to_json());
  const auto budget = static_cast<std::uint64_t>(static_cast<double>(host_available_bytes()) *
                                                 kCpuGrowthCapFraction);
  train::check_step_memory(train::parameter_memory(floor, 1, 0), budget,
                           "90% of this host's MemAvailable",
                           "The model spec recorded in " + out.file.string() + " has at least " +
                               std::to_string(floor) +
                               " parameters: it was edited, or was trained on a larger machine");
  for (auto& [name, t] : loaded.file.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) != 0) out.weights.emplace(name, std::move(t));
  }
  return out;
}

nn::Sequential build_model(const CheckpointModel& checkpoint, Device device,
                           bool allow_extra_tensors) {
  nn::Sequential model = nn::make_model(checkpoint.spec, DType::kFloat32, device, 0);
  const std::string file = checkpoint.file.string();
  std::set<std::string> used;
  auto load = [&](const std::string& name, Tensor& value) {
    const auto it = checkpoint.weights.find(name);
    MIRROR_CHECK(it != checkpoint.weights.end(), DataError,
                 file + " lacks tensor '" + name +
                     "' of its own model spec (the file is "
                     "incomplete)");
    used.insert(name);
    MIRROR_CHECK(it->second.shape() == value.shape(), DataError,
                 file + ": tensor '" + name + "' is " + shape_str(it->second.shape()) +
                     " but the model spec needs " + shape_str(value.shape()));
    const std::int64_t bad = train::first_non_finite(it->second);
    MIRROR_CHECK(bad < 0, DataError,
                 file + ": tensor '" + name + "' holds a NaN or infinity (element " +
                     std::to_string(bad) +
                     "); its predictions would be meaningless. mirror-train never writes such a "
                     "checkpoint: this file was edited or corrupted after its checksum was made");
    if (it->second.dtype() == value.dtype()) {
      value.copy_from(it->second);
    } else {
      // A checkpoint kept in another precision (float16, bfloat16, float64): as float32.
      MIRROR_CHECK(is_floating(it->second.dtype()), DataError,
                   file + ": tensor '" + name + "' is " + it->second.str() +
                       ", not a floating-point weight");
      value.copy_from(ops::cast(it->second, value.dtype()));
    }
  };
  for (nn::Parameter* p : model.parameters()) load(p->name, p->value);
  for (nn::Buffer* b : model.buffers()) load(b->name, b->value);
  if (!allow_extra_tensors) {
    for (const auto& [name, t] : checkpoint.weights) {
      MIRROR_CHECK(used.count(name) != 0, DataError,
                   file + " holds tensor '" + name +
                       "', which its model spec does not have: the file does not match the "
                       "model it records (pass --allow-extra-tensors to ignore such tensors)");
    }
  }
  return model;
}

InputSpec input_spec(nn::Sequential& model) {
  InputSpec spec;
  spec.sample_shape = model.input_shape();
  for (auto& layer : model.layers()) {
    if (layer->kind() == "embedding") {
      spec.tokens = true;
      spec.vocab = layer->config().at("vocab").get<std::int64_t>();
      spec.sample_shape = {-1};  // any sequence length: the layers take the batch's T
      break;
    }
    if (layer->kind() != "masking") break;
  }
  return spec;
}

// ---------------------------------------------------------------- input files

Inputs read_array_input(const std::string& path, bool scale_uint8) {
  return array_input(data::parse_array_file(data::read_file_bytes(path), path), path, scale_uint8);
}

Inputs array_input(const data::NumericArray& a, const std::string& path, bool scale_uint8) {
  MIRROR_CHECK(!a.shape.empty(), DataError,
               path +
                   ": a scalar holds no samples; save an array [N, ...] with one sample per "
                   "row");
  Inputs in;
  in.shape = Shape(a.shape.begin(), a.shape.end());
  const std::int64_t n = a.numel();
  if (a.type == data::ElementType::kInt32 || a.type == data::ElementType::kInt64) {
    in.tokens = true;
    in.ids.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t id = a.integer(i);
      MIRROR_CHECK(id >= 0 && id < INT32_MAX, DataError,
                   path + ": token id " + std::to_string(id) + " at element " + std::to_string(i) +
                       " is outside [0, 2^31 - 1); ids must be >= 0 (0 = padding)");
      in.ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(id);
    }
    return in;
  }
  const double scale = a.type == data::ElementType::kUInt8 && scale_uint8 ? 1.0 / 255.0 : 1.0;
  in.floats.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = a.value(i) * scale;
    MIRROR_CHECK(std::isfinite(v), DataError,
                 path + ": element " + std::to_string(i) + " is " + std::to_string(v) +
                     "; inputs must be finite numbers");
    in.floats[static_cast<std::size_t>(i)] = static_cast<float>(v);
  }
  return in;
}

Inputs read_image_input(const std::vector<std::string>& paths, const InputSpec& spec,
                        std::vector<std::string>& files, bool raw,
                        const data::PhotoRecipe& transforms) {
  const Shape& s = spec.sample_shape;
  MIRROR_CHECK(!spec.tokens && s.size() == 3 && (s[0] == 1 || s[0] == 3) && s[1] > 0 && s[2] > 0,
               InvalidArgument,
               "--input-images: the checkpoint's model reads " +
                   (spec.tokens ? std::string("token ids") : "samples " + shape_str(s)) +
                   ", not images [1 or 3 channels, height, width]");
  data::ImageFolderOptions o;
  o.height = static_cast<int>(s[1]);
  o.width = static_cast<int>(s[2]);
  o.color = s[0] == 1 ? data::ColorMode::kGrayscale : data::ColorMode::kRgb;
  o.check_threads = 4;
  o.scale_to_unit = !raw;  // Note [Raw values]: a Rescaling model takes 0..255
  o.photo = transforms;
  o.evaluation = true;
  const auto ds = paths.size() == 1 && data::is_tar_shards(paths.front())
                      ? data::load_tar_shard_images(paths.front(), o)
                      : data::load_image_files(paths, o);
  Inputs in;
  in.shape = {ds->size(), s[0], s[1], s[2]};
  const std::int64_t per = shape_numel(s);
  in.floats.resize(static_cast<std::size_t>(ds->size() * per));
  files.clear();
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    ds->decode_float(i, in.floats.data() + i * per);
    files.push_back(data::image_file_of(*ds, i));
  }
  return in;
}

void write_class_csv(const std::string& path, const std::vector<float>& outputs,
                     std::int64_t classes, const std::vector<std::string>& class_names,
                     const std::vector<std::string>& names, double binary_threshold) {
  std::string text = "sample,class\n";
  const std::int64_t rows = classes > 0 ? static_cast<std::int64_t>(outputs.size()) / classes : 0;
  const bool binary = classes == 1;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* v = outputs.data() + r * classes;
    const auto best = binary ? static_cast<std::ptrdiff_t>(v[0] > binary_threshold)
                             : std::max_element(v, v + classes) - v;
    const bool named = static_cast<std::int64_t>(class_names.size()) == (binary ? 2 : classes);
    text += (r < static_cast<std::int64_t>(names.size()) ? names[static_cast<std::size_t>(r)]
                                                         : std::to_string(r)) +
            "," + (named ? class_names[static_cast<std::size_t>(best)] : std::to_string(best)) +
            "\n";
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MIRROR_CHECK(f != nullptr, Error, "cannot write " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  MIRROR_CHECK(ok && closed, Error, "cannot write " + path + ": " + std::strerror(errno));
}

namespace {

std::string read_text(const std::string& path) {
  const std::vector<std::uint8_t> bytes = data::read_file_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool parse_float(std::string_view cell, float& value) {
  cell = trim(cell);
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  return !cell.empty() && ec == std::errc() && end == cell.data() + cell.size() &&
         std::isfinite(value);
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t end = std::min(line.find(sep, at), line.size());
    out.push_back(line.substr(at, end - at));
    if (end == line.size()) return out;
    at = end + 1;
  }
}

}  // namespace

Inputs read_csv_input(const std::string& path, const std::string& label_column) {
  Inputs in;
  if (!label_column.empty()) {
    // The training format: the data layer's reader drops the label column with every check.
    data::CsvOptions o;
    o.label_column = label_column;
    o.float_targets = true;  // any number in the label column is accepted (and ignored)
    const auto ds = data::load_csv(path, o);
    const std::int64_t features = shape_numel(ds->sample_shape());
    in.shape = {ds->size(), features};
    in.floats.resize(static_cast<std::size_t>(ds->size() * features));
    for (std::int64_t i = 0; i < ds->size(); ++i)
      ds->decode_float(i, in.floats.data() + i * features);
    return in;
  }
  const std::string text = read_text(path);
  std::istringstream lines(text);
  std::string line;
  std::int64_t number = 0, columns = -1, rows = 0;
  while (std::getline(lines, line)) {
    ++number;
    std::string_view view = trim(line);
    if (number == 1 && view.substr(0, 3) == "\xEF\xBB\xBF") view.remove_prefix(3);
    if (view.empty()) continue;
    const auto cells = split(view, ',');
    std::vector<float> values(cells.size());
    bool numeric = true;
    for (std::size_t c = 0; c < cells.size() && numeric; ++c)
      numeric = parse_float(cells[c], values[c]);
    if (!numeric && columns < 0 && rows == 0) {  // a header row
      columns = static_cast<std::int64_t>(cells.size());
      continue;
    }
    for (std::size_t c = 0; c < cells.size(); ++c) {
      MIRROR_CHECK(parse_float(cells[c], values[c]), DataError,
                   path + ", line " + std::to_string(number) + ", column " + std::to_string(c) +
                       ": '" + std::string(trim(cells[c])).substr(0, 40) +
                       "' is not a finite number (every column is a feature; drop a label "
                       "column with --label-column)");
    }
    if (columns < 0) columns = static_cast<std::int64_t>(cells.size());
    MIRROR_CHECK(static_cast<std::int64_t>(cells.size()) == columns, DataError,
                 path + ", line " + std::to_string(number) + ": " + std::to_string(cells.size()) +
                     " fields, the first row has " + std::to_string(columns));
    in.floats.insert(in.floats.end(), values.begin(), values.end());
    ++rows;
  }
  MIRROR_CHECK(rows > 0, DataError, path + ": the CSV file has no data row");
  in.shape = {rows, columns};
  return in;
}

Inputs read_token_input(const std::string& path, bool labeled) {
  std::vector<std::vector<std::int32_t>> seqs;
  if (labeled) {
    const auto ds = data::load_token_text(path);
    for (std::int64_t i = 0; i < ds->size(); ++i) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(ds->length(i)));
      ds->decode_tokens(i, ids.data(), ds->length(i));
      seqs.push_back(std::move(ids));
    }
  } else {
    const std::string text = read_text(path);
    std::istringstream lines(text);
    std::string line;
    std::int64_t number = 0;
    while (std::getline(lines, line)) {
      ++number;
      std::istringstream fields(line);
      std::vector<std::int32_t> ids;
      std::string field;
      while (fields >> field) {
        std::int64_t id = -1;
        const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), id);
        MIRROR_CHECK(
            ec == std::errc() && end == field.data() + field.size() && id >= 0 && id < INT32_MAX,
            DataError,
            path + ", line " + std::to_string(number) + ": '" + field.substr(0, 40) +
                "' is not a token id (an integer >= 0); lines hold ids only (with a "
                "label first, pass --tokens-labeled)");
        ids.push_back(static_cast<std::int32_t>(id));
      }
      if (!ids.empty()) seqs.push_back(std::move(ids));
    }
  }
  MIRROR_CHECK(!seqs.empty(), DataError, path + ": no sequence (one line of token ids each)");
  std::size_t width = 0;
  for (const auto& s : seqs) width = std::max(width, s.size());
  Inputs in;
  in.tokens = true;
  in.shape = {static_cast<std::int64_t>(seqs.size()), static_cast<std::int64_t>(width)};
  in.ids.assign(seqs.size() * width, 0);
  for (std::size_t i = 0; i < seqs.size(); ++i)
    std::copy(seqs[i].begin(), seqs[i].end(), in.ids.begin() + static_cast<long>(i * width));
  return in;
}

void reshape_samples(Inputs& inputs, const Shape& shape) {
  const Shape sample(inputs.shape.begin() + 1, inputs.shape.end());
  MIRROR_CHECK(shape_numel(shape) == shape_numel(sample), InvalidArgument,
               "--input-shape " + shape_str(shape) + " has " + std::to_string(shape_numel(shape)) +
                   " elements, the input's samples " + shape_str(sample) + " have " +
                   std::to_string(shape_numel(sample)));
  const std::int64_t count = inputs.count();  // read before the shape is replaced
  inputs.shape = shape;
  inputs.shape.insert(inputs.shape.begin(), sample.empty() ? 0 : count);
}

void pad_tokens(Inputs& inputs, std::int64_t steps) {
  if (!inputs.tokens || inputs.shape.size() != 2 || inputs.shape[1] >= steps) return;
  const std::int64_t n = inputs.shape[0], t = inputs.shape[1];
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * steps), 0);
  for (std::int64_t i = 0; i < n; ++i)
    std::copy(inputs.ids.begin() + i * t, inputs.ids.begin() + (i + 1) * t,
              ids.begin() + i * steps);
  inputs.ids = std::move(ids);
  inputs.shape[1] = steps;
}

void check_inputs(const Inputs& inputs, const InputSpec& spec, const std::string& what,
                  const std::string& reshaped_by) {
  const Shape sample(inputs.shape.begin() + 1, inputs.shape.end());
  MIRROR_CHECK(inputs.tokens == spec.tokens, InvalidArgument,
               what + " holds " + (inputs.tokens ? "integer token ids" : "float values") +
                   " but the checkpoint's model reads " +
                   (spec.tokens ? "token ids (int32/int64 .npy [N, T] or --input-tokens)"
                                : "float samples " + shape_str(spec.sample_shape)));
  bool fits = sample.size() == spec.sample_shape.size();
  for (std::size_t i = 0; fits && i < sample.size(); ++i)
    fits = spec.sample_shape[i] < 0 || spec.sample_shape[i] == sample[i];
  std::string hint;
  if (!spec.tokens && shape_numel(sample) == shape_numel(spec.sample_shape)) {
    std::string want;
    for (std::size_t i = 0; i < spec.sample_shape.size(); ++i)
      want += (i ? "," : "") + std::to_string(spec.sample_shape[i]);
    hint = reshaped_by.empty()
               ? "; the element counts agree: pass --input-shape " + want + " to reshape"
               : " after --input-shape " + reshaped_by + "; pass --input-shape " + want +
                     " instead";
  }
  MIRROR_CHECK(fits, InvalidArgument,
               what + ": the checkpoint's model expects samples of shape " +
                   shape_str(spec.sample_shape) + " but found " + shape_str(sample) + " (" +
                   std::to_string(inputs.count()) + " samples)" + hint);
  MIRROR_CHECK(inputs.count() > 0, InvalidArgument, what + " holds no sample");
  if (!spec.tokens) return;
  const std::int64_t t = sample[0];
  for (std::int64_t i = 0; i < inputs.count(); ++i) {
    bool any = false;
    for (std::int64_t s = 0; s < t; ++s) {
      const std::int32_t id = inputs.ids[static_cast<std::size_t>(i * t + s)];
      MIRROR_CHECK(id < spec.vocab, DataError,
                   what + ": token id " + std::to_string(id) + " of sample " + std::to_string(i) +
                       ", step " + std::to_string(s) +
                       " is outside the checkpoint's vocabulary [0, " + std::to_string(spec.vocab) +
                       "); map unknown words to an id the model was trained with");
      any = any || id != 0;
    }
    MIRROR_CHECK(any, DataError,
                 what + ": sample " + std::to_string(i) +
                     " has no token (every id is 0, the padding id); remove the row");
  }
}

// ---------------------------------------------------------------- inference

std::vector<float> run_model(nn::Sequential& model, const Inputs& inputs, std::int64_t begin,
                             std::int64_t end, std::int64_t batch_size) {
  MIRROR_CHECK(batch_size >= 1, InvalidArgument,
               "--batch-size must be >= 1, got " + std::to_string(batch_size));
  const Shape sample(inputs.shape.begin() + 1, inputs.shape.end());
  const std::int64_t per = shape_numel(sample), out_per = shape_numel(model.output_shape());
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>((end - begin) * out_per));
  for (std::int64_t b = begin; b < end; b += batch_size) {
    const std::int64_t n = std::min(batch_size, end - b);
    Shape shape = sample;
    shape.insert(shape.begin(), n);
    nn::ForwardContext ctx;  // training = false: moving statistics, no dropout
    Tensor x;
    if (inputs.tokens) {
      const auto* src = inputs.ids.data() + b * per;
      x = Tensor::from_vector(std::vector<std::int32_t>(src, src + n * per), shape);
      // The loader's lengths (last non-zero id + 1), which every sequence layer reads.
      for (std::int64_t i = 0; i < n; ++i) {
        std::int32_t len = 1;
        for (std::int64_t s = 0; s < per; ++s)
          if (src[i * per + s] != 0) len = static_cast<std::int32_t>(s + 1);
        ctx.lengths.push_back(len);
      }
    } else {
      const auto* src = inputs.floats.data() + b * per;
      x = Tensor::from_vector(std::vector<float>(src, src + n * per), shape);
    }
    const Tensor y = model.forward(x.to(model.device()), ctx).to(Device::cpu());
    const auto values = y.to_vector<float>();
    const Shape& o = model.output_shape();
    if (written_output_shape(model) == o) {
      out.insert(out.end(), values.begin(), values.end());
      continue;
    }
    // A Keras model's image output [K, H, W] is written as [H, W, K].
    const std::int64_t k = o[0], hw = o[1] * o[2];
    for (std::int64_t i = 0; i < n; ++i) {
      const float* src = values.data() + i * k * hw;
      for (std::int64_t p = 0; p < hw; ++p) {
        for (std::int64_t c = 0; c < k; ++c) out.push_back(src[c * hw + p]);
      }
    }
  }
  return out;
}

bool sigmoid_outputs(const nn::ModelSpec& spec, std::int64_t outputs) {
  return spec.sigmoid_folded() || outputs == 1;
}

void apply_output_kind(std::vector<float>& values, const nn::ModelSpec& spec,
                       std::int64_t outputs, const std::string& output_kind) {
  if (output_kind == "probabilities")
    to_probabilities(values, outputs, sigmoid_outputs(spec, outputs));
}

Shape written_output_shape(const nn::Sequential& model) {
  const Shape& s = model.output_shape();
  if (model.channels_last_input() && s.size() == 3) return {s[1], s[2], s[0]};
  return s;
}

ClassAxis class_axis(const nn::Sequential& model) {
  const Shape& s = model.output_shape();
  ClassAxis a;
  if (s.size() == 3) {  // [K, H, W], written as [H, W, K] for a Keras model
    a.classes = s[0];
    a.stride = model.channels_last_input() ? 1 : s[1] * s[2];
  } else {
    a.classes = s.size() >= 2 ? s.back() : shape_numel(s);
  }
  return a;
}

void apply_output_kind(std::vector<float>& values, const nn::ModelSpec& spec, ClassAxis axis,
                       const std::string& output_kind) {
  if (axis.stride == 1) return apply_output_kind(values, spec, axis.classes, output_kind);
  if (output_kind != "probabilities") return;
  // Classes on the channel axis of [K, H, W]: gathered per pixel, turned, put back.
  const auto block = static_cast<std::size_t>(axis.classes * axis.stride);
  std::vector<float> pixel(static_cast<std::size_t>(axis.classes));
  for (std::size_t b = 0; b + block <= values.size(); b += block) {
    for (std::int64_t p = 0; p < axis.stride; ++p) {
      for (std::int64_t c = 0; c < axis.classes; ++c)
        pixel[static_cast<std::size_t>(c)] =
            values[b + static_cast<std::size_t>(c * axis.stride + p)];
      apply_output_kind(pixel, spec, axis.classes, output_kind);
      for (std::int64_t c = 0; c < axis.classes; ++c)
        values[b + static_cast<std::size_t>(c * axis.stride + p)] =
            pixel[static_cast<std::size_t>(c)];
    }
  }
}

namespace {

/// Note [Keras's image layout] (mirror/nn/models.h): [N, H, W, C] images (a channels_last
/// model's, or any image model's under channels_last) become [N, C, H, W], as mirror-train reads
/// them (nn::samples_channels_last decides for both).
void channels_first_samples(Inputs& inputs, const nn::Sequential& model, nn::DataFormat format,
                            const std::string& what) {
  if (inputs.tokens) return;
  const Shape sample(inputs.shape.begin() + (inputs.shape.empty() ? 0 : 1), inputs.shape.end());
  try {
    if (!nn::samples_channels_last(format, model.channels_last_input(), model.input_shape(),
                                   sample))
      return;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(what + ": " + e.what());
  }
  const std::int64_t n = inputs.shape[0], h = inputs.shape[1], w = inputs.shape[2],
                     c = inputs.shape[3];
  std::vector<float> out(inputs.floats.size());
  for (std::int64_t s = 0; s < n; ++s) {
    const float* src = inputs.floats.data() + s * h * w * c;
    float* dst = out.data() + s * h * w * c;
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t p = 0; p < h * w; ++p) dst[ch * h * w + p] = src[p * c + ch];
    }
  }
  inputs.floats = std::move(out);
  inputs.shape = {n, c, h, w};
}

}  // namespace

void prepare_inputs(Inputs& inputs, nn::Sequential& model, const std::string& what,
                    const Shape& input_shape, const std::string& reshaped_by,
                    nn::DataFormat format) {
  if (!input_shape.empty()) reshape_samples(inputs, input_shape);
  channels_first_samples(inputs, model, format, what);
  if (model.keras_masks() && inputs.tokens) {
    // Training refuses longer sequences (fixed_length); predicting on them would read steps
    // the model never saw.
    const std::int64_t steps = model.input_shape().at(0);
    MIRROR_CHECK(steps <= 0 || inputs.shape.size() != 2 || inputs.shape[1] <= steps,
                 InvalidArgument,
                 what + " holds sequences of " + std::to_string(inputs.shape[1]) +
                     " tokens, but the model reads " + std::to_string(steps) +
                     " (its input length, as in training): shorten them to " +
                     std::to_string(steps) + " tokens");
    pad_tokens(inputs, steps);
  }
  check_inputs(inputs, input_spec(model), what, reshaped_by);
}

void to_probabilities(std::vector<float>& values, std::int64_t classes, bool sigmoid) {
  if (sigmoid) {
    for (float& v : values) v = static_cast<float>(1.0 / (1.0 + std::exp(-double(v))));
    return;
  }
  for (std::size_t row = 0; row + static_cast<std::size_t>(classes) <= values.size();
       row += static_cast<std::size_t>(classes)) {
    float* v = values.data() + row;
    const double top = *std::max_element(v, v + classes);
    double sum = 0;
    for (std::int64_t c = 0; c < classes; ++c) sum += std::exp(double(v[c]) - top);
    for (std::int64_t c = 0; c < classes; ++c)
      v[c] = static_cast<float>(std::exp(double(v[c]) - top) / sum);
  }
}

void write_npy(const std::string& path, const Shape& shape, const std::vector<float>& values) {
  data::NumericArray a;
  a.type = data::ElementType::kFloat32;
  a.shape = std::vector<std::int64_t>(shape.begin(), shape.end());
  a.bytes.resize(values.size() * sizeof(float));
  std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  const std::vector<std::uint8_t> bytes = data::encode_npy(a);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MIRROR_CHECK(f != nullptr, Error, "cannot write " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) std::remove(tmp.c_str());
  MIRROR_CHECK(ok && closed, Error, "cannot write " + path + ": " + std::strerror(err));
  MIRROR_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, Error,
               "cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace mirror::predict
