// ops.h entry points: check that the tensors share one device and have sane ranks, then call
// that device's KernelSet. Backends may assume what is checked here.
#include <algorithm>
#include <initializer_list>

#include "backend.h"
#include "mirror/ops.h"

namespace mirror::ops {
namespace {

KernelSet& backend(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    MIRROR_CHECK(t->device() == first->device(), InvalidArgument,
                 std::string(op) + ": tensors on different devices (" + first->str() + " and " +
                     t->str() + ")");
  }
  MIRROR_CHECK(first != nullptr, InvalidArgument, std::string(op) + ": no defined tensor");
  return kernels_for(first->device());
}

// The message is built only when the check fails: these run on every op of every step.
#define MIRROR_REQUIRE(cond, op, what) \
  MIRROR_CHECK(cond, InvalidArgument, std::string(op) + ": " + (what))

void require_float(const Tensor& t, const char* op) {
  MIRROR_REQUIRE(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64, op,
                 "expected float32 or float64, got " + t.str());
}

void require_same(const Tensor& a, const Tensor& b, const char* op) {
  MIRROR_REQUIRE(a.shape() == b.shape() && a.dtype() == b.dtype(), op,
                 "shapes/dtypes differ: " + a.str() + " vs " + b.str());
}

void require_pool_geometry(const Pool2DGeometry& g, const char* op) {
  // With padding >= window a window could lie entirely in the padding and have no maximum.
  MIRROR_REQUIRE(g.k_h > 0 && g.k_w > 0 && g.stride_h > 0 && g.stride_w > 0 && g.pad_top >= 0 &&
                     g.pad_left >= 0 && g.pad_bottom >= 0 && g.pad_right >= 0 &&
                     g.pad_top < g.k_h && g.pad_bottom < g.k_h && g.pad_left < g.k_w &&
                     g.pad_right < g.k_w,
                 op,
                 "expected positive window and stride and each padding smaller than the window, "
                 "got window " +
                     std::to_string(g.k_h) + "x" + std::to_string(g.k_w) + ", padding t/b/l/r " +
                     std::to_string(g.pad_top) + "/" + std::to_string(g.pad_bottom) + "/" +
                     std::to_string(g.pad_left) + "/" + std::to_string(g.pad_right));
}

/// A grouped kernel's output channels split into the groups (Conv2DGeometry::groups).
void require_groups(const Tensor& w, const Conv2DGeometry& g, const char* op) {
  MIRROR_REQUIRE(g.groups >= 1 && w.rank() >= 1 && w.dim(0) % g.groups == 0, op,
                 "groups " + std::to_string(g.groups) + " must be >= 1 and divide the kernel's " +
                     "output channels, kernel " + w.str());
}

}  // namespace

Conv2DGeometry Conv2DGeometry::same(int in_h, int in_w, int k_h, int k_w, int stride_h,
                                    int stride_w) {
  Conv2DGeometry g;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  const int out_h = (in_h + stride_h - 1) / stride_h, out_w = (in_w + stride_w - 1) / stride_w;
  const int pad_h = std::max(0, (out_h - 1) * stride_h + k_h - in_h);
  const int pad_w = std::max(0, (out_w - 1) * stride_w + k_w - in_w);
  g.pad_top = pad_h / 2;
  g.pad_bottom = pad_h - g.pad_top;
  g.pad_left = pad_w / 2;
  g.pad_right = pad_w - g.pad_left;
  return g;
}

Conv2DGeometry Conv2DGeometry::valid(int stride_h, int stride_w) {
  Conv2DGeometry g;
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  return g;
}

void gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c) {
  KernelSet& k = backend("gemm", {&a, &b, &c});
  MIRROR_REQUIRE(a.rank() == 2 && b.rank() == 2 && c.rank() == 2, "gemm", "expected 2-D tensors");
  MIRROR_REQUIRE(a.dtype() == b.dtype() && b.dtype() == c.dtype(), "gemm", "dtypes differ");
  require_float(a, "gemm");
  const auto m = ta ? a.dim(1) : a.dim(0), ka = ta ? a.dim(0) : a.dim(1);
  const auto kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  MIRROR_REQUIRE(ka == kb && c.dim(0) == m && c.dim(1) == n, "gemm",
                 "inner/outer sizes disagree: " + a.str() + (ta ? "^T" : "") + " x " + b.str() +
                     (tb ? "^T" : "") + " -> " + c.str());
  k.gemm(ta, tb, alpha, a, b, beta, c);
}

void bias_add(Tensor& y, const Tensor& bias) {
  KernelSet& k = backend("bias_add", {&y, &bias});
  MIRROR_REQUIRE(
      y.rank() >= 2 && bias.rank() == 1 && bias.dim(0) == y.dim(1) && y.dtype() == bias.dtype(),
      "bias_add", "bias " + bias.str() + " does not match channels of " + y.str());
  k.bias_add(y, bias);
}

