// WordLanguages: builds the labelled, split, encoded word samples (Note [Word rules]).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/hash.h"
#include "mirror/data/words.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

struct LanguageWords {
  std::string language;
  std::vector<std::string> files;            // sorted file names
  std::vector<std::string_view> candidates;  // unique, unambiguous words in file order
};

std::string read_text_file(const std::string& path, const std::string& hint) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  MIRROR_CHECK(in.good(), DataError,
               "cannot open word list " + path + ": " + std::strerror(errno != 0 ? errno : EIO) +
                   "; " + hint);
  std::ostringstream ss;
  ss << in.rdbuf();
  MIRROR_CHECK(!in.bad(), DataError, "error while reading word list " + path);
  return std::move(ss).str();
}

/// Open-addressing map word -> int32 (linear probing, power-of-two capacity, never shrinks).
/// A node-based std::unordered_map spends most of the load time on cache misses with a
/// million words; this keeps one probe per lookup in the common case.
class OwnerTable {
 public:
  explicit OwnerTable(std::size_t expected) {
    std::size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    slots_.resize(cap);
  }
  /// The value stored for `word`, inserting `value` first when it is absent.
  std::int32_t& find_or_insert(std::string_view word, std::int32_t value) {
    const std::uint64_t h = detail::fnv1a64(word);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = detail::splitmix64(h) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (!s.used) {
        s = {h, word, value, true};
        return s.value;
      }
      if (s.hash == h && s.word == word) return s.value;
    }
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::string_view word;
    std::int32_t value = 0;
    bool used = false;
  };
  std::vector<Slot> slots_;
};

/// Groups parsed lists by language (sorted), drops words shared by languages, dedupes within a
/// language. Returns the number of distinct ambiguous words.
std::int64_t group_by_language(const std::vector<std::pair<std::string, WordListParse>>& parsed,
                               std::vector<LanguageWords>& groups) {
  std::vector<std::string> names;
  for (const auto& [file, p] : parsed) names.push_back(language_of_list(file));
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  groups.clear();
  for (const auto& l : sorted) groups.push_back({l, {}, {}});
  // Files of one language in name order.
  std::vector<std::vector<std::size_t>> members(groups.size());
  std::size_t total = 0;
  for (std::size_t f = 0; f < parsed.size(); ++f) {
    const auto g = std::lower_bound(sorted.begin(), sorted.end(), names[f]) - sorted.begin();
    members[g].push_back(f);
    total += parsed[f].second.words.size();
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::sort(members[g].begin(), members[g].end(),
              [&](std::size_t a, std::size_t b) { return parsed[a].first < parsed[b].first; });
    for (auto f : members[g]) groups[g].files.push_back(parsed[f].first);
  }
  // Owner of each distinct word: language index, or -1 once a second language claims it.
  constexpr std::int32_t kAmbiguous = -1, kTaken = -2;
  OwnerTable owner(total);
  std::int64_t ambiguous = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (auto f : members[g]) {
      for (auto w : parsed[f].second.words) {
        std::int32_t& o = owner.find_or_insert(w, static_cast<std::int32_t>(g));
        if (o != static_cast<std::int32_t>(g) && o != kAmbiguous) {
          o = kAmbiguous;
          ++ambiguous;
        }
      }
    }
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (auto f : members[g]) {
      for (auto w : parsed[f].second.words) {
        std::int32_t& o = owner.find_or_insert(w, kTaken);
        if (o != static_cast<std::int32_t>(g)) continue;  // ambiguous or already taken
        o = kTaken;
        groups[g].candidates.push_back(w);
      }
    }
  }
  return ambiguous;
}

/// Keeps the `keep` words with the smallest seeded hash (ties in file order), in file order.
std::vector<std::string_view> cap_words(const std::vector<std::string_view>& words,
                                        std::int64_t keep, std::uint64_t seed) {
  if (keep <= 0 || static_cast<std::int64_t>(words.size()) <= keep) return words;
  const std::uint64_t salt = detail::splitmix64(seed + 0x5eed);
  std::vector<std::uint64_t> keys(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) {
    keys[i] = detail::splitmix64(detail::fnv1a64(words[i]) ^ salt);
  }
  std::vector<std::uint64_t> sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + (keep - 1), sorted.end());
  const std::uint64_t threshold = sorted[static_cast<std::size_t>(keep - 1)];
  std::int64_t ties_left = keep;
  for (auto k : keys) ties_left -= k < threshold;
  std::vector<std::string_view> out;
  out.reserve(static_cast<std::size_t>(keep));
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (keys[i] < threshold || (keys[i] == threshold && ties_left-- > 0)) out.push_back(words[i]);
  }
  return out;
}

