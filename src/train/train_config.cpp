// TrainConfig <-> JSON (the --config file) and its validation.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <type_traits>

#include "mirror/data/augment.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/photo_transforms.h"
#include "mirror/error.h"
#include "mirror/json_input.h"
#include "mirror/memory.h"
#include "mirror/nn/models.h"
#include "mirror/nn/image_layout.h"
#include "mirror/precision.h"
#include "mirror/train/tensorboard.h"
#include "mirror/train/trainer.h"

namespace mirror::train {
namespace {

void validate_data_files(const TrainConfig& c) {
  auto require = [](bool ok, const std::string& message) {
    MIRROR_CHECK(ok, InvalidArgument, message);
  };
  const int train_kinds = !c.train_x.empty() + !c.train_csv.empty() + !c.train_tokens.empty() +
                          !c.train_images.empty();
  const int test_kinds = !c.test_x.empty() + !c.test_csv.empty() + !c.test_tokens.empty() +
                         !c.test_images.empty();
  require(train_kinds <= 1,
          "give one training data kind: --train-x/--train-y, --train-csv, --train-tokens or "
          "--train-images, not several");
  require(test_kinds <= 1,
          "give one test data kind: --test-x/--test-y, --test-csv, --test-tokens or "
          "--test-images, not several");
  require(c.test_images.empty() || !c.train_images.empty(),
          "--test-images goes with --train-images (the classes come from the training folder)");
  require(c.train_images.empty() || c.num_classes == 0,
          "--num-classes does not apply to --train-images: the classes are its subfolders");
  const bool images = !c.train_images.empty();
  require(images || (c.image_size.empty() && c.color == "auto" && c.decode == "cpu"),
          "--image-size, --color and --decode apply to image folders (--train-images)");
  c.parsed_image_size();  // throws for bad text
  const data::PhotoRecipe photo = c.parsed_photo_recipe();
  require(images || !photo.enabled(),
          "--crop, --flip, --normalize and --eval-resize apply to image folders (--train-images)");
  require(!photo.enabled() || !c.image_size.empty(),
          "the photograph recipe (" + data::describe(photo) +
              ") resizes to the model's input size: give --image-size HEIGHT,WIDTH");
  require(!photo.training_random() || c.augment == "none",
          "give --augment or the photograph recipe's --crop/--flip, not both (--augment " +
              c.augment + ")");
  require(c.eval_resize >= 0 && c.eval_resize <= 32768 && c.eval_crop >= 0,
          "--eval-resize and --eval-crop must be pixels (1 to 32768)");
  require(c.eval_crop == 0 || c.eval_resize > 0, "--eval-crop goes with --eval-resize");
  if (c.eval_resize > 0 && !c.image_size.empty()) {
    // torchvision would pad a crop larger than the resized image with zeros; that is a mistake.
    const auto [h, w] = c.parsed_image_size();
    require(c.eval_resize >= std::max(h, w),
            "--eval-resize " + std::to_string(c.eval_resize) +
                " is smaller than the centre crop (--image-size " + c.image_size +
                "): the short side must be at least the crop, e.g. --eval-resize 256 for 224");
  }
  if (c.eval_crop > 0) {
    const auto [h, w] = c.parsed_image_size();
    require(c.eval_crop == h && c.eval_crop == w,
            "--eval-crop " + std::to_string(c.eval_crop) +
                " must be the model's input size (--image-size " + c.image_size +
                "): the centre crop is what the model reads");
  }
  data::parse_color_mode(c.color);
  data::parse_decode_device(c.decode);
  require(c.data_workers >= 0 && c.data_workers <= 64,
          "--data-workers must be from 0 (automatic) to 64, got " + std::to_string(c.data_workers));
  require(c.train_x.empty() == c.train_y.empty(), "--train-x and --train-y go together");
  require(c.test_x.empty() == c.test_y.empty(), "--test-x and --test-y go together");
  require(test_kinds == 0 || train_kinds == 1,
          "test files need training files too (--train-x/--train-y, --train-csv, "
          "--train-tokens or --train-images)");
  require(c.csv_header == "auto" || c.csv_header == "yes" || c.csv_header == "no",
          "--csv-header must be auto, yes or no, got '" + c.csv_header + "'");
  require(c.num_classes >= 0, "--num-classes must be >= 0 (0: from the labels)");
  require(c.num_classes == 0 || train_kinds == 1,
          "--num-classes applies to data files (--train-x, --train-csv, --train-tokens)");
  require(c.input_shape.empty() || !c.train_x.empty() || !c.own_data(),
          "--input-shape applies to array files (--train-x/--train-y) and the built-in images");
  require(c.label_column.empty() || !c.train_csv.empty(),
          "--label-column applies to CSV files (--train-csv)");
  c.parsed_input_shape();  // throws for bad text
}

constexpr int kMaxThreads = 1024;
constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void check_batch_flag(const char* flag, std::int64_t value) {
  MIRROR_CHECK(value > 0, InvalidArgument,
               "--" + std::string(flag) + " must be a positive number of samples, got " +
                   std::to_string(value));
}

void check_weight_decay_flag(double value) {
  MIRROR_CHECK(std::isfinite(value) && value >= 0, InvalidArgument,
               "--weight-decay must be >= 0 (0 = none), got " + std::to_string(value));
}

std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  MIRROR_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(),
               InvalidArgument,
               "--seed must be a whole number from 0 to 18446744073709551615, got '" +
                   quote_input(text) + "'");
  return seed;
}