void bias_grad(const Tensor& dy, Tensor& dbias) {
  KernelSet& k = backend("bias_grad", {&dy, &dbias});
  MIRROR_REQUIRE(dy.rank() >= 2 && dbias.rank() == 1 && dbias.dim(0) == dy.dim(1) &&
                     dy.dtype() == dbias.dtype(),
                 "bias_grad", "dbias " + dbias.str() + " does not match channels of " + dy.str());
  k.bias_grad(dy, dbias);
}

std::int64_t image_block(const Tensor& x) { return x.rank() == 5 ? x.dim(4) : 0; }

Shape image_shape(const Tensor& x) {
  if (x.rank() != 5) return x.shape();
  return {x.dim(0), x.dim(1) * x.dim(4), x.dim(2), x.dim(3)};
}

namespace {

/// Blocked tensors exist only on a backend that makes them; anywhere else one is a caller's bug.
void require_blocked_support(KernelSet& k, std::initializer_list<const Tensor*> tensors,
                             const char* op) {
  for (const Tensor* t : tensors) {
    MIRROR_REQUIRE(
        !t->defined() || image_block(*t) == 0 || k.blocked_images(), op,
        std::string("the ") + k.name() + " backend has no blocked images, got " + t->str());
  }
}

/// Note [Convolution operands]: a bfloat16 blocked image that conv2d_operand made for a float32
/// convolution stands in for x or dy.
bool is_conv_operand(const Tensor& t, DType kernel_dtype) {
  return t.dtype() == DType::kBFloat16 && image_block(t) > 0 && kernel_dtype == DType::kFloat32;
}

void check_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Conv2DGeometry& g) {
  require_groups(w, g, "conv2d_forward");
  const Shape xs = image_shape(x);
  MIRROR_REQUIRE(
      xs.size() == 4 && w.rank() == 4 && xs[1] == w.dim(1) * g.groups &&
          (x.dtype() == w.dtype() || is_conv_operand(x, w.dtype())),
      "conv2d_forward",
      "input " + x.str() + " and kernel " + w.str() + " disagree (NCHW and OIHW expected)");
  MIRROR_REQUIRE(image_block(x) == 0 || g.groups == 1, "conv2d_forward",
                 "a blocked input " + x.str() + " needs an ungrouped kernel");
  MIRROR_REQUIRE(!bias.defined() || (bias.rank() == 1 && bias.dim(0) == w.dim(0)), "conv2d_forward",
                 "bad bias " + bias.str());
  MIRROR_REQUIRE(g.out_h(static_cast<int>(xs[2]), static_cast<int>(w.dim(2))) > 0 &&
                     g.out_w(static_cast<int>(xs[3]), static_cast<int>(w.dim(3))) > 0,
                 "conv2d_forward", "kernel larger than the padded input " + x.str());
  if (!is_conv_operand(x, w.dtype())) require_float(x, "conv2d_forward");
}

void check_conv_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                              const Conv2DGeometry& g) {
  require_groups(w, g, "conv2d_backward_data");
  const Shape ds = image_shape(dy);
  MIRROR_REQUIRE(
      ds.size() == 4 && w.rank() == 4 && x_shape.size() == 4 && ds[1] == w.dim(0) &&
          x_shape[1] == w.dim(1) * g.groups && (image_block(dy) == 0 || g.groups == 1) &&
          (dy.dtype() == w.dtype() || is_conv_operand(dy, w.dtype())),
      "conv2d_backward_data",
      "dy " + dy.str() + ", kernel " + w.str() + ", x " + shape_str(x_shape) + " disagree");
}

}  // namespace

Tensor plain_image(const Tensor& x) {
  if (image_block(x) == 0) return x;
  KernelSet& k = backend("plain_image", {&x});
  require_blocked_support(k, {&x}, "plain_image");
  return k.image_to_plain(x);
}

