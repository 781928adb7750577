// ops.h entry points of the normalisation, average-pooling, block-copy and GELU ops: argument
// checks, then the device's KernelSet; concat/split/pad/crop are built here from copy_block, so
// a backend implements one strided copy instead of four layouts.
#include <algorithm>
#include <string>

#include "backend.h"
#include "mirror/ops.h"

namespace mirror::ops {
namespace {

#define MIRROR_REQUIRE(cond, op, what) \
  MIRROR_CHECK(cond, InvalidArgument, std::string(op) + ": " + (what))

void require_float(const Tensor& t, const char* op) {
  MIRROR_REQUIRE(t.defined() && (t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64), op,
                 "expected a float32 or float64 tensor, got " + (t.defined() ? t.str() : "none"));
}

void require_like(const Tensor& a, const Tensor& b, const char* op) {
  MIRROR_REQUIRE(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(), op,
                 "shapes/dtypes/devices differ: " + a.str() + " vs " + b.str());
}

void require_view(const Tensor& a, const ChannelView& v, const char* op) {
  MIRROR_REQUIRE(v.outer > 0 && v.channels > 0 && v.inner > 0 && v.numel() == a.numel(), op,
                 "view [" + std::to_string(v.outer) + ", " + std::to_string(v.channels) + ", " +
                     std::to_string(v.inner) + "] does not cover " + a.str());
  // A blocked view reads a as [N, C/b, H, W, b] (Note [Channel view]); a plain view of a blocked
  // image would mix channels.
  MIRROR_REQUIRE(image_block(a) == v.block, op,
                 "view block " + std::to_string(v.block) + " but the tensor is " + a.str());
  if (v.block == 0) return;
  MIRROR_REQUIRE(a.dim(0) == v.outer && a.dim(1) * v.block == v.channels &&
                     a.dim(2) * a.dim(3) == v.inner,
                 op,
                 "blocked view [" + std::to_string(v.outer) + ", " + std::to_string(v.channels) +
                     ", " + std::to_string(v.inner) + "] does not match " + a.str());
  MIRROR_REQUIRE(kernels_for(a.device()).blocked_images(), op,
                 "the " + std::string(kernels_for(a.device()).name()) +
                     " backend has no blocked images, got " + a.str());
}

void require_coefficients(const std::vector<double>& k, const ChannelView& v, bool optional,
                          const char* op, const char* what) {
  MIRROR_REQUIRE((optional && k.empty()) || static_cast<std::int64_t>(k.size()) == v.channels, op,
                 std::string(what) + ": expected " + std::to_string(v.channels) +
                     " coefficients, got " + std::to_string(k.size()));
}

/// Largest offset + 1 a block copy touches on one side (its lowest is the offset: strides >= 0).
std::int64_t block_extent(const std::int64_t* dims, const std::int64_t* strides,
                          std::int64_t offset) {
  std::int64_t last = offset;
  for (int k = 0; k < 4; ++k) last += (dims[k] - 1) * strides[k];
  return last + 1;
}

}  // namespace

std::vector<double> channel_sums(const Tensor& a, const Tensor& b, const ChannelView& v) {
  require_float(a, "channel_sums");
  require_like(a, b, "channel_sums");
  require_view(a, v, "channel_sums");
  return kernels_for(a.device()).channel_sums(a, b, v);
}

namespace {

/// k with every vector but kb full (zeros for the empty ones): what backends see; kb's
/// emptiness says whether b takes part.
ChannelAffine filled(const ChannelAffine& k, const ChannelView& v) {
  const auto zeros = std::vector<double>(static_cast<std::size_t>(v.channels), 0.0);
  ChannelAffine full = k;
  for (std::vector<double>* x : {&full.ca, &full.k0}) {
    if (x->empty()) *x = zeros;
  }
  if (!full.kb.empty() && full.cb.empty()) full.cb = zeros;
  return full;
}

void require_affine(const Tensor& a, const Tensor& b, const ChannelAffine& k,
                    const ChannelView& v) {
  require_float(a, "channel_affine");
  require_view(a, v, "channel_affine");
  require_coefficients(k.ka, v, false, "channel_affine", "ka");
  require_coefficients(k.ca, v, true, "channel_affine", "ca");
  require_coefficients(k.kb, v, true, "channel_affine", "kb");
  require_coefficients(k.cb, v, true, "channel_affine", "cb");
  require_coefficients(k.k0, v, true, "channel_affine", "k0");
  MIRROR_REQUIRE(k.kb.empty() || b.defined(), "channel_affine", "kb given without b");
  if (!k.kb.empty()) require_like(a, b, "channel_affine");
}

void require_mask(const Tensor& a, const Tensor& b, const ReluMask& mask, const ChannelView& v,
                  const char* op) {
  MIRROR_REQUIRE(b.defined(), op, "a ReLU mask needs b, the tensor it is computed from");
  require_like(a, b, op);
  require_coefficients(mask.ka, v, false, op, "mask ka");
  require_coefficients(mask.ca, v, false, op, "mask ca");
  require_coefficients(mask.k0, v, false, op, "mask k0");
}

/// Note [BatchNorm and ReLU] on a backend that does not fuse it: a read as (m(b) > 0 ? a : 0)
/// through the ReLU's own backward, m(b) recomputed by channel_affine.
Tensor masked(KernelSet& k, const Tensor& a, const Tensor& b, const ReluMask& mask,
              const ChannelView& v) {
  const Tensor m = k.channel_affine(b, {}, filled({.ka = mask.ka, .ca = mask.ca, .k0 = mask.k0}, v), v);
  return k.activation_backward(Activation::kRelu, m, a);
}

/// Note [Gradients as convolution operands]: channel_affine (masked when `mask`) as
/// conv2d_operand makes its result: the backend's kernel where it has one (a kernel that fuses
/// the ReLU and the mask), else the map and then conv2d_operand.
Tensor affine_operand(KernelSet& kernels, const Tensor& a, const Tensor& b, const ChannelAffine& k,
                      const ChannelView& v, const ReluMask* mask) {
  ChannelAffine rest = filled(k, v);
  rest.conv_operand = false;
  if (kernels.fused_channel_relu()) {
    if (Tensor t = kernels.channel_affine_operand(a, b, rest, mask, v); t.defined()) return t;
  }
  return conv2d_operand(mask != nullptr ? channel_affine(a, b, rest, v, *mask)
                                        : channel_affine(a, b, rest, v));
}

}  // namespace

std::vector<double> channel_sums(const Tensor& a, const Tensor& b, const ChannelView& v,
                                 const ReluMask& mask) {
  require_float(a, "channel_sums");
  require_view(a, v, "channel_sums");
  require_mask(a, b, mask, v, "channel_sums");
  KernelSet& k = kernels_for(a.device());
  if (k.fused_channel_relu()) return k.channel_sums_masked(a, b, mask, v);
  return k.channel_sums(masked(k, a, b, mask, v), b, v);
}

Tensor channel_affine(const Tensor& a, const Tensor& b, const ChannelAffine& k,
                      const ChannelView& v) {
  require_affine(a, b, k, v);
  KernelSet& kernels = kernels_for(a.device());
  if (k.conv_operand) return affine_operand(kernels, a, b, k, v, nullptr);
  if (!k.relu || kernels.fused_channel_relu()) return kernels.channel_affine(a, b, filled(k, v), v);
  ChannelAffine plain = filled(k, v);
  plain.relu = false;
  return kernels.activation_forward(Activation::kRelu, kernels.channel_affine(a, b, plain, v));
}

Tensor channel_affine(const Tensor& a, const Tensor& b, const ChannelAffine& k,
                      const ChannelView& v, const ReluMask& mask) {
  require_affine(a, b, k, v);
  require_mask(a, b, mask, v, "channel_affine");
  KernelSet& kernels = kernels_for(a.device());
  if (k.conv_operand) return affine_operand(kernels, a, b, k, v, &mask);
  if (kernels.fused_channel_relu()) return kernels.channel_affine_masked(a, b, filled(k, v), mask, v);
  ChannelAffine plain = filled(k, v);
  plain.relu = false;
  const Tensor y = kernels.channel_affine(masked(kernels, a, b, mask, v), b, plain, v);
  return k.relu ? kernels.activation_forward(Activation::kRelu, y) : y;
}

Tensor avgpool2d_forward(const Tensor& x, const Pool2DGeometry& g) {
  require_float(x, "avgpool2d_forward");
  MIRROR_REQUIRE(x.rank() == 4, "avgpool2d_forward", "expected NCHW, got " + x.str());
  MIRROR_REQUIRE(g.k_h > 0 && g.k_w > 0 && g.stride_h > 0 && g.stride_w > 0 && g.pad_top >= 0 &&
                     g.pad_left >= 0 && g.pad_top < g.k_h && g.pad_bottom < g.k_h &&
                     g.pad_left < g.k_w && g.pad_right < g.k_w,
                 "avgpool2d_forward", "bad window, stride or padding");
  MIRROR_REQUIRE(g.out_h(static_cast<int>(x.dim(2))) > 0 && g.out_w(static_cast<int>(x.dim(3))) > 0,
                 "avgpool2d_forward", "window larger than the input " + x.str());
  return kernels_for(x.device()).avgpool2d_forward(x, g);
}

Tensor avgpool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DGeometry& g) {
  require_float(dy, "avgpool2d_backward");
  MIRROR_REQUIRE(
      x_shape.size() == 4 && dy.rank() == 4 && dy.dim(0) == x_shape[0] && dy.dim(1) == x_shape[1] &&
          dy.dim(2) == g.out_h(static_cast<int>(x_shape[2])) &&
          dy.dim(3) == g.out_w(static_cast<int>(x_shape[3])),
      "avgpool2d_backward", "dy " + dy.str() + " is not the pooled shape of " + shape_str(x_shape));
  return kernels_for(dy.device()).avgpool2d_backward(dy, x_shape, g);
}