bool TrainConfig::own_data() const {
  return !train_x.empty() || !train_csv.empty() || !train_tokens.empty() || !train_images.empty();
}

std::pair<int, int> TrainConfig::parsed_image_size() const {
  if (image_size.empty()) return {0, 0};
  int h = 0, w = 0;
  const std::size_t comma = image_size.find(',');
  auto number = [](std::string_view t, int& v) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return !t.empty() && ec == std::errc() && end == t.data() + t.size() && v >= 1 && v <= 32768;
  };
  MIRROR_CHECK(comma != std::string::npos &&
                   number(std::string_view(image_size).substr(0, comma), h) &&
                   number(std::string_view(image_size).substr(comma + 1), w),
               InvalidArgument,
               "--image-size must be HEIGHT,WIDTH in pixels (1 to 32768), e.g. 28,28, got '" +
                   image_size + "'");
  return {h, w};
}

data::PhotoRecipe TrainConfig::parsed_photo_recipe() const {
  data::PhotoRecipe r;
  data::parse_crop(crop, r);
  data::parse_normalize(normalize, r);
  r.flip = flip;
  r.eval_resize = eval_resize;
  return r;
}

std::vector<std::int64_t> TrainConfig::parsed_input_shape() const {
  std::vector<std::int64_t> dims;
  if (input_shape.empty()) return dims;
  std::size_t at = 0;
  while (at <= input_shape.size()) {
    const std::size_t comma = std::min(input_shape.find(',', at), input_shape.size());
    const std::string part = input_shape.substr(at, comma - at);
    std::int64_t d = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
    MIRROR_CHECK(!part.empty() && ec == std::errc() && end == part.data() + part.size() && d > 0,
                 InvalidArgument,
                 "--input-shape must be positive integers separated by commas (e.g. 1,28,28), "
                 "got '" +
                     input_shape + "'");
    dims.push_back(d);
    at = comma + 1;
  }
  return dims;
}

// Note [Config fields]: one table drives to_json, from_json and the unknown-key check, so a new
// field cannot be forgotten in one of them.
// clang-format off
#define MIRROR_TRAIN_CONFIG_FIELDS(X)                                                        \
  X(model) X(model_spec) X(loss) X(data) X(data_dir) X(dict_dir) X(train_x) X(train_y)       \
  X(test_x) X(test_y) X(train_csv) X(test_csv) X(label_column) X(csv_header) X(train_tokens) \
  X(test_tokens) X(num_classes) X(input_shape) X(train_limit) X(test_limit) X(epochs)        \
  X(max_steps) X(batch_size) X(batch_per_replica) X(optimizer) X(lr) X(lr_scale_by_replicas) \
  X(schedule) X(warmup_steps) X(momentum) X(weight_decay) X(seed) X(devices) X(memory)       \
  X(require_gpu) X(allow_gpu_sharing) X(threads) X(comm_timeout_s) X(startup_timeout_s)      \
  X(bucket_mb) X(first_bucket_mb) X(compression) X(accumulation) X(on_oom_split)             \
  X(divergence_check_every) X(checkpoint_dir) X(checkpoint_every) X(keep) X(resume)          \
  X(resume_or_start) X(allow_config_change) X(overwrite_checkpoints)                          \
  X(log_jsonl) X(overwrite) X(trace) X(tensorboard) X(progress) X(force_lr)                \
  X(max_skipped_steps) X(sync_batchnorm) X(precision) X(augment) X(comm) X(train_images)    \
  X(test_images) X(image_size) X(color) X(decode) X(data_workers) X(skip_bad_samples)         \
  X(init_weights) X(crop) X(flip) X(normalize) X(eval_resize) X(eval_crop) X(tf32) X(data_format)