Tensor blocked_image(const Tensor& x, std::int64_t block) {
  if (image_block(x) == block) return x;
  if (block == 0) return plain_image(x);
  const Tensor plain = plain_image(x);
  KernelSet& k = backend("blocked_image", {&plain});
  MIRROR_REQUIRE(k.blocked_images(), "blocked_image",
                 std::string("the ") + k.name() + " backend has no blocked images");
  MIRROR_REQUIRE(plain.rank() == 4 && plain.dtype() == DType::kFloat32 && block > 0 &&
                     plain.dim(1) % block == 0,
                 "blocked_image",
                 "expected a float32 image [N, C, H, W] with C divisible by " +
                     std::to_string(block) + ", got " + plain.str());
  return k.image_to_blocked(plain, block);
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2DGeometry& g) {
  KernelSet& k = backend("conv2d_forward", {&x, &w, &bias});
  MIRROR_REQUIRE(x.rank() == 4, "conv2d_forward", "expected NCHW input, got " + x.str());
  check_conv_forward(x, w, bias, g);
  return k.conv2d_forward(x, w, bias, g);
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2DGeometry& g,
                      Activation act, bool blocked_out) {
  KernelSet& k = backend("conv2d_forward", {&x, &w, &bias});
  require_blocked_support(k, {&x}, "conv2d_forward");
  check_conv_forward(x, w, bias, g);
  return k.conv2d_forward_blocked(x, w, bias, g, act, blocked_out && g.groups == 1);
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2DGeometry& g) {
  KernelSet& k = backend("conv2d_backward_data", {&dy, &w});
  MIRROR_REQUIRE(dy.rank() == 4, "conv2d_backward_data", "expected NCHW dy, got " + dy.str());
  check_conv_backward_data(dy, w, x_shape, g);
  return k.conv2d_backward_data(dy, w, x_shape, g);
}

Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2DGeometry& g, std::int64_t block) {
  KernelSet& k = backend("conv2d_backward_data", {&dy, &w});
  require_blocked_support(k, {&dy}, "conv2d_backward_data");
  check_conv_backward_data(dy, w, x_shape, g);
  MIRROR_REQUIRE(block == 0 || (g.groups == 1 && block > 0 && x_shape[1] % block == 0),
                 "conv2d_backward_data",
                 "cannot block " + shape_str(x_shape) + " by " + std::to_string(block));
  if (block == 0 && image_block(dy) == 0) return k.conv2d_backward_data(dy, w, x_shape, g);
  MIRROR_REQUIRE(k.blocked_images(), "conv2d_backward_data",
                 std::string("the ") + k.name() + " backend has no blocked images");
  return k.conv2d_backward_data_blocked(dy, w, x_shape, g, block);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                             const Conv2DGeometry& g) {
  KernelSet& k = backend("conv2d_backward_weights", {&x, &dy, &dw, &dbias});
  require_blocked_support(k, {&x, &dy}, "conv2d_backward_weights");
  require_groups(dw, g, "conv2d_backward_weights");
  const Shape xs = image_shape(x), ds = image_shape(dy);
  MIRROR_REQUIRE(xs.size() == 4 && ds.size() == 4 && dw.rank() == 4 && dw.dim(0) == ds[1] &&
                     dw.dim(1) * g.groups == xs[1] &&
                     (x.dtype() == dw.dtype() || is_conv_operand(x, dw.dtype())) &&
                     (dy.dtype() == dw.dtype() || is_conv_operand(dy, dw.dtype())) &&
                     (g.groups == 1 || (image_block(x) == 0 && image_block(dy) == 0)),
                 "conv2d_backward_weights",
                 "x " + x.str() + ", dy " + dy.str() + ", dw " + dw.str() + " disagree");
  k.conv2d_backward_weights(x, dy, dw, dbias, g);
}

Tensor conv2d_operand(const Tensor& t) {
  KernelSet& k = backend("conv2d_operand", {&t});
  require_blocked_support(k, {&t}, "conv2d_operand");
  const Shape s = image_shape(t);
  MIRROR_REQUIRE(s.size() == 4, "conv2d_operand", "expected an image [N, C, H, W], got " + t.str());
  return k.conv2d_operand(t);
}

Tensor maxpool2d_forward(const Tensor& x, const Pool2DGeometry& g, bool blocked_out) {
  KernelSet& k = backend("maxpool2d_forward", {&x});
  require_blocked_support(k, {&x}, "maxpool2d_forward");
  const Shape xs = image_shape(x);
  MIRROR_REQUIRE(xs.size() == 4, "maxpool2d_forward", "expected NCHW, got " + x.str());
  require_pool_geometry(g, "maxpool2d_forward");
  MIRROR_REQUIRE(g.out_h(static_cast<int>(xs[2])) > 0 && g.out_w(static_cast<int>(xs[3])) > 0,
                 "maxpool2d_forward", "window larger than the input " + x.str());
  if (image_block(x) == 0) return k.maxpool2d_forward(x, g);
  return k.maxpool2d_forward_blocked(x, g, blocked_out);
}

