// The user's own data files named by mirror-train's flags: x/y arrays (.npy or IDX, one pair or
// shards), CSV, token text or an image folder, for the training split and optionally the test
// split.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "mirror/data/arrays.h"
#include "mirror/data/csv.h"
#include "mirror/data/image_folder.h"
#include "mirror/data/tar_shards.h"
#include "mirror/data/token_text.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

struct SplitFiles {
  const std::string &x, &y, &csv, &tokens;
  const std::optional<data::NumericArray>&x_array, &y_array;  // Note [In-memory sources]
};

/// An image folder; the test split takes the training split's classes (`class_names`).
std::shared_ptr<const data::Dataset> load_images(const TrainConfig& c, const std::string& dir,
                                                 std::vector<std::string> class_names, bool raw) {
  data::ImageFolderOptions o;
  o.photo = c.parsed_photo_recipe();
  o.evaluation = !class_names.empty();  // the test split takes the training classes
  o.scale_to_unit = !raw;  // Note [Raw values] (models.h): a Rescaling model takes 0..255
  std::tie(o.height, o.width) = c.parsed_image_size();
  o.color = data::parse_color_mode(c.color);
  o.classes = std::move(class_names);
  o.decoder = data::make_image_decoder(data::parse_decode_device(c.decode));
  // The headers are read once at load: as many threads as there are cores for it.
  o.check_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  o.skip_bad_samples = c.skip_bad_samples;
  return data::load_image_input(dir, o);  // an image folder or tar shards
}

/// `classes` and `vocab` (0: from the file) keep the test split consistent with training.
std::shared_ptr<const data::Dataset> load_split(const TrainConfig& c, const SplitFiles& f,
                                                int classes, std::int64_t vocab, bool raw) {
  if (!f.x.empty()) {
    data::ArrayOptions o;
    o.num_classes = classes;
    o.sample_shape = c.parsed_input_shape();
    o.scale_uint8 = !raw;
    if (f.x_array && f.y_array) return data::arrays_dataset(*f.x_array, *f.y_array, o, f.x, f.y);
    return data::load_arrays(f.x, f.y, o);
  }
  if (!f.csv.empty()) {
    data::CsvOptions o;
    o.label_column = c.label_column;
    o.header = c.csv_header == "yes" ? 1 : c.csv_header == "no" ? 0 : -1;
    o.num_classes = classes;
    // A CSV label is a class index unless the loss asks for float targets.
    o.float_targets =
        c.loss != "auto" && dist::parse_loss(c.loss) != dist::LossKind::kSoftmaxCrossEntropy;
    return data::load_csv(f.csv, o);
  }
  data::TokenTextOptions o;
  o.num_classes = classes;
  o.vocab = vocab;
  return data::load_token_text(f.tokens, o);
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// The largest |value| of `what` ("inputs", "targets") over every sample, and where it is.
struct Peak {
  double value = 0;
  std::int64_t sample = -1;
  void see(const std::vector<float>& v, std::int64_t i) {
    for (float x : v) {
      if (std::fabs(x) > value) {
        value = std::fabs(x);
        sample = i;
      }
    }
  }
};

/// Note [Data magnitude]: float32 training squares gradients (Adam's second moment) and errors
/// (MSE); inputs or targets near 1e19 make those overflow, and the run "succeeds" with inf in
/// every checkpoint. Such data is refused at load; data far from order 1 trains badly and gets
/// a warning.
constexpr double kRefuseAbove = 1e18;
constexpr double kWarnAbove = 1e4;

/// Token ids far beyond the ids in use (one id of 5*10^7 among ids below 100): the embedding gets
/// a row per id up to the largest, so such ids are almost always hashes or typos.
void check_vocabulary(const data::Dataset& d, const std::string& split, DataSplits& out) {
  if (d.vocab_size() <= 0) return;
  std::set<std::int32_t> ids;
  std::vector<std::int32_t> row;
  for (std::int64_t i = 0; i < d.size() && ids.size() <= 100000; ++i) {
    const std::int32_t n = d.length(i);
    row.assign(static_cast<std::size_t>(std::max(n, 1)), 0);
    d.decode_tokens(i, row.data(), std::max(n, 1));
    ids.insert(row.begin(), row.begin() + n);
  }
  const auto distinct = static_cast<std::int64_t>(ids.size());
  if (distinct > 100000 || d.vocab_size() <= 10 * distinct + 1000) return;
  out.warnings.push_back("the " + split + " token ids take " + std::to_string(distinct) +
                         " distinct values but the largest makes a vocabulary of " +
                         std::to_string(d.vocab_size()) +
                         " (largest id + 1): the embedding gets that many rows; renumber the "
                         "ids 1.." +
                         std::to_string(distinct) + " if they are hashes");
}

void check_magnitude(const data::Dataset& d, const std::string& split, DataSplits& out) {
  Peak inputs, targets;
  // Inputs bounded by their storage (uint8 scaled to [0, 1]) need no scan, nor do inputs too
  // large to read twice: those are checked as batches are decoded (Dataset::checks_at_batch).
  const std::optional<double> bound = d.input_bound();
  const bool float_inputs = d.input_dtype() == DType::kFloat32 && !d.is_sequence() &&
                            !(bound && *bound <= kWarnAbove) && !d.checks_at_batch();
  const bool float_targets = d.target_kind() == data::TargetKind::kFloat;
  std::vector<float> x(float_inputs ? static_cast<std::size_t>(shape_numel(d.sample_shape())) : 0);
  std::vector<float> y(float_targets ? static_cast<std::size_t>(shape_numel(d.target_shape())) : 0);
  std::set<std::int32_t> labels;
  std::vector<std::int32_t> dense(
      float_targets ? 0 : static_cast<std::size_t>(shape_numel(d.label_shape())));
  for (std::int64_t i = 0; i < d.size(); ++i) {
    if (float_inputs) {
      d.decode_float(i, x.data());
      inputs.see(x, i);
    }
    if (float_targets) {
      d.decode_target(i, y.data());
      targets.see(y, i);
    } else if (labels.size() <= 1024) {
      d.decode_labels(i, dense.data());  // Note [Dense labels]: one per sample, step or pixel
      labels.insert(dense.begin(), dense.end());
    }
  }
  for (const auto& [what, peak] : {std::pair{"inputs", inputs}, std::pair{"targets", targets}}) {
    const std::string found = "the " + split + " " + what + " reach |value| " + number(peak.value) +
                              " (sample " + std::to_string(peak.sample) + ")";
    MIRROR_CHECK(peak.value <= kRefuseAbove, DataError,
                 found + ": float32 training overflows with values beyond about " +
                     number(kRefuseAbove) +
                     " (their squares exceed 3.4e38); scale the data (e.g. standardise each "
                     "column to mean 0, standard deviation 1)");
    if (peak.value > kWarnAbove) {
      out.warnings.push_back(found +
                             "; training works best with values of order 1: consider "
                             "standardising them");
    }
  }
  check_vocabulary(d, split, out);
  const auto distinct = static_cast<std::int64_t>(labels.size());
  if (!float_targets && distinct == 1 && split == "training") {
    out.warnings.push_back("every training label is " + std::to_string(*labels.begin()) +
                           ": one class, so there is nothing to learn (a model that always "
                           "answers it is always right); check the labels file");
  }
  if (!float_targets && distinct > 0 && d.num_classes() > 10 * distinct + 100) {
    out.warnings.push_back("the " + split + " labels take " + std::to_string(distinct) +
                           " distinct values but make " + std::to_string(d.num_classes()) +
                           " classes (largest label + 1): the model gets that many outputs; "
                           "relabel the classes 0.." +
                           std::to_string(distinct - 1) + " if the large labels are ids");
  }
}

}  // namespace

