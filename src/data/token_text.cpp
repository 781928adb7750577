// load_token_text: "label id id ..." lines -> int32 id sequences stored back to back (offsets
// into one buffer), padded only when a batch is decoded.
#include "mirror/data/token_text.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <vector>

#include "data/text_lines.h"
#include "mirror/data/idx.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

class TokenText : public Dataset {
 public:
  TokenText(std::string name, std::vector<std::int32_t> labels, std::vector<std::int32_t> ids,
            std::vector<std::int64_t> offsets, int classes, std::int64_t vocab)
      : name_(std::move(name)),
        labels_(std::move(labels)),
        ids_(std::move(ids)),
        offsets_(std::move(offsets)),
        classes_(classes),
        vocab_(vocab) {
    for (std::size_t i = 0; i + 1 < offsets_.size(); ++i)
      max_len_ = std::max(max_len_, offsets_[i + 1] - offsets_[i]);
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return classes_; }
  std::int64_t vocab_size() const override { return vocab_; }
  DType input_dtype() const override { return DType::kInt32; }
  Shape sample_shape() const override { return {max_len_}; }
  bool is_sequence() const override { return true; }
  bool variable_length() const override { return true; }
  std::int32_t length(std::int64_t index) const override {
    check_index(index);
    const auto i = static_cast<std::size_t>(index);
    return static_cast<std::int32_t>(offsets_[i + 1] - offsets_[i]);
  }
  std::int32_t label(std::int64_t index) const override {
    check_index(index);
    return labels_[static_cast<std::size_t>(index)];
  }
  void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const override {
    const std::int32_t n = length(index);
    MIRROR_CHECK(steps >= n, InvalidArgument,
                 "decode_tokens: " + std::to_string(steps) + " steps for a sequence of " +
                     std::to_string(n));
    std::copy_n(ids_.data() + offsets_[static_cast<std::size_t>(index)], n, dst);
    std::fill(dst + n, dst + steps, 0);
  }
  std::string describe() const override {
    return "token text " + name_ + ": " + std::to_string(size()) + " sequences, " +
           std::to_string(classes_) + " classes, vocab " + std::to_string(vocab_) + ", up to " +
           std::to_string(max_len_) + " tokens";
  }

 private:
  void check_index(std::int64_t index) const {
    MIRROR_CHECK(index >= 0 && index < size(), InvalidArgument,
                 describe() + ": index " + std::to_string(index) + " outside [0, " +
                     std::to_string(size()) + ")");
  }

  std::string name_;
  std::vector<std::int32_t> labels_, ids_;
  std::vector<std::int64_t> offsets_;  // sequence i is ids_[offsets_[i], offsets_[i + 1])
  int classes_;
  std::int64_t vocab_;
  std::int64_t max_len_ = 0;
};

bool is_blank(char c) { return c == ' ' || c == '\t'; }

/// The next whitespace-separated field of `line` from pos (empty at the end).
std::string_view next_field(std::string_view line, std::size_t& pos) {
  while (pos < line.size() && is_blank(line[pos])) ++pos;
  const std::size_t start = pos;
  while (pos < line.size() && !is_blank(line[pos])) ++pos;
  return line.substr(start, pos - start);
}

/// A decimal integer in [0, INT32_MAX); DataError naming where and what otherwise.
std::int64_t parse_int(std::string_view field, const std::string& where, const char* what) {
  std::int64_t v = -1;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  MIRROR_CHECK(ec == std::errc() && end == field.data() + field.size(), DataError,
               where + ": " + what + " '" + std::string(field) +
                   "' is not a decimal integer; expected \"label id id ...\"");
  MIRROR_CHECK(v >= 0 && v < INT32_MAX, DataError,
               where + ": " + what + " " + std::string(field) + " is outside [0, 2^31 - 1)");
  return v;
}

}  // namespace

std::shared_ptr<const Dataset> parse_token_text(std::string_view text, const std::string& name,
                                                const TokenTextOptions& options) {
  MIRROR_CHECK(options.num_classes >= 0 && options.vocab >= 0, InvalidArgument,
               "token text: num_classes and vocab must be >= 0 (0: from the data), got " +
                   std::to_string(options.num_classes) + " and " + std::to_string(options.vocab));
  std::vector<std::int32_t> labels, ids;
  std::vector<std::int64_t> offsets = {0};
  std::int64_t max_label = 0, max_id = 0;
  detail::TextLines lines(text);
  for (std::string_view line; lines.next(line);) {
    std::size_t at = 0;
    const std::string_view label_field = next_field(line, at);
    if (label_field.empty()) continue;  // blank line
    const std::string where = name + ": line " + std::to_string(lines.number());
    const std::int64_t label = parse_int(label_field, where, "label");
    MIRROR_CHECK(options.num_classes == 0 || label < options.num_classes, DataError,
                 where + ": label " + std::to_string(label) + " is >= the " +
                     std::to_string(options.num_classes) + " classes stated");
    max_label = std::max(max_label, label);
    for (std::string_view f = next_field(line, at); !f.empty(); f = next_field(line, at)) {
      const std::int64_t id = parse_int(f, where, "token id");
      MIRROR_CHECK(id >= 1, DataError,
                   where + ": token id 0 is the padding id; ids of real tokens start at 1");
      MIRROR_CHECK(options.vocab == 0 || id < options.vocab, DataError,
                   where + ": token id " + std::to_string(id) + " is >= the vocabulary size " +
                       std::to_string(options.vocab) + " stated");
      max_id = std::max(max_id, id);
      ids.push_back(static_cast<std::int32_t>(id));
    }
    MIRROR_CHECK(static_cast<std::int64_t>(ids.size()) > offsets.back(), DataError,
                 where + ": label " + std::to_string(label) +
                     " but no token id; every sequence needs at least one id");
    MIRROR_CHECK(static_cast<std::int64_t>(ids.size()) - offsets.back() < INT32_MAX, DataError,
                 where + ": sequence too long");
    labels.push_back(static_cast<std::int32_t>(label));
    offsets.push_back(static_cast<std::int64_t>(ids.size()));
  }
  MIRROR_CHECK(!labels.empty(), DataError,
               name + ": no sequence; expected one \"label id id ...\" line per sample");
  const int classes =
      options.num_classes > 0 ? options.num_classes : static_cast<int>(max_label + 1);
  const std::int64_t vocab = options.vocab > 0 ? options.vocab : max_id + 1;
  return std::make_shared<TokenText>(name, std::move(labels), std::move(ids), std::move(offsets),
                                     classes, vocab);
}

std::shared_ptr<const Dataset> load_token_text(const std::string& path,
                                               const TokenTextOptions& options) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  return parse_token_text(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path, options);
}

}  // namespace mirror::data