// clang-format on

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
#define MIRROR_TO_JSON(field) j[#field] = field;
  MIRROR_TRAIN_CONFIG_FIELDS(MIRROR_TO_JSON)
#undef MIRROR_TO_JSON
  return j;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& json) {
  MIRROR_CHECK(json.is_object(), InvalidArgument,
               "config must be a JSON object, got " + std::string(json.type_name()));
  static const std::set<std::string> known = {
#define MIRROR_NAME(field) #field,
      MIRROR_TRAIN_CONFIG_FIELDS(MIRROR_NAME)
#undef MIRROR_NAME
  };
  for (const auto& [key, value] : json.items()) {
    // Accept the flag spelling too ("batch-size" for batch_size).
    std::string k = key;
    for (char& c : k) c = c == '-' ? '_' : c;
    MIRROR_CHECK(known.count(k), InvalidArgument, "unknown config key '" + key + "'");
  }
  TrainConfig c;
  auto get = [&](const char* name, auto& field) {
    std::string dashed = name;
    for (char& ch : dashed) ch = ch == '_' ? '-' : ch;
    const nlohmann::json* v = json.contains(name)     ? &json.at(name)
                              : json.contains(dashed) ? &json.at(dashed)
                                                      : nullptr;
    if (!v) return;
    using T = std::decay_t<decltype(field)>;
    MIRROR_CHECK(!(json.contains(name) && json.contains(dashed)) || dashed == name, InvalidArgument,
                 "config keys '" + std::string(name) + "' and '" + dashed +
                     "' are the same setting; give it once");
    // nlohmann would turn 1.5 into 1 and true into 1 silently.
    const char* want = nullptr;
    if constexpr (std::is_same_v<T, bool>) {
      if (!v->is_boolean()) want = "true or false";
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!v->is_number_unsigned()) want = "a whole number >= 0";
    } else if constexpr (std::is_integral_v<T>) {
      if (!v->is_number_integer()) want = "an integer";
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v->is_number()) want = "a number";
    } else {
      if (!v->is_string()) want = "a string";
    }
    MIRROR_CHECK(want == nullptr, InvalidArgument,
                 "config key '" + std::string(name) + "' must be " + want + ", got " +
                     quote_input(v->dump()));
    try {
      v->get_to(field);
    } catch (const nlohmann::json::exception&) {
      throw InvalidArgument("config key '" + std::string(name) + "' has the wrong type (" +
                            v->type_name() + ")");
    }
  };
#define MIRROR_FROM_JSON(field) get(#field, c.field);
  MIRROR_TRAIN_CONFIG_FIELDS(MIRROR_FROM_JSON)
#undef MIRROR_FROM_JSON
  auto given = [&](const char* name) {
    std::string dashed = name;
    for (char& ch : dashed) ch = ch == '_' ? '-' : ch;
    return json.contains(name) || json.contains(dashed);
  };
  // 0 and -1 are "not given" inside TrainConfig; written out they are mistakes.
  if (given("batch_size")) check_batch_flag("batch-size", c.batch_size);
  if (given("batch_per_replica")) check_batch_flag("batch-per-replica", c.batch_per_replica);
  if (given("weight_decay")) check_weight_decay_flag(c.weight_decay);
  return c;
}

