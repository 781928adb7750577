#include "mirror/tensor.h"

#include <cstring>
#include <sstream>

#include "backend.h"
#include "mirror/memory.h"

namespace mirror {

Storage::Storage(Device device, std::size_t bytes)
    : device_(device), bytes_(bytes), data_(allocator_for(device).allocate(bytes)) {}

Storage::~Storage() { allocator_for(device_).deallocate(data_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(device, t.nbytes());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes()) kernels_for(device).memset_zero(t.raw_data(), t.nbytes());
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  Tensor t = empty(shape, dtype_of<T>(), Device::cpu());
  MIRROR_CHECK(
      static_cast<std::int64_t>(values.size()) == t.numel(), InvalidArgument,
      "from_vector: " + std::to_string(values.size()) + " values for shape " + shape_str(shape));
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), t.nbytes());
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int r = rank();
  const int j = i < 0 ? i + r : i;
  MIRROR_CHECK(j >= 0 && j < r, InvalidArgument,
               "dimension " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return shape_[j];
}

Device Tensor::device() const {
  MIRROR_CHECK(defined(), InvalidArgument, "device() of an undefined tensor");
  return storage_->device();
}

void* Tensor::raw_data() const {
  MIRROR_CHECK(defined(), InvalidArgument, "data of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

void Tensor::check_dtype(DType want) const {
  MIRROR_CHECK(
      dtype_ == want, InvalidArgument,
      std::string("tensor holds ") + dtype_name(dtype_) + ", accessed as " + dtype_name(want));
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  const std::int64_t n = shape_numel(shape);
  MIRROR_CHECK(offset >= 0 && offset + n <= numel_, InvalidArgument,
               "view of " + std::to_string(n) + " elements at offset " + std::to_string(offset) +
                   " exceeds tensor " + str());
  Tensor t = *this;
  t.offset_bytes_ = offset_bytes_ + static_cast<std::size_t>(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  t.numel_ = n;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < static_cast<int>(s.size()); ++i) {
    if (s[i] == -1) {
      MIRROR_CHECK(infer < 0, InvalidArgument, "reshape: more than one -1 in " + shape_str(shape));
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    MIRROR_CHECK(known > 0 && numel_ % known == 0, InvalidArgument,
                 "reshape " + str() + " to " + shape_str(shape) + ": sizes do not divide");
    s[infer] = numel_ / known;
  }
  MIRROR_CHECK(shape_numel(s) == numel_, InvalidArgument,
               "reshape " + str() + " to " + shape_str(shape) + ": element counts differ");
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  Tensor t = empty(shape_, dtype_, target);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  MIRROR_CHECK(src.dtype_ == dtype_ && src.numel_ == numel_, InvalidArgument,
               "copy_from: " + src.str() + " into " + str());
  if (nbytes() == 0) return;
  const Device d = device(), s = src.device();
  KernelSet& k = kernels_for(d.is_cuda() ? d : s);
  k.copy(raw_data(), d, src.raw_data(), s, nbytes());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_dtype(dtype_of<T>());
  std::vector<T> out(static_cast<std::size_t>(numel_));
  if (numel_ == 0) return out;
  const Device d = device();
  kernels_for(d).copy(out.data(), Device::cpu(), raw_data(), d, nbytes());
  return out;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + "@" + device().str();
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  MIRROR_CHECK(t.defined(), InvalidArgument, std::string(what) + ": tensor is undefined");
  MIRROR_CHECK(t.shape() == expected, InvalidArgument,
               std::string(what) + ": expected shape " + shape_str(expected) + ", got " +
                   shape_str(t.shape()));
}

#define MIRROR_INSTANTIATE(T)                                                  \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&); \
  template std::vector<T> Tensor::to_vector<T>() const;
MIRROR_INSTANTIATE(float)
MIRROR_INSTANTIATE(double)
MIRROR_INSTANTIATE(std::int32_t)
MIRROR_INSTANTIATE(std::int64_t)
MIRROR_INSTANTIATE(std::uint8_t)
MIRROR_INSTANTIATE(Half)
MIRROR_INSTANTIATE(BFloat16)
#undef MIRROR_INSTANTIATE

}  // namespace mirror
