// Shape helpers, apart from src/tensor.cpp so that the fuzz targets can compile the data sources
// alone (tensor.cpp pulls in the allocators and backends).
#include <string>

#include "mirror/error.h"
#include "mirror/tensor.h"

namespace mirror {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    MIRROR_CHECK(d >= 0, InvalidArgument, "negative dimension in shape " + shape_str(shape));
    n *= d;
  }
  return n;
}

}  // namespace mirror
