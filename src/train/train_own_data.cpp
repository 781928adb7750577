// The user's own data files named by mirror-train's flags: x/y arrays (.npy or IDX), CSV, or
// token text, for the training split and optionally the test split.
#include "mirror/data/arrays.h"
#include "mirror/data/csv.h"
#include "mirror/data/token_text.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

struct SplitFiles {
  const std::string &x, &y, &csv, &tokens;
};

/// `classes` and `vocab` (0: from the file) keep the test split consistent with training.
std::shared_ptr<const data::Dataset> load_split(const TrainConfig& c, const SplitFiles& f,
                                                int classes, std::int64_t vocab) {
  if (!f.x.empty()) {
    data::ArrayOptions o;
    o.num_classes = classes;
    o.sample_shape = c.parsed_input_shape();
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

}  // namespace

DataSplits load_own_data(const TrainConfig& c) {
  DataSplits d;
  d.train = load_split(c, {c.train_x, c.train_y, c.train_csv, c.train_tokens}, c.num_classes, 0);
  const bool has_test = !c.test_x.empty() || !c.test_csv.empty() || !c.test_tokens.empty();
  if (has_test) {
    const int classes = c.num_classes > 0 ? c.num_classes : d.train->num_classes();
    d.test = load_split(c, {c.test_x, c.test_y, c.test_csv, c.test_tokens}, classes,
                        d.train->vocab_size());
  }
  return d;
}

}  // namespace mirror::train