Tensor maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                          const Pool2DGeometry& g, bool relu_input, bool as_conv_operand) {
  KernelSet& k = backend("maxpool2d_backward", {&x, &y, &dy});
  require_blocked_support(k, {&x, &y}, "maxpool2d_backward");
  require_same(y, dy, "maxpool2d_backward");
  require_pool_geometry(g, "maxpool2d_backward");
  if (as_conv_operand) {
    MIRROR_REQUIRE(image_shape(x).size() == 4, "maxpool2d_backward",
                   "expected an image [N, C, H, W], got " + x.str());
    if (Tensor t = k.maxpool2d_backward_operand(x, y, dy, g, relu_input); t.defined()) return t;
  }
  const Tensor dx =
      relu_input ? k.maxpool2d_backward_relu(x, y, dy, g) : k.maxpool2d_backward(x, y, dy, g);
  return as_conv_operand ? conv2d_operand(dx) : dx;
}

Tensor activation_forward(Activation act, const Tensor& x) {
  return backend("activation_forward", {&x}).activation_forward(act, x);
}

Tensor activation_backward(Activation act, const Tensor& y, const Tensor& dy) {
  KernelSet& k = backend("activation_backward", {&y, &dy});
  require_same(y, dy, "activation_backward");
  return k.activation_backward(act, y, dy);
}

Tensor dropout_forward(const Tensor& x, float rate, std::uint64_t seed, const Tensor& sample_ids,
                       Tensor& mask) {
  KernelSet& k = backend("dropout_forward", {&x, &sample_ids});
  MIRROR_REQUIRE(rate >= 0.0f && rate < 1.0f, "dropout_forward",
                 "rate must be in [0, 1), got " + std::to_string(rate));
  MIRROR_REQUIRE(sample_ids.dtype() == DType::kInt64 && sample_ids.rank() == 1 && x.rank() >= 1 &&
                     sample_ids.dim(0) == x.dim(0),
                 "dropout_forward",
                 "sample_ids must be int64 [N] for x " + x.str() + ", got " + sample_ids.str());
  return k.dropout_forward(x, rate, seed, sample_ids, mask);
}

Tensor dropout_backward(const Tensor& dy, const Tensor& mask) {
  KernelSet& k = backend("dropout_backward", {&dy, &mask});
  require_same(dy, mask, "dropout_backward");
  return k.dropout_backward(dy, mask);
}

void axpy(double alpha, const Tensor& b, Tensor& a) {
  KernelSet& k = backend("axpy", {&a, &b});
  MIRROR_REQUIRE(a.numel() == b.numel() && a.dtype() == b.dtype(), "axpy",
                 a.str() + " += alpha * " + b.str());
  k.axpy(alpha, b, a);
}
Tensor add_n(const std::vector<Tensor>& xs, bool relu) {
  MIRROR_REQUIRE(xs.size() >= 2, "add_n", "expected two or more tensors, got " +
                                               std::to_string(xs.size()));
  for (const Tensor& x : xs) {
    MIRROR_REQUIRE(x.defined() && x.shape() == xs[0].shape() && x.dtype() == xs[0].dtype() &&
                       x.device() == xs[0].device(),
                   "add_n", "tensors differ: " + xs[0].str() + " and " +
                                (x.defined() ? x.str() : std::string("none")));
  }
  return backend("add_n", {&xs[0]}).add_n(xs, relu);
}
void scale(Tensor& a, double alpha) { backend("scale", {&a}).scale(a, alpha); }
void fill(Tensor& a, double value) { backend("fill", {&a}).fill(a, value); }
double sum_squares(const Tensor& a) { return backend("sum_squares", {&a}).sum_squares(a); }
Tensor cast(const Tensor& a, DType to) { return backend("cast", {&a}).cast(a, to); }
void cast_into(const Tensor& a, Tensor& out) {
  KernelSet& k = backend("cast_into", {&a, &out});
  MIRROR_REQUIRE(a.shape() == out.shape(), "cast_into",
                 "shapes differ: " + a.str() + " into " + out.str());
  k.cast_into(a, out);
}
bool all_finite(const Tensor& a) { return backend("all_finite", {&a}).all_finite(a); }
MathSupport math_support(Device device, MathMode mode) {
  return kernels_for(device).math_support(device, mode);
}
std::string instruction_set(Device device) { return kernels_for(device).instruction_set(device); }

