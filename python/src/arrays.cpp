// NumPy arrays in and out: borrowed without a copy into the data readers (Note [Zero-copy
// arrays]), tensors copied out into new NumPy arrays.
#include <cstring>
#include <memory>
#include <vector>

#include "bindings.h"
#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::python {
namespace {

/// The NumericArray element type of a DLPack dtype; false for one the readers do not take.
bool element_type_of(nb::dlpack::dtype t, data::ElementType& out) {
  using data::ElementType;
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes != 1) return false;
  const std::pair<std::pair<Code, int>, ElementType> table[] = {
      {{Code::UInt, 8}, ElementType::kUInt8},     {{Code::Int, 8}, ElementType::kInt8},
      {{Code::Int, 16}, ElementType::kInt16},     {{Code::UInt, 16}, ElementType::kUInt16},
      {{Code::Int, 32}, ElementType::kInt32},     {{Code::Int, 64}, ElementType::kInt64},
      {{Code::Float, 32}, ElementType::kFloat32}, {{Code::Float, 64}, ElementType::kFloat64}};
  for (const auto& [key, type] : table) {
    if (key.first == code && key.second == t.bits) {
      out = type;
      return true;
    }
  }
  return false;
}

std::string dtype_text(nb::dlpack::dtype t) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  const std::string kind = code == Code::Int       ? "int"
                           : code == Code::UInt    ? "uint"
                           : code == Code::Float   ? "float"
                           : code == Code::Bfloat  ? "bfloat"
                           : code == Code::Complex ? "complex"
                           : code == Code::Bool    ? "bool"
                                                   : "(DLPack code " + std::to_string(t.code) + ")";
  return code == Code::Bool ? kind : kind + std::to_string(t.bits);
}

template <class T>
nb::object numpy_copy(const Tensor& t) {
  auto* values = new std::vector<T>(t.to_vector<T>());
  nb::capsule owner(values, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  return nb::cast(nb::ndarray<nb::numpy, T>(values->data(), shape.size(), shape.data(), owner));
}

}  // namespace

// Note [Zero-copy arrays]: fit() reads x and y where NumPy keeps them. The NumericArray borrows
// the elements and holds a reference to the ndarray (nanobind's handle takes the GIL itself
// when the last reference goes, so the loader's threads may drop it); a C-contiguous array of
// a dtype the readers take (uint8 ... float64) is never copied, anything else is copied once by
// nanobind into a contiguous array first. tests/python/test_arrays.py proves it: the dataset
// reads the same address, and a change to the array shows in the samples it decodes.
data::NumericArray borrow_array(const CpuArray& array, const std::string& name) {
  data::NumericArray out;
  MIRROR_CHECK(element_type_of(array.dtype(), out.type), DataError,
               name + ": NumPy dtype " + dtype_text(array.dtype()) +
                   " is not read by Mirror; convert it with astype(numpy.float32) (features, "
                   "float targets) or astype(numpy.int64) (class labels, token ids)");
  for (std::size_t i = 0; i < array.ndim(); ++i) {
    out.shape.push_back(static_cast<std::int64_t>(array.shape(i)));
  }
  out.borrowed = static_cast<const std::uint8_t*>(array.data());
  out.owner = std::make_shared<CpuArray>(array);
  return out;
}

nb::object to_numpy(const Tensor& tensor) {
  const Tensor t = tensor.to(Device::cpu());
  switch (t.dtype()) {
    case DType::kFloat64:
      return numpy_copy<double>(t);
    case DType::kInt32:
      return numpy_copy<std::int32_t>(t);
    case DType::kInt64:
      return numpy_copy<std::int64_t>(t);
    case DType::kFloat32:
      return numpy_copy<float>(t);
    default:  // float16 / bfloat16 (a checkpoint kept in another precision) as float32
      return numpy_copy<float>(ops::cast(t, DType::kFloat32));
  }
}

Tensor to_tensor(const CpuArray& array, const std::string& name) {
  const data::NumericArray a = borrow_array(array, name);
  const Shape shape(a.shape.begin(), a.shape.end());
  std::vector<float> values(static_cast<std::size_t>(a.numel()));
  for (std::int64_t i = 0; i < a.numel(); ++i) values[i] = static_cast<float>(a.value(i));
  return Tensor::from_vector<float>(values, shape);
}

}  // namespace mirror::python
