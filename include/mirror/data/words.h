// defines: WordLanguages (words of the Debian word lists, labelled by language), the word-list
// parser and the UTF-8 decoder behind it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mirror/data/dataset.h"

namespace mirror::data {

inline constexpr const char* kDictDir = "/usr/share/dict";

/// Decodes strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF, no truncated
/// sequences). Returns false and sets *bad_offset to the first bad byte on failure.
bool decode_utf8(std::string_view text, std::u32string* out, std::size_t* bad_offset = nullptr);
std::string encode_utf8(std::u32string_view text);

/// The words of one list file, as views into the caller's buffer (keep it alive).
struct WordListParse {
  std::vector<std::string_view> words;  // valid words, in file order (duplicates kept)
  std::int64_t lines = 0;               // non-empty lines
  std::int64_t too_long = 0;            // dropped: more than max_len code points
  std::int64_t invalid = 0;             // dropped: contain whitespace or control characters
};

/// Splits a word list into words: one per line ('\n', an optional '\r' before it is removed),
/// a UTF-8 byte-order mark at the start is skipped, empty lines are ignored. A word holding
/// whitespace or a control character is dropped (counted in `invalid`); a word longer than
/// `max_len` code points is dropped (counted in `too_long`; truncating would create false
/// words). Throws DataError naming `name`, the line and byte offset for invalid UTF-8 (a list
/// in another encoding must not be silently mis-decoded), and for a list with no usable word.
WordListParse parse_word_list(std::string_view bytes, const std::string& name, int max_len);

/// The language a list file belongs to: "american-english" -> "english", "ngerman" -> "german",
/// ...; unknown file names are their own language.
std::string language_of_list(const std::string& file_name);
/// The Debian package that installs a list file ("french" -> "wfrench"), for error messages.
std::string package_of_list(const std::string& file_name);
/// Regular files in `dict_dir` that are word lists, sorted: skips README*, the `words` /
/// `words.*` alternatives symlinks, dpkg leftovers, and the English helper lists of other
/// packages (connectives, propernames, web2, web2a, cracklib-small).
std::vector<std::string> installed_word_lists(const std::string& dict_dir);

struct WordOptions {
  std::string dict_dir = kDictDir;
  /// List file names inside dict_dir; empty = every installed list (installed_word_lists).
  std::vector<std::string> lists;
  Split split = Split::kTrain;
  int max_len = 24;              // longer words are dropped
  std::uint64_t split_seed = 0;  // changes which words are held out
  double test_fraction = 0.1;    // share of each language's words in the test split
  /// Keep at most this many words per language (0 = all), chosen by a seeded hash before the
  /// split, so train and test stay disjoint and the classes can be balanced.
  std::int64_t max_words_per_language = 0;
};

struct WordStats {
  std::int64_t too_long = 0, invalid = 0;
  std::int64_t ambiguous = 0;  // distinct words dropped because they occur in several languages
  std::vector<std::int64_t> per_language;  // samples of each language in this split
};

/// Word -> language classification data from the Debian word lists.
///
/// Note [Word rules]:
///  - A word is one line of a list, kept exactly as written: case is kept (German nouns are
///    capitalised, which is part of the language), apostrophes and hyphens are kept.
///  - Lists of the same language (american-english, british-english) are merged; a word is
///    counted once per language.
///  - A word found in the lists of two or more languages ("a", "radio") is dropped from all of
///    them as ambiguous: a sample has exactly one correct label.
///  - Words longer than max_len code points, or holding whitespace / control characters, are
///    dropped (see parse_word_list).
///  - Split: a word is in the test split when splitmix64(fnv1a64(utf8) ^ split_seed) mod 10^6 <
///    test_fraction * 10^6: a pure function of the word, independent of which other lists are
///    installed and of the order of the files.
///  - Labels: languages sorted by name, label = position. Samples are ordered by language, then
///    by list file name, then by line.
///  - Vocabulary: id 0 = padding, id 1 = <unk> (a code point never seen in the training words),
///    ids 2.. = the code points of all training words of the chosen lists in ascending order.
///    It is built from the training split even when the test split is loaded, so train and
///    test agree.
class WordLanguages : public Dataset {
 public:
  static constexpr std::int32_t kPad = 0;
  static constexpr std::int32_t kUnk = 1;

  /// Reads the lists from disk. DataError when a named list is missing (naming the package),
  /// when none is installed, when fewer than two languages remain, or for parse errors.
  static std::shared_ptr<WordLanguages> load(const WordOptions& options = {});
  /// Same rules from in-memory lists: (file name, bytes). Used by load, tests and the fuzzer.
  static std::shared_ptr<WordLanguages> from_lists(
      const std::vector<std::pair<std::string, std::string>>& lists, const WordOptions& options);

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return static_cast<int>(languages_.size()); }
  DType input_dtype() const override { return DType::kInt32; }
  Shape sample_shape() const override { return {max_len_}; }
  bool is_sequence() const override { return true; }
  bool variable_length() const override { return true; }
  std::int32_t length(std::int64_t index) const override;
  std::int32_t label(std::int64_t index) const override;
  void decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const override;
  std::string describe() const override;

  const std::vector<std::string>& languages() const { return languages_; }
  /// The list files used, in label order of their language.
  const std::vector<std::string>& list_files() const { return list_files_; }
  /// Sorted code points; code point code_points()[k] has id k + 2.
  const std::vector<char32_t>& code_points() const { return code_points_; }
  std::int64_t vocab_size() const override {
    return static_cast<std::int64_t>(code_points_.size()) + 2;
  }
  std::int32_t id_of(char32_t code_point) const;  // kUnk when not in the vocabulary
  /// The word of a sample, re-encoded from its ids (<unk> becomes U+FFFD).
  std::string word(std::int64_t index) const;
  const WordStats& stats() const { return stats_; }
  Split split() const { return split_; }

 private:
  WordLanguages() = default;

  Split split_ = Split::kTrain;
  std::int64_t max_len_ = 0;
  std::vector<std::string> languages_, list_files_;
  std::vector<char32_t> code_points_;
  std::vector<std::int32_t> ids_;      // all words' ids, concatenated
  std::vector<std::int64_t> offsets_;  // word i = ids_[offsets_[i], offsets_[i+1])
  std::vector<std::int32_t> labels_;
  WordStats stats_;
};

}  // namespace mirror::data
