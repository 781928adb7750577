// Word lists: strict UTF-8, the list parser, the language rules (Note [Word rules]), the split,
// the vocabulary, and bad input. Real lists from /usr/share/dict when installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "mirror/data/words.h"
#include "mirror/error.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using Lists = std::vector<std::pair<std::string, std::string>>;

template <class F>
void expect_data_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

WordOptions all_train() {
  WordOptions o;
  o.test_fraction = 0.0;
  return o;
}

std::set<std::string> words_of(const WordLanguages& ds, int label) {
  std::set<std::string> out;
  for (std::int64_t i = 0; i < ds.size(); ++i) {
    if (ds.label(i) == label) out.insert(ds.word(i));
  }
  return out;
}

TEST(DataUtf8, DecodesValidText) {
  std::u32string out;
  ASSERT_TRUE(decode_utf8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", &out));
  EXPECT_EQ(out, (std::u32string{U'a', 0xE9, 0x20AC, 0x1F600}));
  EXPECT_EQ(encode_utf8(out), "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(DataUtf8, RejectsInvalidSequencesWithOffset) {
  const std::vector<std::pair<std::string, std::size_t>> bad = {
      {"ab\xC0\xAF", 2},        // overlong '/'
      {"\xE0\x80\xAF", 0},      // overlong, 3 bytes
      {"x\xED\xA0\x80", 1},     // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},  // above U+10FFFF
      {"abc\xC3", 3},           // truncated sequence
      {"\x80", 0},              // lone continuation byte
      {"ok\xFF", 2},            // never valid
      {"\xC3\x28", 0},          // bad continuation
  };
  for (const auto& [text, offset] : bad) {
    std::size_t at = 99;
    EXPECT_FALSE(decode_utf8(text, nullptr, &at)) << text;
    EXPECT_EQ(at, offset) << text;
  }
}

TEST(DataWordList, ParsesLinesAndDropsBadWords) {
  const std::string text =
      "\xEF\xBB\xBF"
      "cat\r\n\n"                                   // BOM, CRLF, empty line
      "caf\xC3\xA9\n"                               // café
      "two words\n"                                 // whitespace: invalid
      "tab\there\n"                                 // control: invalid
      "abcdefghij\n"                                // 10 code points: too long for max_len 5
      "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\n"  // 5 code points, 10 bytes: fits
      "dog";                                        // no final newline
  const WordListParse p = parse_word_list(text, "fixture", 5);
  EXPECT_EQ(p.words, (std::vector<std::string_view>{
                         "cat", "caf\xC3\xA9", "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9", "dog"}));
  EXPECT_EQ(p.lines, 7);
  EXPECT_EQ(p.invalid, 2);
  EXPECT_EQ(p.too_long, 1);
}

TEST(DataWordList, InvalidUtf8IsDataErrorWithLine) {
  expect_data_error([] { parse_word_list("ok\nfine\nbad\xE9word\n", "latin1-list", 24); },
                    {"latin1-list", "invalid UTF-8", "line 3", "byte 11"});
}

TEST(DataWordList, EmptyOrAllInvalidIsDataError) {
  expect_data_error([] { parse_word_list("", "empty", 24); }, {"empty", "no usable word"});
  using namespace std::string_view_literals;
  expect_data_error([] { parse_word_list("ok\nfine\nb\0d\n"sv, "nul-list", 24); },
                    {"nul-list", "NUL byte", "line 3"});
  expect_data_error([] { parse_word_list("\n\r\n\n", "blank", 24); }, {"no usable word"});
  expect_data_error([] { parse_word_list("a b\nverylongword\n", "bad", 5); },
                    {"bad", "2 non-empty lines, 1 too long, 1 with whitespace"});
}

TEST(DataWordList, LanguageAndPackageNames) {
  EXPECT_EQ(language_of_list("american-english"), "english");
  EXPECT_EQ(language_of_list("british-english-huge"), "english");
  EXPECT_EQ(language_of_list("ngerman"), "german");
  EXPECT_EQ(language_of_list("french"), "french");
  EXPECT_EQ(language_of_list("klingon"), "klingon");
  EXPECT_EQ(package_of_list("american-english"), "wamerican");
  EXPECT_EQ(package_of_list("american-english-huge"), "wamerican-huge");
  EXPECT_EQ(package_of_list("ngerman"), "wngerman");
  EXPECT_EQ(package_of_list("italian"), "witalian");
}

TEST(DataWords, AmbiguousWordsAreDroppedCaseIsKept) {
  const Lists lists = {{"french", "chat\na\nradio\nchien\nchien\n"},
                       {"american-english", "cat\ndog\na\nradio\nHaus\nchat\n"},
                       {"ngerman", "Katze\nradio\nhaus\n"}};
  auto ds = WordLanguages::from_lists(lists, all_train());
  EXPECT_EQ(ds->languages(), (std::vector<std::string>{"english", "french", "german"}));
  EXPECT_EQ(ds->list_files(), (std::vector<std::string>{"american-english", "french", "ngerman"}));
  EXPECT_EQ(ds->num_classes(), 3);
  EXPECT_EQ(words_of(*ds, 0), (std::set<std::string>{"cat", "dog", "Haus"}));
  EXPECT_EQ(words_of(*ds, 1), (std::set<std::string>{"chien"}));  // counted once
  EXPECT_EQ(words_of(*ds, 2), (std::set<std::string>{"Katze", "haus"}));
  EXPECT_EQ(ds->stats().ambiguous, 3);  // a, radio, chat
  EXPECT_EQ(ds->stats().per_language, (std::vector<std::int64_t>{3, 1, 2}));
  // Order: language, then list file, then line.
  EXPECT_EQ(ds->word(0), "cat");
  EXPECT_EQ(ds->word(3), "chien");
  EXPECT_EQ(ds->word(4), "Katze");
}

TEST(DataWords, ListsOfOneLanguageAreMerged) {
  const Lists lists = {{"british-english", "colour\nword\n"},
                       {"american-english", "color\nword\n"},
                       {"spanish", "palabra\n"}};
  auto ds = WordLanguages::from_lists(lists, all_train());
  EXPECT_EQ(ds->languages(), (std::vector<std::string>{"english", "spanish"}));
  EXPECT_EQ(words_of(*ds, 0), (std::set<std::string>{"color", "colour", "word"}));
  EXPECT_EQ(ds->stats().ambiguous, 0);
  EXPECT_EQ(ds->word(0), "color");  // american-english sorts before british-english
}

TEST(DataWords, VocabularyIsSortedCodePointsOfTrainingWords) {
  const Lists lists = {{"french", "\xC3\xA9t\xC3\xA9\nabc\n"},
                       {"spanish", "ba\xC3\xB1o\n\xF0\x9F\x98\x80x\n"}};
  auto ds = WordLanguages::from_lists(lists, all_train());
  EXPECT_EQ(ds->code_points(),
            (std::vector<char32_t>{U'a', U'b', U'c', U'o', U't', U'x', 0xE9, 0xF1, 0x1F600}));
  EXPECT_EQ(ds->vocab_size(), 11);
  EXPECT_EQ(ds->id_of(U'a'), 2);
  EXPECT_EQ(ds->id_of(0xF1), 9);
  EXPECT_EQ(ds->id_of(0x1F600), 10);
  EXPECT_EQ(ds->id_of(U'z'), WordLanguages::kUnk);
  ASSERT_EQ(ds->word(0), "\xC3\xA9t\xC3\xA9");
  std::int32_t ids[6];
  ds->decode_tokens(0, ids, 6);
  EXPECT_EQ(std::vector<std::int32_t>(ids, ids + 6), (std::vector<std::int32_t>{8, 6, 8, 0, 0, 0}));
  EXPECT_EQ(ds->length(0), 3);
  ds->decode_tokens(3, ids, 2);  // the emoji word, outside the Basic Multilingual Plane
  EXPECT_EQ(std::vector<std::int32_t>(ids, ids + 2), (std::vector<std::int32_t>{10, 7}));
  EXPECT_EQ(ds->word(3), "\xF0\x9F\x98\x80x");
  EXPECT_EQ(ds->sample_shape(), (Shape{24}));
  EXPECT_THROW(ds->decode_tokens(0, ids, 2), InvalidArgument);
}

/// 400 distinct generated words per language, letters chosen so both lists share none.
Lists generated_lists() {
  std::string en, fr;
  for (int i = 0; i < 400; ++i) {
    en += std::string(1, static_cast<char>('a' + i % 13)) + std::to_string(i) + "\n";
    fr += "\xC3\xA9" + std::string(1, static_cast<char>('n' + i % 13)) + std::to_string(i) + "\n";
  }
  return {{"american-english", en}, {"french", fr}};
}

TEST(DataWords, SplitIsDeterministicDisjointAndSeeded) {
  const Lists lists = generated_lists();
  WordOptions o;
  o.test_fraction = 0.25;
  auto train = WordLanguages::from_lists(lists, o);
  o.split = Split::kTest;
  auto test = WordLanguages::from_lists(lists, o);
  EXPECT_EQ(train->size() + test->size(), 800);
  EXPECT_GT(test->size(), 140);  // 200 expected; binomial sd ~12
  EXPECT_LT(test->size(), 260);
  std::set<std::string> a, b;
  for (std::int64_t i = 0; i < train->size(); ++i) a.insert(train->word(i));
  for (std::int64_t i = 0; i < test->size(); ++i) b.insert(test->word(i));
  for (const auto& w : b) EXPECT_EQ(a.count(w), 0u) << w;
  EXPECT_EQ(train->code_points(), test->code_points());  // shared vocabulary
  // Same seed, same split; another seed, another split.
  auto again = WordLanguages::from_lists(lists, o);
  ASSERT_EQ(again->size(), test->size());
  for (std::int64_t i = 0; i < test->size(); ++i) EXPECT_EQ(again->word(i), test->word(i));
  o.split_seed = 7;
  auto other = WordLanguages::from_lists(lists, o);
  std::set<std::string> c;
  for (std::int64_t i = 0; i < other->size(); ++i) c.insert(other->word(i));
  EXPECT_NE(b, c);
  // Membership of a word does not depend on the other lists installed.
  o.split_seed = 0;
  auto with_more =
      WordLanguages::from_lists({lists[0], lists[1], {"italian", "parola\nciao\n"}}, o);
  std::set<std::string> d;
  for (std::int64_t i = 0; i < with_more->size(); ++i) {
    if (with_more->languages()[with_more->label(i)] != "italian") d.insert(with_more->word(i));
  }
  EXPECT_EQ(b, d);
}

TEST(DataWords, TestWordsWithUnseenCodePointsMapToUnk) {
  WordOptions o;
  o.test_fraction = 0.5;
  o.split = Split::kTest;
  Lists lists = generated_lists();
  auto test = WordLanguages::from_lists(lists, o);
  o.split = Split::kTrain;
  auto train = WordLanguages::from_lists(lists, o);
  std::set<char32_t> train_cps;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    std::u32string cps;
    ASSERT_TRUE(decode_utf8(train->word(i), &cps));
    train_cps.insert(cps.begin(), cps.end());
  }
  EXPECT_EQ(std::vector<char32_t>(train_cps.begin(), train_cps.end()), train->code_points());
  std::int32_t ids[24];
  for (std::int64_t i = 0; i < test->size(); ++i) {
    test->decode_tokens(i, ids, 24);
    for (std::int32_t k = 0; k < test->length(i); ++k) EXPECT_GE(ids[k], WordLanguages::kUnk);
  }
}

TEST(DataWords, CapPerLanguageKeepsSplitsDisjoint) {
  WordOptions o;
  o.max_words_per_language = 50;
  o.test_fraction = 0.2;
  auto train = WordLanguages::from_lists(generated_lists(), o);
  o.split = Split::kTest;
  auto test = WordLanguages::from_lists(generated_lists(), o);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(train->stats().per_language[g] + test->stats().per_language[g], 50);
  }
}