/// The code points seen: a bitmap for the Basic Multilingual Plane, a set for the rest.
class CodePointSet {
 public:
  CodePointSet() : bmp_(0x10000, false) {}
  void insert(char32_t c) {
    if (c < 0x10000)
      bmp_[c] = true;
    else
      astral_.insert(c);
  }
  std::vector<char32_t> sorted() const {
    std::vector<char32_t> out;
    for (char32_t c = 0; c < 0x10000; ++c) {
      if (bmp_[c]) out.push_back(c);
    }
    out.insert(out.end(), astral_.begin(), astral_.end());
    return out;
  }

 private:
  std::vector<bool> bmp_;
  std::set<char32_t> astral_;
};

bool in_test_split(std::string_view word, std::uint64_t seed, std::uint64_t per_million) {
  return detail::splitmix64(detail::fnv1a64(word) ^ seed) % 1000000 < per_million;
}

/// Parses every list (DataError for a bad one), counting the dropped words into `stats`.
std::vector<std::pair<std::string, WordListParse>> parse_lists(
    const std::vector<std::pair<std::string, std::string>>& lists, int max_len, WordStats& stats) {
  std::vector<std::pair<std::string, WordListParse>> parsed;
  for (const auto& [name, bytes] : lists) {
    for (const auto& [seen, p] : parsed) {
      MIRROR_CHECK(seen != name, InvalidArgument, "word list " + name + " given twice");
    }
    parsed.emplace_back(name, parse_word_list(bytes, name, max_len));
    stats.too_long += parsed.back().second.too_long;
    stats.invalid += parsed.back().second.invalid;
  }
  return parsed;
}

}  // namespace

std::shared_ptr<WordLanguages> WordLanguages::load(const WordOptions& options) {
  namespace fs = std::filesystem;
  std::vector<std::string> names = options.lists;
  if (names.empty()) {
    names = installed_word_lists(options.dict_dir);
    MIRROR_CHECK(!names.empty(), DataError,
                 "no word lists found in " + options.dict_dir +
                     "; install some (scripts/setup.sh does: apt-get install wamerican wngerman "
                     "wfrench wspanish witalian)");
  }
  std::vector<std::pair<std::string, std::string>> lists;
  for (const auto& name : names) {
    const std::string path = (fs::path(options.dict_dir) / name).string();
    const std::string hint = "install the Debian package " + package_of_list(name) +
                             " (apt-get install " + package_of_list(name) + ")";
    std::error_code ec;
    MIRROR_CHECK(fs::is_regular_file(path, ec), DataError,
                 "word list " + path + " not found; " + hint);
    lists.emplace_back(name, read_text_file(path, hint));
  }
  return from_lists(lists, options);
}

