// Word lists -> (code-point ids, language) samples. The rules are in Note [Word rules] in
// mirror/data/words.h; this file implements them in the order the note lists them.
#include "mirror/data/words.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "mirror/error.h"

namespace mirror::data {
namespace {

/// Decodes one code point at text[pos]; advances pos. False for invalid UTF-8.
bool next_code_point(std::string_view text, std::size_t& pos, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  int len = 0;
  char32_t min = 0;
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return false;  // continuation byte, C0/C1 overlong lead, or F5..FF
  }
  if (text.size() - pos < static_cast<std::size_t>(len)) return false;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += len;
  return true;
}

/// Whitespace and control characters cannot be part of a word.
bool word_character(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return false;
  switch (cp) {
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return false;
    default:
      return !(cp >= 0x2000 && cp <= 0x200A);
  }
}

std::string word_list_counts(const WordListParse& p) {
  return std::to_string(p.lines) + " non-empty lines, " + std::to_string(p.too_long) +
         " too long, " + std::to_string(p.invalid) + " with whitespace or control characters";
}

}  // namespace

bool decode_utf8(std::string_view text, std::u32string* out, std::size_t* bad_offset) {
  std::size_t pos = 0;
  if (out) out->clear();
  while (pos < text.size()) {
    char32_t cp = 0;
    const std::size_t at = pos;
    if (!next_code_point(text, pos, cp)) {
      if (bad_offset) *bad_offset = at;
      return false;
    }
    if (out) out->push_back(cp);
  }
  return true;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  for (char32_t cp : text) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

WordListParse parse_word_list(std::string_view bytes, const std::string& name, int max_len) {
  MIRROR_CHECK(max_len >= 1, InvalidArgument,
               "word max_len must be >= 1, got " + std::to_string(max_len));
  // A NUL is valid UTF-8 but never text: a binary or UTF-16 file would otherwise be skipped
  // line by line as "invalid words" and fail later, far from the cause.
  if (const std::size_t nul = bytes.find('\0'); nul != std::string_view::npos) {
    const auto line =
        1 + std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(nul), '\n');
    throw DataError(name + ": contains a NUL byte at line " + std::to_string(line) + ", byte " +
                    std::to_string(nul) +
                    "; a word list is UTF-8 text, one word per line (is it binary or UTF-16? "
                    "convert it with iconv, or leave this list out)");
  }
  WordListParse out;
  std::size_t pos = bytes.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  std::int64_t line_no = 0;
  while (pos < bytes.size()) {
    std::size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    std::string_view line = bytes.substr(pos, end - pos);
    const std::size_t line_start = pos;
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    ++out.lines;
    std::size_t at = 0;
    std::int64_t count = 0;
    bool valid = true;
    while (at < line.size()) {
      char32_t cp = 0;
      const std::size_t before = at;
      if (!next_code_point(line, at, cp)) {
        throw DataError(name + ": invalid UTF-8 at line " + std::to_string(line_no) + ", byte " +
                        std::to_string(line_start + before) +
                        "; word lists must be UTF-8 (convert it with iconv, or leave this list "
                        "out)");
      }
      valid = valid && word_character(cp);
      ++count;
    }
    if (!valid)
      ++out.invalid;
    else if (count > max_len)
      ++out.too_long;
    else
      out.words.push_back(line);
  }
  MIRROR_CHECK(!out.words.empty(), DataError,
               name + ": word list has no usable word (" + word_list_counts(out) +
                   "); expected one word per line, at most " + std::to_string(max_len) +
                   " characters");
  return out;
}

std::string language_of_list(const std::string& file) {
  static const std::map<std::string, std::string> known = {{"ngerman", "german"},
                                                           {"ogerman", "german"},
                                                           {"swiss", "german"},
                                                           {"bokmaal", "norwegian"},
                                                           {"nynorsk", "norwegian"},
                                                           {"catala", "catalan"},
                                                           {"brazilian", "portuguese-brazil"}};
  if (auto it = known.find(file); it != known.end()) return it->second;
  if (file.find("-english") != std::string::npos) return "english";
  return file;
}

std::string package_of_list(const std::string& file) {
  static const std::map<std::string, std::string> known = {
      {"ngerman", "wngerman"},       {"ogerman", "wogerman"},    {"swiss", "wswiss"},
      {"french", "wfrench"},         {"spanish", "wspanish"},    {"italian", "witalian"},
      {"bokmaal", "wnorwegian"},     {"nynorsk", "wnorwegian"},  {"catala", "wcatalan"},
      {"portuguese", "wportuguese"}, {"brazilian", "wbrazilian"}};
  if (auto it = known.find(file); it != known.end()) return it->second;
  if (auto dash = file.find("-english"); dash != std::string::npos) {
    return "w" + file.substr(0, dash) +
           file.substr(dash + 8);  // american-english-huge -> wamerican-huge
  }
  return "w" + file;
}

std::vector<std::string> installed_word_lists(const std::string& dict_dir) {
  namespace fs = std::filesystem;
  static const std::vector<std::string> helpers = {"connectives", "propernames", "web2", "web2a",
                                                   "cracklib-small"};
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dict_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || name.starts_with("README") || name == "words" ||
        name.starts_with("words.") || name.find(".dpkg-") != std::string::npos ||
        name.back() == '~' || std::find(helpers.begin(), helpers.end(), name) != helpers.end()) {
      continue;
    }
    std::error_code ec2;
    if (fs::is_regular_file(entry.path(), ec2)) names.push_back(name);
  }
  // Sorted first, so when two names reach the same file the one that sorts first is kept
  // whatever order the directory lists them in.
  std::sort(names.begin(), names.end());
  std::vector<std::string> out;
  std::vector<fs::path> seen;
  for (const auto& name : names) {
    std::error_code ec2;
    const fs::path canonical = fs::canonical(fs::path(dict_dir) / name, ec2);
    if (ec2 || std::find(seen.begin(), seen.end(), canonical) != seen.end()) continue;
    seen.push_back(canonical);
    out.push_back(name);
  }
  return out;
}

}  // namespace mirror::data
