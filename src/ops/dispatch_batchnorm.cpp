// ops.h entry points of BatchNormalization's device path (Note [Device batch norm]): argument
// checks, then the device's KernelSet.
#include <string>

#include "backend.h"
#include "mirror/ops.h"

namespace mirror::ops {
namespace {

#define MIRROR_REQUIRE(cond, op, what) \
  MIRROR_CHECK(cond, InvalidArgument, std::string(op) + ": " + (what))

void require_input(const Tensor& x, const ChannelView& v, const char* op) {
  MIRROR_REQUIRE(x.defined() && (x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64) &&
                     x.rank() >= 1,
                 op,
                 "expected a float32 or float64 tensor [N, ...], got " +
                     (x.defined() ? x.str() : std::string("none")));
  // Each sample owns whole rows of the view (the kernels find a row's sample by division).
  MIRROR_REQUIRE(v.outer > 0 && v.channels > 0 && v.inner > 0 && v.numel() == x.numel() &&
                     x.dim(0) > 0 && v.outer % x.dim(0) == 0,
                 op,
                 "view [" + std::to_string(v.outer) + ", " + std::to_string(v.channels) + ", " +
                     std::to_string(v.inner) + "] does not cover " + x.str() + " in whole samples");
  MIRROR_REQUIRE(v.block == 0 && image_block(x) == 0, op,
                 "the device path takes plain images (BatchNormalization converts a blocked "
                 "one), got " + x.str());
}

/// `t` is undefined (when `optional`) or `numel` values of `dtype` on x's device.
void require_vector(const Tensor& t, const Tensor& x, DType dtype, std::int64_t numel,
                    bool optional, const char* op, const char* what) {
  if (optional && !t.defined()) return;
  MIRROR_REQUIRE(
      t.defined() && t.dtype() == dtype && t.numel() == numel && t.device() == x.device(), op,
      std::string(what) + ": expected " + dtype_name(dtype) + "[" + std::to_string(numel) +
          "] on " + x.device().str() + ", got " + (t.defined() ? t.str() : std::string("none")));
}

void require_weights(const Tensor& weights, const Tensor& x, const char* op) {
  require_vector(weights, x, DType::kFloat32, x.dim(0), true, op, "weights");
}

}  // namespace

Tensor batchnorm_statistics(const Tensor& x, const Tensor& weights, const ChannelView& v) {
  const char* op = "batchnorm_statistics";
  require_input(x, v, op);
  require_weights(weights, x, op);
  return kernels_for(x.device()).batchnorm_statistics(x, weights, v);
}

BatchNormNormalized batchnorm_normalize(const Tensor& x, const Tensor& stats, const Tensor& gamma,
                                        const Tensor& beta, Tensor& moving_mean,
                                        Tensor& moving_variance, double momentum, double epsilon,
                                        const ChannelView& v) {
  const char* op = "batchnorm_normalize";
  require_input(x, v, op);
  const std::int64_t c = v.channels;
  require_vector(stats, x, DType::kFloat64, 2 * c + 1, false, op, "stats");
  require_vector(gamma, x, x.dtype(), c, true, op, "gamma");
  require_vector(beta, x, x.dtype(), c, true, op, "beta");
  require_vector(moving_mean, x, x.dtype(), c, false, op, "moving_mean");
  require_vector(moving_variance, x, x.dtype(), c, false, op, "moving_variance");
  MIRROR_REQUIRE(momentum >= 0 && momentum < 1 && epsilon > 0, op,
                 "expected momentum in [0, 1) and epsilon > 0");
  return kernels_for(x.device())
      .batchnorm_normalize(x, stats, gamma, beta, moving_mean, moving_variance, momentum, epsilon,
                           v);
}

Tensor batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                               Tensor& gamma_grad, Tensor& beta_grad, const ChannelView& v) {
  const char* op = "batchnorm_gradient_sums";
  require_input(x, v, op);
  MIRROR_REQUIRE(
      dy.defined() && dy.shape() == x.shape() && dy.dtype() == x.dtype() &&
          dy.device() == x.device(),
      op, "dy " + (dy.defined() ? dy.str() : std::string("none")) + " is not like x " + x.str());
  const std::int64_t c = v.channels;
  require_vector(saved, x, DType::kFloat64, 2 * c + 1, false, op, "saved");
  require_vector(gamma_grad, x, x.dtype(), c, true, op, "gamma_grad");
  require_vector(beta_grad, x, x.dtype(), c, true, op, "beta_grad");
  return kernels_for(x.device()).batchnorm_gradient_sums(dy, x, saved, gamma_grad, beta_grad, v);
}

Tensor batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                const Tensor& gamma, const Tensor& sums, const Tensor& weights,
                                const ChannelView& v) {
  const char* op = "batchnorm_input_gradient";
  require_input(x, v, op);
  MIRROR_REQUIRE(dy.defined() && dy.shape() == x.shape() && dy.dtype() == x.dtype() &&
                     dy.device() == x.device(),
                 op, "dy is not like x " + x.str());
  const std::int64_t c = v.channels;
  require_vector(saved, x, DType::kFloat64, 2 * c + 1, false, op, "saved");
  require_vector(gamma, x, x.dtype(), c, true, op, "gamma");
  require_vector(sums, x, DType::kFloat64, 2 * c, false, op, "sums");
  require_weights(weights, x, op);
  return kernels_for(x.device()).batchnorm_input_gradient(dy, x, saved, gamma, sums, weights, v);
}

}  // namespace mirror::ops
