// defines: helpers shared by the data reader tests: expect_data_error, write_bytes, make_array.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "mirror/data/numeric_array.h"
#include "mirror/error.h"

namespace mirror::data::test {

using Bytes = std::vector<std::uint8_t>;

/// Expects a DataError whose message contains every one of `parts`.
template <class F>
void expect_data_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "expected DataError";
  } catch (const DataError& e) {
    for (const char* p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

inline std::string write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

inline std::string write_text(const std::filesystem::path& path, const std::string& text) {
  return write_bytes(path, Bytes(text.begin(), text.end()));
}

template <class T>
constexpr ElementType element_type_of() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return ElementType::kUInt8;
  if constexpr (std::is_same_v<T, std::int8_t>) return ElementType::kInt8;
  if constexpr (std::is_same_v<T, std::int16_t>) return ElementType::kInt16;
  if constexpr (std::is_same_v<T, std::uint16_t>) return ElementType::kUInt16;
  if constexpr (std::is_same_v<T, std::int32_t>) return ElementType::kInt32;
  if constexpr (std::is_same_v<T, std::int64_t>) return ElementType::kInt64;
  if constexpr (std::is_same_v<T, float>) return ElementType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return ElementType::kFloat64;
}

/// An array of `values` (little-endian, as NumericArray stores them) with `shape`.
template <class T>
NumericArray make_array(const std::vector<T>& values, std::vector<std::int64_t> shape) {
  NumericArray a;
  a.type = element_type_of<T>();
  a.shape = std::move(shape);
  a.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

}  // namespace mirror::data::test