Tensor embedding_forward(const Tensor& ids, const Tensor& table) {
  KernelSet& k = backend("embedding_forward", {&ids, &table});
  MIRROR_REQUIRE(
      ids.dtype() == DType::kInt32 && ids.rank() == 2 && table.rank() == 2, "embedding_forward",
      "expected int32 ids [N,T] and table [V,D], got " + ids.str() + " and " + table.str());
  return k.embedding_forward(ids, table);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  KernelSet& k = backend("embedding_backward", {&ids, &dy, &dtable});
  MIRROR_REQUIRE(
      dy.rank() == 3 && dy.dim(0) == ids.dim(0) && dy.dim(1) == ids.dim(1) &&
          dy.dim(2) == dtable.dim(1),
      "embedding_backward",
      "dy " + dy.str() + " does not match ids " + ids.str() + " / table " + dtable.str());
  k.embedding_backward(ids, dy, dtable);
}

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& weights,
                                 double global_count) {
  KernelSet& k = backend("softmax_cross_entropy", {&logits, &labels, &weights});
  MIRROR_REQUIRE(
      logits.rank() == 2 && labels.rank() == 1 && labels.dim(0) == logits.dim(0) &&
          labels.dtype() == DType::kInt32,
      "softmax_cross_entropy",
      "expected logits [N,C] and int32 labels [N], got " + logits.str() + " and " + labels.str());
  MIRROR_REQUIRE(
      weights.rank() == 1 && weights.dim(0) == logits.dim(0) && weights.dtype() == logits.dtype(),
      "softmax_cross_entropy", "weights must be [N] of the logits' dtype, got " + weights.str());
  MIRROR_REQUIRE(global_count > 0, "softmax_cross_entropy", "global_count must be positive");
  return k.softmax_cross_entropy(logits, labels, weights, global_count);
}

std::int64_t correct_count(const Tensor& logits, const Tensor& labels, const Tensor& weights) {
  KernelSet& k = backend("correct_count", {&logits, &labels, &weights});
  MIRROR_REQUIRE(
      logits.rank() == 2 && labels.rank() == 1 && labels.dim(0) == logits.dim(0), "correct_count",
      "expected logits [N,C] and labels [N], got " + logits.str() + " and " + labels.str());
  return k.correct_count(logits, labels, weights);
}

TargetLossResult target_loss(TargetLoss kind, const Tensor& logits, const Tensor& targets,
                             const Tensor& weights, double global_count) {
  const char* op =
      kind == TargetLoss::kBinaryCrossEntropy ? "binary_cross_entropy" : "mean_squared_error";
  KernelSet& k = backend(op, {&logits, &targets, &weights});
  require_float(logits, op);
  MIRROR_REQUIRE(logits.rank() == 2, op, "expected logits [N,K], got " + logits.str());
  const std::int64_t n = logits.dim(0), width = logits.dim(1);
  const bool same = targets.rank() == 2 && targets.dim(0) == n && targets.dim(1) == width;
  const bool column = targets.rank() == 1 && targets.dim(0) == n && width == 1;
  MIRROR_REQUIRE(same || column, op,
                 "targets " + shape_str(targets.shape()) + " do not match logits " +
                     shape_str(logits.shape()) +
                     ": expected targets [N, K] for logits [N, K] (or " +
                     "[N] when K == 1); make the model's last layer as wide as the target");
  MIRROR_REQUIRE(
      targets.dtype() == logits.dtype(), op,
      "targets " + targets.str() + " must have the logits' dtype (" + logits.str() + ")");
  MIRROR_REQUIRE(weights.rank() == 1 && weights.dim(0) == n && weights.dtype() == logits.dtype(),
                 op, "weights must be [N] of the logits' dtype, got " + weights.str());
  MIRROR_REQUIRE(global_count > 0, op, "global_count must be positive");
  return k.target_loss(kind, logits, targets, weights, global_count);
}

TargetLossResult binary_cross_entropy(const Tensor& logits, const Tensor& targets,
                                      const Tensor& weights, double global_count) {
  return target_loss(TargetLoss::kBinaryCrossEntropy, logits, targets, weights, global_count);
}

TargetLossResult mean_squared_error(const Tensor& logits, const Tensor& targets,
                                    const Tensor& weights, double global_count) {
  return target_loss(TargetLoss::kMeanSquaredError, logits, targets, weights, global_count);
}

