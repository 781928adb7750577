// defines: TextLines, the numbered lines of a text file, shared by the CSV and token-text parsers.
#pragma once

#include <cstdint>
#include <string_view>

namespace mirror::data::detail {

/// Walks `text` one line at a time: next() yields each line without its "\n" or "\r\n" ending,
/// and number() is that line's 1-based number (for messages). A leading UTF-8 byte-order mark is
/// skipped.
class TextLines {
 public:
  explicit TextLines(std::string_view text) : text_(text) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") text_.remove_prefix(3);
  }

  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    ++number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
  }
  std::int64_t number() const { return number_; }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::int64_t number_ = 0;
};

}  // namespace mirror::data::detail