std::shared_ptr<WordLanguages> WordLanguages::from_lists(
    const std::vector<std::pair<std::string, std::string>>& lists, const WordOptions& options) {
  MIRROR_CHECK(options.test_fraction >= 0.0 && options.test_fraction <= 1.0, InvalidArgument,
               "test_fraction must be in [0, 1], got " + std::to_string(options.test_fraction));
  MIRROR_CHECK(options.max_len >= 1 && options.max_len <= 4096, InvalidArgument,
               "word max_len must be in [1, 4096], got " + std::to_string(options.max_len));
  WordStats stats;
  const auto parsed = parse_lists(lists, options.max_len, stats);
  std::vector<LanguageWords> groups;
  stats.ambiguous = group_by_language(parsed, groups);
  MIRROR_CHECK(groups.size() >= 2, DataError,
               "word lists give " + std::to_string(groups.size()) +
                   " language(s); classification needs at least two (install e.g. wamerican and "
                   "wfrench)");

  auto ds = std::shared_ptr<WordLanguages>(new WordLanguages());
  ds->split_ = options.split;
  ds->max_len_ = options.max_len;
  const auto per_million =
      static_cast<std::uint64_t>(std::llround(options.test_fraction * 1000000.0));
  // Split and cap, then the vocabulary from every language's training words.
  std::vector<std::vector<std::string_view>> chosen(groups.size());
  CodePointSet vocab;
  std::u32string cps;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ds->languages_.push_back(groups[g].language);
    for (const auto& f : groups[g].files) ds->list_files_.push_back(f);
    for (auto w :
         cap_words(groups[g].candidates, options.max_words_per_language, options.split_seed)) {
      const bool test = in_test_split(w, options.split_seed, per_million);
      if (!test) {
        decode_utf8(w, &cps);
        for (char32_t c : cps) vocab.insert(c);
      }
      if (test == (options.split == Split::kTest)) chosen[g].push_back(w);
    }
  }
  ds->code_points_ = vocab.sorted();
  // Ids of the Basic Multilingual Plane by table, the rare others by binary search.
  std::vector<std::int32_t> bmp(0x10000, kUnk);
  for (std::size_t k = 0; k < ds->code_points_.size() && ds->code_points_[k] < 0x10000; ++k) {
    bmp[ds->code_points_[k]] = static_cast<std::int32_t>(k) + 2;
  }
  ds->offsets_.push_back(0);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    stats.per_language.push_back(static_cast<std::int64_t>(chosen[g].size()));
    for (auto w : chosen[g]) {
      decode_utf8(w, &cps);
      for (char32_t c : cps) ds->ids_.push_back(c < 0x10000 ? bmp[c] : ds->id_of(c));
      ds->offsets_.push_back(static_cast<std::int64_t>(ds->ids_.size()));
      ds->labels_.push_back(static_cast<std::int32_t>(g));
    }
  }
  ds->stats_ = std::move(stats);
  MIRROR_CHECK(ds->size() > 0, DataError,
               "word lists give no word for the " + std::string(split_name(options.split)) +
                   " split (test_fraction " + std::to_string(options.test_fraction) + ")");
  return ds;
}

std::int32_t WordLanguages::length(std::int64_t index) const {
  MIRROR_CHECK(
      index >= 0 && index < size(), InvalidArgument,
      "word index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
  return static_cast<std::int32_t>(offsets_[index + 1] - offsets_[index]);
}

std::int32_t WordLanguages::label(std::int64_t index) const {
  MIRROR_CHECK(
      index >= 0 && index < size(), InvalidArgument,
      "word index " + std::to_string(index) + " outside [0, " + std::to_string(size()) + ")");
  return labels_[index];
}

void WordLanguages::decode_tokens(std::int64_t index, std::int32_t* dst, std::int32_t steps) const {
  const std::int32_t n = length(index);
  MIRROR_CHECK(
      steps >= n, InvalidArgument,
      "decode_tokens: " + std::to_string(steps) + " steps for a word of " + std::to_string(n));
  std::copy_n(ids_.data() + offsets_[index], n, dst);
  std::fill(dst + n, dst + steps, kPad);
}

std::int32_t WordLanguages::id_of(char32_t code_point) const {
  auto it = std::lower_bound(code_points_.begin(), code_points_.end(), code_point);
  if (it == code_points_.end() || *it != code_point) return kUnk;
  return static_cast<std::int32_t>(it - code_points_.begin()) + 2;
}

std::string WordLanguages::word(std::int64_t index) const {
  const std::int32_t n = length(index);
  std::u32string text;
  for (std::int32_t k = 0; k < n; ++k) {
    const std::int32_t id = ids_[offsets_[index] + k];
    text.push_back(id >= 2 ? code_points_[id - 2] : U'\uFFFD');
  }
  return encode_utf8(text);
}

std::string WordLanguages::describe() const {
  std::string langs;
  for (std::size_t g = 0; g < languages_.size(); ++g) {
    langs += (g ? ", " : "") + languages_[g] + " " + std::to_string(stats_.per_language[g]);
  }
  return "word languages " + std::string(split_name(split_)) + ": " + std::to_string(size()) +
         " words (" + langs + "), vocab " + std::to_string(vocab_size()) + ", max_len " +
         std::to_string(max_len_);
}

}  // namespace mirror::data