namespace {
/// The checks gru_* and lstm_* share: x [N, T, F], weights [G*H, F], [G*H, H], [G*H] x2 of x's
/// dtype, one length in [1, T] per sample.
void check_recurrent(const Tensor& x, const std::vector<std::int32_t>& lengths, const Tensor& w_ih,
                     const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh, int gates,
                     const char* op) {
  MIRROR_REQUIRE(x.rank() == 3, op, "expected x [N,T,F], got " + x.str());
  MIRROR_REQUIRE(w_ih.rank() == 2 && w_hh.rank() == 2 && b_ih.rank() == 1 && b_hh.rank() == 1, op,
                 "expected weights [G*H, F], [G*H, H], [G*H], [G*H], got " + w_ih.str() + ", " +
                     w_hh.str() + ", " + b_ih.str() + ", " + b_hh.str());
  const auto n = x.dim(0), t = x.dim(1), f = x.dim(2), gh = w_hh.dim(0), h = w_hh.dim(1);
  MIRROR_REQUIRE(gh == gates * h && w_ih.dim(0) == gh && w_ih.dim(1) == f && b_ih.dim(0) == gh &&
                     b_hh.dim(0) == gh,
                 op,
                 "weights do not match input features " + std::to_string(f) + " / hidden " +
                     std::to_string(h) + " (" + std::to_string(gates) + " gates)");
  for (const Tensor* w : {&w_ih, &w_hh, &b_ih, &b_hh}) {
    MIRROR_REQUIRE(w->dtype() == x.dtype(), op,
                   "weight " + w->str() + " has another dtype than x " + x.str());
  }
  MIRROR_REQUIRE(static_cast<std::int64_t>(lengths.size()) == n, op,
                 std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(n));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    MIRROR_REQUIRE(lengths[i] >= 1 && lengths[i] <= t, op,
                   "length " + std::to_string(lengths[i]) + " of sample " + std::to_string(i) +
                       " outside [1, " + std::to_string(t) + "]");
  }
}

void check_gru(const Tensor& x, const std::vector<std::int32_t>& lengths, const GruWeights& w) {
  check_recurrent(x, lengths, w.w_ih, w.w_hh, w.b_ih, w.b_hh, 3, "gru");
}
}  // namespace

GruForwardResult gru_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                             const GruWeights& w, bool training) {
  KernelSet& k = backend("gru_forward", {&x, &w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh});
  check_gru(x, lengths, w);
  return k.gru_forward(x, lengths, w, training);
}

Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths, const GruWeights& w,
                    const GruForwardResult& fwd, const Tensor& dy, const Tensor& dh_last,
                    GruWeights& dw, bool need_dx) {
  KernelSet& k = backend("gru_backward", {&x, &w.w_ih, &dy, &dh_last, &dw.w_ih});
  check_gru(x, lengths, w);
  MIRROR_REQUIRE(dy.defined() || dh_last.defined(), "gru_backward", "needs dy or dh_last");
  const Shape hidden{x.dim(0), w.w_hh.dim(1)};
  MIRROR_REQUIRE(!dy.defined() || dy.shape() == Shape({x.dim(0), x.dim(1), hidden[1]}),
                 "gru_backward", "dy " + dy.str() + " does not match the outputs of x " + x.str());
  MIRROR_REQUIRE(!dh_last.defined() || dh_last.shape() == hidden, "gru_backward",
                 "dh_last " + dh_last.str() + " is not [N, H] = " + shape_str(hidden));
  MIRROR_REQUIRE(dw.w_ih.shape() == w.w_ih.shape() && dw.w_hh.shape() == w.w_hh.shape() &&
                     dw.b_ih.shape() == w.b_ih.shape() && dw.b_hh.shape() == w.b_hh.shape(),
                 "gru_backward", "weight gradients must have the weights' shapes");
  MIRROR_REQUIRE(fwd.reserve.defined(), "gru_backward",
                 "no saved activations: run gru_forward with training=true");
  return k.gru_backward(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

LstmForwardResult lstm_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                               const LstmWeights& w, bool training) {
  KernelSet& k = backend("lstm_forward", {&x, &w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh});
  check_recurrent(x, lengths, w.w_ih, w.w_hh, w.b_ih, w.b_hh, 4, "lstm_forward");
  return k.lstm_forward(x, lengths, w, training);
}

Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const LstmWeights& w, const LstmForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, LstmWeights& dw, bool need_dx) {
  KernelSet& k = backend("lstm_backward", {&x, &w.w_ih, &dy, &dh_last, &dw.w_ih});
  check_recurrent(x, lengths, w.w_ih, w.w_hh, w.b_ih, w.b_hh, 4, "lstm_backward");
  MIRROR_REQUIRE(dy.defined() || dh_last.defined(), "lstm_backward", "needs dy or dh_last");
  const Shape hidden{x.dim(0), w.w_hh.dim(1)};
  MIRROR_REQUIRE(!dy.defined() || dy.shape() == Shape({x.dim(0), x.dim(1), hidden[1]}),
                 "lstm_backward", "dy " + dy.str() + " does not match the outputs of x " + x.str());
  MIRROR_REQUIRE(!dh_last.defined() || dh_last.shape() == hidden, "lstm_backward",
                 "dh_last " + dh_last.str() + " is not [N, H] = " + shape_str(hidden));
  MIRROR_REQUIRE(dw.w_ih.shape() == w.w_ih.shape() && dw.w_hh.shape() == w.w_hh.shape() &&
                     dw.b_ih.shape() == w.b_ih.shape() && dw.b_hh.shape() == w.b_hh.shape(),
                 "lstm_backward", "weight gradients must have the weights' shapes");
  const Tensor* grads[] = {&dw.w_ih, &dw.w_hh, &dw.b_ih, &dw.b_hh, &dy, &dh_last};
  for (const Tensor* g : grads) {
    MIRROR_REQUIRE(!g->defined() || g->dtype() == x.dtype(), "lstm_backward",
                   "gradient " + g->str() + " has another dtype than x " + x.str());
  }
  MIRROR_REQUIRE(fwd.reserve.defined(), "lstm_backward",
                 "no saved activations: run lstm_forward with training=true");
  return k.lstm_backward(x, lengths, w, fwd, dy, dh_last, dw, need_dx);
}