void copy_block(Tensor& dst, const Tensor& src, const BlockCopy& b) {
  MIRROR_REQUIRE(
      dst.defined() && src.defined() && dst.dtype() == src.dtype() && dst.device() == src.device(),
      "copy_block", "dst and src must share dtype and device");
  for (int k = 0; k < 4; ++k) {
    MIRROR_REQUIRE(b.dims[k] > 0 && b.dst_strides[k] >= 0 && b.src_strides[k] >= 0, "copy_block",
                   "dims must be positive and strides non-negative");
  }
  MIRROR_REQUIRE(
      b.dst_offset >= 0 && block_extent(b.dims, b.dst_strides, b.dst_offset) <= dst.numel(),
      "copy_block", "the block overruns dst " + dst.str());
  MIRROR_REQUIRE(
      b.src_offset >= 0 && block_extent(b.dims, b.src_strides, b.src_offset) <= src.numel(),
      "copy_block", "the block overruns src " + src.str());
  kernels_for(dst.device()).copy_block(dst, src, b);
}

namespace {

/// The block that moves channels [c0, c0 + c) of a [N, C_big, inner] tensor to or from a
/// [N, c, inner] one (`into_big`: the big tensor is the destination).
BlockCopy channel_block(std::int64_t n, std::int64_t c_big, std::int64_t c0, std::int64_t c,
                        std::int64_t inner, bool into_big) {
  BlockCopy b;
  b.dims[0] = n;
  b.dims[1] = c * inner;
  std::int64_t big_stride[4] = {c_big * inner, 1, 0, 0};
  std::int64_t small_stride[4] = {c * inner, 1, 0, 0};
  for (int k = 0; k < 4; ++k) {
    b.dst_strides[k] = into_big ? big_stride[k] : small_stride[k];
    b.src_strides[k] = into_big ? small_stride[k] : big_stride[k];
  }
  (into_big ? b.dst_offset : b.src_offset) = c0 * inner;
  return b;
}

}  // namespace

