// The .npy reader. The header is a Python dict literal; this file parses the small subset
// NumPy writes ({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }) strictly, so a
// file it accepts is one NumPy would read the same way.
#include "mirror/data/npy.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "mirror/error.h"

namespace mirror::data {
namespace {

constexpr std::uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr int kMaxRank = 32;
constexpr const char* kConvertHint =
    "; save it with numpy.save(path, numpy.ascontiguousarray(a, dtype='<f4')) (or '<i8' for "
    "labels / token ids)";

/// A cursor over the header dict; every error names the file and the byte offset in the dict.
class DictParser {
 public:
  DictParser(std::string_view text, const std::string& name) : text_(text), name_(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(name_ + ": malformed .npy header: " + what + " at byte " +
                    std::to_string(pos_) +
                    " of the header dict; the file is corrupt or was not "
                    "written by numpy.save");
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'" + found());
  }
  std::string found() const {
    if (pos_ >= text_.size()) return ", found the end of the header";
    const char c = text_[pos_];
    if (c >= 0x20 && c < 0x7f) return std::string(", found '") + c + "'";
    return ", found byte " + std::to_string(static_cast<unsigned char>(c));
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  bool peek(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  std::string string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      fail("expected a quoted string" + found());
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    if (s.find('\\') != std::string::npos) fail("escape sequences are not supported in strings");
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::size_t n = std::strlen(word);
      if (text_.substr(pos_, n) == word) {
        pos_ += n;
        return value;
      }
    }
    fail("expected True or False" + found());
  }
  std::int64_t integer() {
    skip_space();
    const std::size_t start = pos_;
    std::int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      if (v > (INT64_MAX - digit) / 10) fail("dimension does not fit 64 bits");
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) fail("expected a non-negative integer dimension" + found());
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long suffix
    return v;
  }
  std::vector<std::int64_t> tuple() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (!eat(')')) {
      if (static_cast<int>(dims.size()) == kMaxRank)
        fail("more than " + std::to_string(kMaxRank) + " dimensions");
      dims.push_back(integer());
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return dims;
  }