Tensor reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  KernelSet& k = backend("reverse_sequences", {&x});
  require_float(x, "reverse_sequences");
  MIRROR_REQUIRE(x.rank() == 3, "reverse_sequences", "expected x [N, T, F], got " + x.str());
  MIRROR_REQUIRE(static_cast<std::int64_t>(lengths.size()) == x.dim(0), "reverse_sequences",
                 std::to_string(lengths.size()) + " lengths for " + x.str());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    MIRROR_REQUIRE(lengths[i] >= 1 && lengths[i] <= x.dim(1), "reverse_sequences",
                   "length " + std::to_string(lengths[i]) + " of sample " + std::to_string(i) +
                       " outside [1, " + std::to_string(x.dim(1)) + "]");
  }
  return k.reverse_sequences(x, lengths);
}

Tensor concat_features(const Tensor& a, const Tensor& b) {
  KernelSet& k = backend("concat_features", {&a, &b});
  require_float(a, "concat_features");
  bool same = a.rank() >= 1 && a.rank() == b.rank() && a.dtype() == b.dtype();
  for (int i = 0; same && i + 1 < a.rank(); ++i) same = a.dim(i) == b.dim(i);
  MIRROR_REQUIRE(
      same, "concat_features",
      "expected equal leading dimensions and dtypes, got " + a.str() + " and " + b.str());
  return k.concat_features(a, b);
}

Tensor slice_features(const Tensor& y, std::int64_t begin, std::int64_t count) {
  KernelSet& k = backend("slice_features", {&y});
  require_float(y, "slice_features");
  MIRROR_REQUIRE(y.rank() >= 1 && begin >= 0 && count >= 0 && begin + count <= y.dim(y.rank() - 1),
                 "slice_features",
                 "features [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                     ") outside the last dimension of " + y.str());
  return k.slice_features(y, begin, count);
}

Tensor multiply(const Tensor& a, const Tensor& b) {
  KernelSet& k = backend("multiply", {&a, &b});
  require_float(a, "multiply");
  require_same(a, b, "multiply");
  return k.multiply(a, b);
}

Window1D Window1D::make(const std::string& padding, int in, int k, int stride, int dilation) {
  MIRROR_REQUIRE(in >= 0 && k >= 1 && stride >= 1 && dilation >= 1, "window1d",
                 "expected steps >= 0 and positive kernel, stride and dilation, got steps " +
                     std::to_string(in) + ", kernel " + std::to_string(k) + ", stride " +
                     std::to_string(stride) + ", dilation " + std::to_string(dilation));
  Window1D g{k, stride, dilation, 0, 0};
  if (padding == "valid") return g;
  if (padding == "causal") {
    g.pad_left = g.span() - 1;
    return g;
  }
  MIRROR_REQUIRE(padding == "same", "window1d",
                 "unknown padding '" + padding + "'; expected valid, same or causal");
  const int out = (in + stride - 1) / stride;
  const int total = std::max((out - 1) * stride + g.span() - in, 0);
  g.pad_left = total / 2;
  g.pad_right = total - g.pad_left;
  return g;
}

namespace {
void check_window(const Window1D& g, std::int64_t steps, const char* op) {
  MIRROR_REQUIRE(g.k >= 1 && g.stride >= 1 && g.dilation >= 1 && g.pad_left >= 0 &&
                     g.pad_right >= 0 && g.out(static_cast<int>(steps)) >= 1,
                 op,
                 "window (kernel " + std::to_string(g.k) + ", stride " + std::to_string(g.stride) +
                     ", dilation " + std::to_string(g.dilation) + ", padding " +
                     std::to_string(g.pad_left) + "/" + std::to_string(g.pad_right) +
                     ") does not fit " + std::to_string(steps) + " steps");
}

void check_lengths(const std::vector<std::int32_t>& lengths, std::int64_t n, std::int64_t t,
                   const char* op) {
  MIRROR_REQUIRE(static_cast<std::int64_t>(lengths.size()) == n, op,
                 std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(n));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    MIRROR_REQUIRE(lengths[i] >= 1 && lengths[i] <= t, op,
                   "length " + std::to_string(lengths[i]) + " of sample " + std::to_string(i) +
                       " outside [1, " + std::to_string(t) + "]");
  }
}
}  // namespace