Tensor concat_channels(const std::vector<Tensor>& xs) {
  MIRROR_REQUIRE(!xs.empty(), "concat_channels", "no inputs");
  const Tensor& first = xs[0];
  MIRROR_REQUIRE(first.defined() && first.rank() >= 2, "concat_channels",
                 "expected [N, C, ...] inputs, got " + (first.defined() ? first.str() : "none"));
  std::int64_t channels = 0;
  for (const Tensor& x : xs) {
    bool ok = x.defined() && x.rank() == first.rank() && x.dtype() == first.dtype() &&
              x.device() == first.device();
    for (int d = 0; ok && d < x.rank(); ++d) ok = d == 1 || x.dim(d) == first.dim(d);
    MIRROR_REQUIRE(ok, "concat_channels",
                   "inputs must agree in every dimension but 1: " + first.str() + " vs " +
                       (x.defined() ? x.str() : "none"));
    channels += x.dim(1);
  }
  Shape shape = first.shape();
  shape[1] = channels;
  Tensor y = Tensor::empty(shape, first.dtype(), first.device());
  const std::int64_t n = first.dim(0), inner = first.numel() / (n * first.dim(1));
  std::int64_t c0 = 0;
  for (const Tensor& x : xs) {
    copy_block(y, x, channel_block(n, channels, c0, x.dim(1), inner, true));
    c0 += x.dim(1);
  }
  return y;
}