void TrainConfig::validate() const {
  auto require = [](bool ok, const std::string& message) {
    MIRROR_CHECK(ok, InvalidArgument, message);
  };
  const auto builtins = nn::ModelSpec::builtin_names();
  std::string names;
  for (const auto& n : builtins) names += (names.empty() ? "" : ", ") + n;
  require(
      !model_spec.empty() || std::find(builtins.begin(), builtins.end(), model) != builtins.end(),
      "--model must be one of " + names + " (or give --model-spec FILE), got '" + model + "'");
  require(loss == "auto" || loss == "softmax-cross-entropy" || loss == "cross-entropy" ||
              loss == "binary-cross-entropy" || loss == "bce" || loss == "mse" ||
              loss == "mean-squared-error",
          "--loss must be auto, softmax-cross-entropy (cross-entropy), binary-cross-entropy "
          "(bce) or mse (mean-squared-error), got '" +
              loss + "'");
  validate_data_files(*this);
  require(data == "real" || data == "synthetic",
          "--data must be real or synthetic, got '" + data + "'");
  require(epochs >= 1, "--epochs must be >= 1, got " + std::to_string(epochs));
  require(max_steps >= 0, "--max-steps must be >= 0");
  if (batch_size != 0) check_batch_flag("batch-size", batch_size);
  if (batch_per_replica != 0) check_batch_flag("batch-per-replica", batch_per_replica);
  if (weight_decay != -1) check_weight_decay_flag(weight_decay);
  require(!(batch_size > 0 && batch_per_replica > 0),
          "give --batch-size (global) or --batch-per-replica, not both");
  require(std::isfinite(lr) && lr > 0,
          "--lr must be a positive finite number, got " + std::to_string(lr));
  require(lr <= 10 || force_lr,
          "--lr " + std::to_string(lr) +
              " is far above any usual learning rate (> 10: a typo?); pass --force-lr to use it");
  require(schedule == "constant" || schedule == "warmup" || schedule == "cosine",
          "--schedule must be constant, warmup or cosine, got '" + schedule + "'");
  require(warmup_steps >= 0, "--warmup-steps must be >= 0");
  require(train_limit >= 0 && test_limit >= 0, "--train-limit/--test-limit must be >= 0");
  require(threads >= 0 && threads <= kMaxThreads, "--threads must be from 0 (automatic) to " +
                                                      std::to_string(kMaxThreads) + ", got " +
                                                      std::to_string(threads));
  require(momentum >= 0 && momentum < 1,
          "--momentum must be in [0, 1) (0.9 is usual), got " + number_text(momentum));
  // Seconds are turned into milliseconds in an int64: inf or 1e300 would wrap around.
  require(std::isfinite(comm_timeout_s) && comm_timeout_s > 0 && comm_timeout_s <= kMaxTimeoutS,
          "--comm-timeout must be positive seconds, at most " + number_text(kMaxTimeoutS) +
              " (a week), got " + number_text(comm_timeout_s));
  require(std::isfinite(startup_timeout_s) && startup_timeout_s >= 0 &&
              startup_timeout_s <= kMaxTimeoutS,
          "--startup-timeout must be >= 0 seconds (0 = no watchdog) and at most " +
              number_text(kMaxTimeoutS) + " (a week), got " + number_text(startup_timeout_s));
  try {
    MemoryPolicy::parse(memory);  // a typo fails with the flags, before MPI starts
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("--memory: ") + e.what());
  }
  require(max_skipped_steps >= 0, "--max-skipped-steps must be >= 0 (0 = never stop), got " +
                                      std::to_string(max_skipped_steps));
  require(bucket_mb > 0 && first_bucket_mb > 0,
          "--bucket-mb and --first-bucket-mb must be positive");
  data::parse_image_augment(augment);  // its errors name --augment
  try {
    parse_precision(precision);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("--precision: ") + e.what());
  }
  require(tf32 == "on" || tf32 == "off", "--tf32 must be on or off, got '" + tf32 + "'");
  require(nn::parse_data_format(data_format) == nn::DataFormat::kAuto || train_images.empty(),
          "--data-format " + data_format +
              " is for array data (.npy, IDX, CSV); images from --train-images are decoded in "
              "the model's layout");
  require(accumulation >= 1, "--accumulation must be >= 1, got " + std::to_string(accumulation));
  require(keep >= 0, "--keep must be >= 0 (0 keeps every checkpoint), got " + std::to_string(keep));
  require(!resume_or_start || !resume.empty(), "resume_or_start needs a resume folder");
  require(checkpoint_every >= 0, "--checkpoint-every must be >= 0");
  require(divergence_check_every >= 0, "--divergence-check-every must be >= 0");
  require(tensorboard.empty() || TensorBoardWriter::available(),
          "--tensorboard needs a build with protobuf: install libprotobuf-dev and "
          "protobuf-compiler (scripts/setup.sh) and build again");
  require(checkpoint_every == 0 || !checkpoint_dir.empty() || !resume.empty(),
          "--checkpoint-every " + std::to_string(checkpoint_every) +
              " needs a folder to save into: give --checkpoint-dir DIR (or --resume DIR, "
              "which saves into DIR)");
}

}  // namespace mirror::train