Tensor im2col1d(const Tensor& x, const Window1D& g) {
  KernelSet& k = backend("im2col1d", {&x});
  require_float(x, "im2col1d");
  MIRROR_REQUIRE(x.rank() == 3, "im2col1d", "expected x [N, T, C], got " + x.str());
  check_window(g, x.dim(1), "im2col1d");
  return k.im2col1d(x, g);
}

Tensor col2im1d(const Tensor& cols, const Window1D& g, std::int64_t steps) {
  KernelSet& k = backend("col2im1d", {&cols});
  require_float(cols, "col2im1d");
  check_window(g, steps, "col2im1d");
  MIRROR_REQUIRE(
      cols.rank() == 3 && cols.dim(1) == g.out(static_cast<int>(steps)) && cols.dim(2) % g.k == 0,
      "col2im1d",
      "expected columns [N, " + std::to_string(g.out(static_cast<int>(steps))) + ", k * C] for " +
          std::to_string(steps) + " steps, got " + cols.str());
  return k.col2im1d(cols, g, steps);
}

Tensor pool1d_forward(Pool1D mode, const Tensor& x, const std::vector<std::int32_t>& lengths,
                      const Window1D& g) {
  KernelSet& k = backend("pool1d_forward", {&x});
  require_float(x, "pool1d_forward");
  MIRROR_REQUIRE(x.rank() == 3, "pool1d_forward", "expected x [N, T, C], got " + x.str());
  check_window(g, x.dim(1), "pool1d_forward");
  check_lengths(lengths, x.dim(0), x.dim(1), "pool1d_forward");
  return k.pool1d_forward(mode, x, lengths, g);
}

Tensor pool1d_backward(Pool1D mode, const Tensor& x, const Tensor& dy,
                       const std::vector<std::int32_t>& lengths, const Window1D& g) {
  KernelSet& k = backend("pool1d_backward", {&x, &dy});
  require_float(x, "pool1d_backward");
  MIRROR_REQUIRE(x.rank() == 3, "pool1d_backward", "expected x [N, T, C], got " + x.str());
  check_window(g, x.dim(1), "pool1d_backward");
  check_lengths(lengths, x.dim(0), x.dim(1), "pool1d_backward");
  const Shape want{x.dim(0), g.out(static_cast<int>(x.dim(1))), x.dim(2)};
  MIRROR_REQUIRE(dy.shape() == want && dy.dtype() == x.dtype(), "pool1d_backward",
                 "expected dy " + shape_str(want) + " of x's dtype, got " + dy.str());
  return k.pool1d_backward(mode, x, dy, lengths, g);
}

Tensor zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths) {
  KernelSet& k = backend("zero_past_lengths", {&x});
  require_float(x, "zero_past_lengths");
  MIRROR_REQUIRE(x.rank() >= 2, "zero_past_lengths", "expected x [N, T, ...], got " + x.str());
  check_lengths(lengths, x.dim(0), x.dim(1), "zero_past_lengths");
  return k.zero_past_lengths(x, lengths);
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                bool nesterov, double weight_decay) {
  KernelSet& k = backend("sgd_update", {&param, &grad, &momentum_buf});
  MIRROR_REQUIRE(param.numel() == grad.numel(), "sgd_update",
                 param.str() + " vs grad " + grad.str());
  MIRROR_REQUIRE(momentum == 0 || momentum_buf.defined(), "sgd_update", "momentum needs a buffer");
  k.sgd_update(param, grad, momentum_buf, lr, momentum, nesterov, weight_decay);
  note_parameters_changed();  // Note [Cast once per step]
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, std::int64_t step) {
  KernelSet& k = backend("adam_update", {&param, &grad, &m, &v});
  MIRROR_REQUIRE(
      param.numel() == grad.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
      "adam_update",
      "param " + param.str() + ", grad " + grad.str() + ", m " + m.str() + ", v " + v.str());
  MIRROR_REQUIRE(step >= 1, "adam_update", "step is 1-based");
  k.adam_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, step);
  note_parameters_changed();  // Note [Cast once per step]
}

std::uint64_t fingerprint(const Tensor& a) {
  // FNV-1a over the bytes, on the host: a check every K steps, not a hot path.
  std::vector<std::uint8_t> bytes(a.nbytes());
  if (!bytes.empty())
    kernels_for(a.device()).copy(bytes.data(), Device::cpu(), a.raw_data(), a.device(), a.nbytes());
  std::uint64_t h = 1469598103934665603ull;
  for (auto b : bytes) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace mirror::ops