 private:
  std::string_view text_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

ElementType parse_descr(const std::string& descr, const std::string& name) {
  auto unsupported = [&](const std::string& why) -> DataError {
    return DataError(name + ": .npy dtype '" + descr + "' is not supported (" + why +
                     "); expected one of |u1 |i1 <i2 <u2 <i4 <i8 <f4 <f8" + kConvertHint);
  };
  if (descr.size() != 3) {
    if (!descr.empty() && descr.find('O') != std::string::npos && descr.size() == 2)
      throw unsupported("object arrays hold pickled Python objects, not numbers");
    throw unsupported("not a plain numeric dtype");
  }
  const char order = descr[0];
  const std::string code = descr.substr(1);
  if (code[0] == 'O') throw unsupported("object arrays hold pickled Python objects, not numbers");
  static const std::pair<const char*, ElementType> kTypes[] = {
      {"u1", ElementType::kUInt8},   {"i1", ElementType::kInt8},   {"i2", ElementType::kInt16},
      {"u2", ElementType::kUInt16},  {"i4", ElementType::kInt32},  {"i8", ElementType::kInt64},
      {"f4", ElementType::kFloat32}, {"f8", ElementType::kFloat64}};
  const auto* it = std::find_if(std::begin(kTypes), std::end(kTypes),
                                [&](const auto& t) { return code == t.first; });
  if (it == std::end(kTypes)) throw unsupported("unsupported element type");
  const bool one_byte = element_size(it->second) == 1;
  if (order == '>' && !one_byte) throw unsupported("big-endian");
  if (order != '<' && order != '=' && !(one_byte && (order == '|' || order == '>')))
    throw unsupported("unknown byte order '" + std::string(1, order) + "'");
  return it->second;
}

/// Reads the dict: exactly the keys descr, fortran_order and shape, in any order.
void parse_dict(std::string_view text, const std::string& name, NpyHeader& out) {
  DictParser p(text, name);
  p.expect('{');
  bool has_descr = false, has_order = false, has_shape = false, fortran = false;
  std::string descr;
  while (!p.eat('}')) {
    const std::string key = p.string();
    p.expect(':');
    if (key == "descr" && !has_descr) {
      if (p.peek('[')) {
        throw DataError(name +
                        ": .npy dtype is a structured (record) dtype; only plain "
                        "numeric arrays are supported" +
                        std::string(kConvertHint));
      }
      descr = p.string();
      has_descr = true;
    } else if (key == "fortran_order" && !has_order) {
      fortran = p.boolean();
      has_order = true;
    } else if (key == "shape" && !has_shape) {
      out.shape = p.tuple();
      has_shape = true;
    } else {
      p.fail("unexpected or repeated key '" + key + "'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.fail("unexpected text after the dict");
  MIRROR_CHECK(has_descr && has_order && has_shape, DataError,
               name +
                   ": malformed .npy header: the dict must hold 'descr', 'fortran_order' "
                   "and 'shape'" +
                   std::string(has_descr ? "" : "; 'descr' is missing") +
                   (has_order ? "" : "; 'fortran_order' is missing") +
                   (has_shape ? "" : "; 'shape' is missing"));
  out.type = parse_descr(descr, name);
  MIRROR_CHECK(!fortran, DataError,
               name +
                   ": .npy array is in Fortran (column-major) order; only C order is "
                   "supported: save numpy.ascontiguousarray(a) instead");
}

std::uint32_t read_le(const std::uint8_t* p, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

const char* descr_of(ElementType type) {
  switch (type) {
    case ElementType::kUInt8:
      return "|u1";
    case ElementType::kInt8:
      return "|i1";
    case ElementType::kInt16:
      return "<i2";
    case ElementType::kUInt16:
      return "<u2";
    case ElementType::kInt32:
      return "<i4";
    case ElementType::kInt64:
      return "<i8";
    case ElementType::kFloat32:
      return "<f4";
    case ElementType::kFloat64:
      return "<f8";
  }
  return "?";
}

}  // namespace

bool is_npy(std::span<const std::uint8_t> file) {
  return file.size() >= 6 && std::equal(kMagic, kMagic + 6, file.begin());
}

NpyHeader parse_npy_header(std::span<const std::uint8_t> file, const std::string& name,
                           const NpyLimits& limits) {
  MIRROR_CHECK(is_npy(file), DataError,
               name + ": not a .npy file (it does not start with \\x93NUMPY)");
  MIRROR_CHECK(file.size() >= 10, DataError,
               name + ": .npy file is truncated inside its preamble (" +
                   std::to_string(file.size()) + " bytes)");
  const int major = file[6], minor = file[7];
  MIRROR_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, DataError,
               name + ": .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " is not supported (expected 1.0, 2.0 or 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  MIRROR_CHECK(file.size() >= 8u + len_bytes, DataError,
               name + ": .npy file is truncated inside its header length");
  const std::uint32_t header_len = read_le(file.data() + 8, len_bytes);
  MIRROR_CHECK(header_len <= limits.max_header, DataError,
               name + ": .npy header length " + std::to_string(header_len) + " exceeds " +
                   std::to_string(limits.max_header) + " bytes; the header is corrupt");
  NpyHeader out;
  out.data_offset = 8u + len_bytes + header_len;
  MIRROR_CHECK(file.size() >= out.data_offset, DataError,
               name + ": .npy file is truncated inside its header (" + std::to_string(header_len) +
                   " header bytes announced, " + std::to_string(file.size() - 8 - len_bytes) +
                   " present)");
  const std::string_view text(reinterpret_cast<const char*>(file.data()) + 8 + len_bytes,
                              header_len);
  parse_dict(text, name, out);
  out.data_bytes = checked_payload_bytes(out.shape, element_size(out.type), limits.max_bytes, name);
  const std::uint64_t present = file.size() - out.data_offset;
  MIRROR_CHECK(present >= out.data_bytes, DataError,
               name + ": .npy file is truncated: shape " + dims_str(out.shape) + " of " +
                   element_type_name(out.type) + " needs " + std::to_string(out.data_bytes) +
                   " bytes of data, found " + std::to_string(present));
  MIRROR_CHECK(present == out.data_bytes, DataError,
               name + ": " + std::to_string(present - out.data_bytes) +
                   " bytes after the data that the .npy header describes (shape " +
                   dims_str(out.shape) + " of " + element_type_name(out.type) +
                   "); the header disagrees with the file size");
  return out;
}

NumericArray parse_npy(std::span<const std::uint8_t> file, const std::string& name,
                       const NpyLimits& limits) {
  const NpyHeader h = parse_npy_header(file, name, limits);
  NumericArray out;
  out.type = h.type;
  out.shape = h.shape;
  out.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(h.data_offset), file.end());
  return out;
}

std::vector<std::uint8_t> encode_npy(const NumericArray& array) {
  std::string dict = std::string("{'descr': '") + descr_of(array.type) +
                     "', 'fortran_order': False, 'shape': " + dims_str(array.shape) + ", }";
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  MIRROR_CHECK(dict.size() <= 0xFFFF, InvalidArgument, "encode_npy: header too long");
  std::vector<std::uint8_t> out(kMagic, kMagic + 6);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<std::uint8_t>(dict.size() & 0xFF));
  out.push_back(static_cast<std::uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), array.bytes.begin(), array.bytes.end());
  return out;
}

}  // namespace mirror::data