std::vector<Tensor> split_channels(const Tensor& y, const std::vector<std::int64_t>& sizes) {
  std::int64_t total = 0;
  for (auto s : sizes) total += s;
  MIRROR_REQUIRE(y.defined() && y.rank() >= 2 && y.dim(1) == total, "split_channels",
                 "the sizes add up to " + std::to_string(total) + " channels but the tensor is " +
                     (y.defined() ? y.str() : "none"));
  const std::int64_t n = y.dim(0), inner = y.numel() / std::max<std::int64_t>(n * total, 1);
  std::vector<Tensor> out;
  std::int64_t c0 = 0;
  for (auto c : sizes) {
    Shape shape = y.shape();
    shape[1] = c;
    Tensor x = Tensor::empty(shape, y.dtype(), y.device());
    copy_block(x, y, channel_block(n, total, c0, c, inner, false));
    out.push_back(std::move(x));
    c0 += c;
  }
  return out;
}

namespace {

/// The block that moves a [N*C, H, W] image to or from rows/columns (top, left) of a padded
/// [N*C, H + top + bottom, W + left + right] one.
BlockCopy pad_block(const Shape& small, int top, int bottom, int left, int right, bool into_big) {
  const std::int64_t nc = small[0] * small[1], h = small[2], w = small[3];
  const std::int64_t ph = h + top + bottom, pw = w + left + right;
  BlockCopy b;
  b.dims[0] = nc;
  b.dims[1] = h;
  b.dims[2] = w;
  std::int64_t big_stride[4] = {ph * pw, pw, 1, 0};
  std::int64_t small_stride[4] = {h * w, w, 1, 0};
  for (int k = 0; k < 4; ++k) {
    b.dst_strides[k] = into_big ? big_stride[k] : small_stride[k];
    b.src_strides[k] = into_big ? small_stride[k] : big_stride[k];
  }
  (into_big ? b.dst_offset : b.src_offset) = top * pw + left;
  return b;
}

void require_pads(int top, int bottom, int left, int right, const char* op) {
  MIRROR_REQUIRE(top >= 0 && bottom >= 0 && left >= 0 && right >= 0, op,
                 "padding must be non-negative");
}

}  // namespace

Tensor zero_pad2d(const Tensor& x, int top, int bottom, int left, int right) {
  MIRROR_REQUIRE(x.defined() && x.rank() == 4, "zero_pad2d",
                 "expected NCHW, got " + (x.defined() ? x.str() : "none"));
  require_pads(top, bottom, left, right, "zero_pad2d");
  Tensor y = Tensor::zeros({x.dim(0), x.dim(1), x.dim(2) + top + bottom, x.dim(3) + left + right},
                           x.dtype(), x.device());
  copy_block(y, x, pad_block(x.shape(), top, bottom, left, right, true));
  return y;
}

Tensor crop2d(const Tensor& y, int top, int bottom, int left, int right) {
  MIRROR_REQUIRE(y.defined() && y.rank() == 4 && y.dim(2) > top + bottom && y.dim(3) > left + right,
                 "crop2d", "cannot crop " + (y.defined() ? y.str() : std::string("none")));
  require_pads(top, bottom, left, right, "crop2d");
  const Shape small = {y.dim(0), y.dim(1), y.dim(2) - top - bottom, y.dim(3) - left - right};
  Tensor x = Tensor::empty(small, y.dtype(), y.device());
  copy_block(x, y, pad_block(small, top, bottom, left, right, false));
  return x;
}

Tensor gelu_forward(const Tensor& x) {
  require_float(x, "gelu_forward");
  return kernels_for(x.device()).gelu_forward(x);
}

Tensor gelu_backward(const Tensor& x, const Tensor& dy) {
  require_float(x, "gelu_backward");
  require_like(x, dy, "gelu_backward");
  return kernels_for(x.device()).gelu_backward(x, dy);
}

}  // namespace mirror::ops