TEST(DataWords, BadInputIsDataError) {
  expect_data_error(
      [] {
        WordLanguages::from_lists({{"french", "chat\n"}}, all_train());
      },
      {"1 language", "at least two"});
  expect_data_error(
      [] {
        WordLanguages::from_lists({{"french", "chat\n"}, {"spanish", "\n\n"}}, all_train());
      },
      {"spanish", "no usable word"});
  expect_data_error(
      [] {
        WordLanguages::from_lists({{"french", "chat\n"}, {"spanish", "gato\xF5\n"}}, all_train());
      },
      {"spanish", "invalid UTF-8", "line 1"});
  WordOptions test_none;
  test_none.test_fraction = 0.0;
  test_none.split = Split::kTest;
  expect_data_error(
      [&] {
        WordLanguages::from_lists({{"french", "chat\n"}, {"spanish", "gato\n"}}, test_none);
      },
      {"no word for the test split"});
}

class DictDir : public ::testing::Test {
 protected:
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  testing_util::TempDir tmp_{"mirror-dict"};
  std::filesystem::path dir_ = tmp_.path();
};

TEST_F(DictDir, DiscoversListsAndSkipsHelpers) {
  write("french", "chat\n");
  write("spanish", "gato\n");
  write("README.select-wordlist", "not words\n");
  write("connectives", "the\n");
  write("french.dpkg-old", "x\n");
  std::filesystem::create_symlink(dir_ / "french", dir_ / "words");
  std::filesystem::create_symlink(dir_ / "spanish", dir_ / "zz-alias");
  EXPECT_EQ(installed_word_lists(dir_.string()), (std::vector<std::string>{"french", "spanish"}));
  WordOptions o = all_train();
  o.dict_dir = dir_.string();
  auto ds = WordLanguages::load(o);
  EXPECT_EQ(ds->languages(), (std::vector<std::string>{"french", "spanish"}));
  EXPECT_EQ(ds->size(), 2);
}