DataSplits load_own_data(const TrainConfig& c, const Sources& s, bool raw_values) {
  DataSplits d;
  if (!c.train_images.empty()) {
    d.train = load_images(c, c.train_images, {}, raw_values);
    if (d.train->class_names().size() == 1) {
      d.warnings.push_back(c.train_images + " has one class (" + d.train->class_names().front() +
                           "), so there is nothing to learn (a model that always answers it is "
                           "always right); give one subfolder (or shard label) per class");
    }
    if (!c.test_images.empty()) {
      d.test = load_images(c, c.test_images, d.train->class_names(), raw_values);
    }
    for (const auto& split : {d.train, d.test}) {
      if (!split) continue;
      for (const std::string& note : split->notes()) d.warnings.push_back(note);
    }
    return d;
  }
  d.train = load_split(c, {c.train_x, c.train_y, c.train_csv, c.train_tokens, s.train_x, s.train_y},
                       c.num_classes, 0, raw_values);
  check_magnitude(*d.train, "training", d);
  for (const std::string& note : d.train->notes()) d.warnings.push_back(note);
  const bool has_test = !c.test_x.empty() || !c.test_csv.empty() || !c.test_tokens.empty();
  if (has_test) {
    const int classes = c.num_classes > 0 ? c.num_classes : d.train->num_classes();
    d.test = load_split(c, {c.test_x, c.test_y, c.test_csv, c.test_tokens, s.test_x, s.test_y},
                        classes, d.train->vocab_size(), raw_values);
    check_magnitude(*d.test, "test", d);
    for (const std::string& note : d.test->notes()) d.warnings.push_back(note);
  }
  return d;
}

}  // namespace mirror::train