TEST_F(DictDir, MissingListNamesPackage) {
  write("french", "chat\n");
  WordOptions o;
  o.dict_dir = dir_.string();
  o.lists = {"french", "ngerman"};
  expect_data_error([&] { WordLanguages::load(o); }, {"ngerman", "not found", "wngerman"});
  o.dict_dir = (dir_ / "empty").string();
  o.lists.clear();
  expect_data_error([&] { WordLanguages::load(o); }, {"no word lists found", "wamerican"});
}

TEST(DataWordsReal, DebianListsLoad) {
  const std::vector<std::string> want = {"american-english", "french", "italian", "ngerman",
                                         "spanish"};
  for (const auto& l : want) {
    if (!std::filesystem::exists(std::string(kDictDir) + "/" + l)) {
      GTEST_SKIP() << kDictDir << "/" << l << " not installed (apt-get install "
                   << package_of_list(l) << ")";
    }
  }
  WordOptions o;
  o.lists = want;
  auto train = WordLanguages::load(o);
  EXPECT_EQ(train->languages(),
            (std::vector<std::string>{"english", "french", "german", "italian", "spanish"}));
  const auto& per = train->stats().per_language;
  ASSERT_EQ(per.size(), 5u);
  for (auto n : per) EXPECT_GT(n, 50000);
  EXPECT_GT(train->stats().ambiguous, 1000);
  EXPECT_LT(train->vocab_size(), 200);
  for (char32_t c : {U'a', U'z', U'A', char32_t{0xE9}, char32_t{0xDF}, char32_t{0xF1}}) {
    EXPECT_GE(train->id_of(c), 2) << static_cast<std::uint32_t>(c);
  }
  const std::map<std::string, std::string> known = {
      {"Katze", "german"}, {"gatto", "italian"}, {"perro", "spanish"}, {"cat", "english"}};
  std::map<std::string, std::string> found;
  std::int32_t longest = 0;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    longest = std::max(longest, train->length(i));
    if (train->length(i) <= 5) {
      const std::string w = train->word(i);
      if (known.count(w)) found[w] = train->languages()[train->label(i)];
    }
  }
  EXPECT_LE(longest, 24);
  EXPECT_GE(found.size(), 3u);  // each word is in the test split with probability 0.1
  for (const auto& [w, lang] : found) EXPECT_EQ(lang, known.at(w)) << w;
  for (const auto& w : {"radio", "chat", "a"}) EXPECT_EQ(found.count(w), 0u) << w;
}

}  // namespace
}  // namespace mirror::data
