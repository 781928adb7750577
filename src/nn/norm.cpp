// BatchNormalization (with cross-replica synchronisation) and LayerNormalization over
// ops::channel_sums / ops::channel_affine (Note [Channel view] in ops.h). Statistics are combined
// on the host in double precision: they are a few values per channel, and the host is where the
// cross-replica sums (MPI, in-process) are taken anyway.
#include <atomic>
#include <cmath>
#include <numeric>

#include "mirror/nn/cnn_layers.h"
#include "mirror/nn/init.h"

namespace mirror::nn {

namespace detail {

std::vector<double> host_values(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  if (h.dtype() == DType::kFloat64) return h.to_vector<double>();
  const auto f = h.to_vector<float>();
  return {f.begin(), f.end()};
}

Tensor from_host(const std::vector<double>& values, DType dtype, Device device) {
  const auto n = static_cast<std::int64_t>(values.size());
  if (dtype == DType::kFloat64) return Tensor::from_vector(values, {n}).to(device);
  return Tensor::from_vector(std::vector<float>(values.begin(), values.end()), {n}).to(device);
}

}  // namespace detail

namespace {

void add_to_grad(Parameter& p, const std::vector<double>& g) {
  ops::axpy(1.0, detail::from_host(g, p.grad.dtype(), p.grad.device()), p.grad);
}

std::vector<double> ones(std::size_t n) { return std::vector<double>(n, 1.0); }

/// Per sample, 1 for a real sample and 0 for padding; empty when every sample is real.
std::vector<double> padding_mask(const Tensor& weights, std::int64_t n) {
  if (!weights.defined()) return {};
  MIRROR_CHECK(weights.numel() == n, InvalidArgument,
               "ForwardContext::sample_weights has " + std::to_string(weights.numel()) +
                   " values for a batch of " + std::to_string(n));
  std::vector<double> mask = detail::host_values(weights);
  bool padded = false;
  for (double& m : mask) {
    m = m > 0 ? 1.0 : 0.0;
    padded = padded || m == 0.0;
  }
  if (!padded) mask.clear();
  return mask;
}

/// t with every sample n multiplied by mask[n] (t is [N, ...], plain or a blocked image: a
/// sample's values are contiguous in both, so t is seen flat).
Tensor mask_samples(const Tensor& t, const std::vector<double>& mask) {
  const auto n = static_cast<std::int64_t>(mask.size());
  return ops::channel_affine(t.reshape({t.numel()}), {}, {.ka = mask}, {1, n, t.numel() / n})
      .reshape(t.shape());
}

std::atomic<bool> device_batchnorm_everywhere{false};

/// Note [Device batch norm]: GPUs take the device path (tests can ask for it everywhere).
bool on_device_path(Device d) { return d.is_cuda() || device_batchnorm_everywhere.load(); }

}  // namespace

bool force_device_batchnorm(bool on) { return device_batchnorm_everywhere.exchange(on); }

// ---------------------------------------------------------------- BatchNormalization

BatchNormalization::BatchNormalization(double momentum, double epsilon, bool center, bool scale,
                                       bool synchronized)
    : momentum_(momentum),
      epsilon_(epsilon),
      center_(center),
      scale_(scale),
      synchronized_(synchronized) {
  MIRROR_CHECK(momentum >= 0 && momentum < 1 && epsilon > 0, InvalidArgument,
               "BatchNormalization: expected momentum in [0, 1) and epsilon > 0, got momentum " +
                   std::to_string(momentum) + ", epsilon " + std::to_string(epsilon));
}

Shape BatchNormalization::build(const Shape& input_shape, DType dtype, Device device, InitRng&) {
  MIRROR_CHECK(input_shape.size() >= 1 && input_shape.size() <= 3, InvalidArgument,
               name() + " (batch_normalization): expects [C, H, W], [F] or [T, F], got " +
                   shape_str(input_shape));
  input_shape_ = input_shape;
  dtype_ = dtype;
  // Channels: C of an image, F of features or sequences.
  const std::int64_t c = input_shape.size() == 2 ? input_shape[1] : input_shape[0];
  gamma_ = detail::make_parameter(*this, "gamma", init::to_tensor(ones(c), {c}, dtype, device));
  beta_ = detail::make_parameter(*this, "beta", init::zeros({c}, dtype, device));
  moving_mean_ = {name() + "/moving_mean", init::zeros({c}, dtype, device)};
  moving_variance_ = {name() + "/moving_variance", init::to_tensor(ones(c), {c}, dtype, device)};
  return input_shape;
}

std::vector<Parameter*> BatchNormalization::parameters() {
  std::vector<Parameter*> p;
  if (scale_) p.push_back(&gamma_);
  if (center_) p.push_back(&beta_);
  return p;
}

ops::ChannelView BatchNormalization::view(const Tensor& x) const {
  if (input_shape_.size() == 2) return {x.dim(0) * input_shape_[0], input_shape_[1], 1};
  const std::int64_t inner = input_shape_.size() == 3 ? input_shape_[1] * input_shape_[2] : 1;
  return {x.dim(0), input_shape_[0], inner, ops::image_block(x)};
}

Tensor BatchNormalization::forward(const Tensor& in, ForwardContext& ctx) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument,
               name() + " (batch_normalization): not built");
  detail::check_image_input(*this, in, input_shape_, dtype_);
  // A blocked input whose output may not be blocked (a reader takes plain images only): the
  // layer runs on the plain image, and backward gives the gradient back blocked.
  converted_block_ = blocked_output_allowed() ? 0 : ops::image_block(in);
  Tensor y = normalize(converted_block_ > 0 ? ops::plain_image(in) : in, ctx);
  if (fuses_relu() && device_path_) {
    y = ops::activation_forward(ops::Activation::kRelu, y);
    relu_y_ = y;
  }
  return y;
}

Tensor BatchNormalization::normalize(const Tensor& x, ForwardContext& ctx) {
  const ops::ChannelView v = view(x);
  const auto c = static_cast<std::size_t>(v.channels);
  std::vector<double> mean, var;
  batch_stats_ = ctx.training;
  replica_sum_ = ctx.training && synchronized_ ? ctx.replica_sum : nullptr;
  mask_.clear();
  // Every training step on a GPU, synchronized or not: the host path reads the statistics back
  // (a wait for the device in each pass of each layer).
  device_path_ = ctx.training && on_device_path(x.device());
  device_block_ = device_path_ ? v.block : 0;
  if (device_path_ && device_block_ > 0) {
    // The device path's kernels take plain images: convert around it.
    const Tensor plain = ops::plain_image(x);
    return ops::blocked_image(forward_on_device(plain, ctx, view(plain)), device_block_);
  }
  if (device_path_) return forward_on_device(x, ctx, v);
  if (ctx.training) {
    // Sums, sums of squares and the element count over the real samples; summed over replicas
    // when synchronized (count-weighted by construction: a replica with fewer samples adds less).
    mask_ = padding_mask(ctx.sample_weights, x.dim(0));
    const Tensor xr = mask_.empty() ? x : mask_samples(x, mask_);
    std::vector<double> s = ops::channel_sums(xr, xr, v);
    double real = static_cast<double>(x.dim(0));
    if (!mask_.empty()) real = std::accumulate(mask_.begin(), mask_.end(), 0.0);
    s.push_back(real * static_cast<double>(v.numel() / (x.dim(0) * v.channels)));
    if (replica_sum_ != nullptr) replica_sum_->sum(s, name() + " statistics");
    count_ = s.back();
    mean.assign(c, 0.0);
    var.assign(c, 1.0);
    for (std::size_t k = 0; k < c && count_ > 0; ++k) {
      mean[k] = s[k] / count_;
      var[k] = std::max(s[c + k] / count_ - mean[k] * mean[k], 0.0);
    }
  }
  // A replica whose shard is all padding (the end of an epoch) has no statistics: its outputs
  // are never used (zero loss weight, zero input gradient) and the moving ones stay as they are.
  if (ctx.training && count_ > 0) {
    // moving = momentum * moving + (1 - momentum) * batch (Keras; biased batch variance).
    std::vector<double> mm = detail::host_values(moving_mean_.value);
    std::vector<double> mv = detail::host_values(moving_variance_.value);
    for (std::size_t k = 0; k < c; ++k) {
      mm[k] = momentum_ * mm[k] + (1 - momentum_) * mean[k];
      mv[k] = momentum_ * mv[k] + (1 - momentum_) * var[k];
    }
    moving_mean_.value.copy_from(detail::from_host(mm, dtype_, x.device()));
    moving_variance_.value.copy_from(detail::from_host(mv, dtype_, x.device()));
  } else if (!ctx.training) {
    mean = detail::host_values(moving_mean_.value);
    var = detail::host_values(moving_variance_.value);
  }
  const std::vector<double> gamma = scale_ ? detail::host_values(gamma_.value) : ones(c);
  const std::vector<double> beta =
      center_ ? detail::host_values(beta_.value) : std::vector<double>(c, 0.0);
  invstd_.resize(c);
  std::vector<double> ka(c);
  for (std::size_t k = 0; k < c; ++k) {
    invstd_[k] = 1.0 / std::sqrt(var[k] + epsilon_);
    ka[k] = gamma[k] * invstd_[k];
  }
  mean_ = std::move(mean);
  x_ = x;
  // y = gamma invstd (x - mean) + beta: centred first, like PyTorch, to keep the precision of
  // channels whose mean is large next to their spread; then the fused ReLU's max(y, 0).
  if (fuses_relu()) relu_mask_ = {.ka = ka, .ca = mean_, .k0 = beta};
  return ops::channel_affine(x, {}, {.ka = ka, .ca = mean_, .k0 = beta, .relu = fuses_relu()}, v)
      .reshape(x.shape());
}

Tensor BatchNormalization::backward(const Tensor& dy) {
  // Note [BatchNorm and ReLU]: the device path ran the ReLU as its own op; the host path masks
  // dy inside its passes below.
  const bool relu_op = fuses_relu() && device_path_;
  const Tensor dx =
      backward_in_layout(relu_op ? ops::activation_backward(ops::Activation::kRelu, relu_y_, dy)
                                 : dy);
  return converted_block_ > 0 && dx.defined() ? ops::blocked_image(dx, converted_block_) : dx;
}

Tensor BatchNormalization::backward_in_layout(const Tensor& dy) {
  MIRROR_CHECK(x_.defined(), InvalidArgument,
               name() + " (batch_normalization): backward without forward");
  if (device_path_ && device_block_ > 0) {
    const Tensor plain = ops::plain_image(dy);
    check_shape(plain, x_.shape(), (name() + " backward dy").c_str());
    const Tensor dx = backward_on_device(plain);
    return dx.defined() ? ops::blocked_image(dx, device_block_) : dx;
  }
  check_shape(dy, x_.shape(), (name() + " backward dy").c_str());
  if (device_path_) return backward_on_device(dy);
  const ops::ChannelView v = view(x_);
  const auto c = static_cast<std::size_t>(v.channels);
  // Local sums of dy and dy * x: this replica's share of the parameter gradients (the bucket
  // all-reduce adds the other replicas').
  const bool masked = fuses_relu();  // dy is the ReLU's output gradient: masked as it is read
  std::vector<double> s = masked ? ops::channel_sums(dy, x_, v, relu_mask_)
                                 : ops::channel_sums(dy, x_, v);
  std::vector<double> sum_dy(c), sum_dy_xhat(c);
  for (std::size_t k = 0; k < c; ++k) {
    sum_dy[k] = s[k];
    sum_dy_xhat[k] = invstd_[k] * (s[c + k] - mean_[k] * s[k]);
  }
  if (scale_) add_to_grad(gamma_, sum_dy_xhat);
  if (center_) add_to_grad(beta_, sum_dy);
  if (!input_grad_needed()) return {};
  const std::vector<double> gamma = scale_ ? detail::host_values(gamma_.value) : ones(c);
  std::vector<double> ka(c), kb(c, 0.0), k0(c, 0.0);
  if (!batch_stats_) {
    // Inference statistics are constants: dx = gamma * invstd * dy.
    for (std::size_t k = 0; k < c; ++k) ka[k] = gamma[k] * invstd_[k];
    const Tensor dx = masked ? ops::channel_affine(dy, x_, {.ka = ka}, v, relu_mask_)
                             : ops::channel_affine(dy, {}, {.ka = ka}, v);
    return dx.reshape(dy.shape());
  }
  if (replica_sum_ != nullptr) {
    std::vector<double> global = sum_dy;
    global.insert(global.end(), sum_dy_xhat.begin(), sum_dy_xhat.end());
    replica_sum_->sum(global, name() + " gradient sums");
    std::copy(global.begin(), global.begin() + static_cast<std::ptrdiff_t>(c), sum_dy.begin());
    std::copy(global.begin() + static_cast<std::ptrdiff_t>(c), global.end(), sum_dy_xhat.begin());
  }
  // dx = gamma invstd (dy - sum_dy / M - xhat sum_dy_xhat / M), xhat = (x - mean) invstd,
  // written as ka dy + kb (x - mean) + k0 (an all-padding shard has M = 0 and zero sums).
  const double m = count_ > 0 ? count_ : 1.0;
  for (std::size_t k = 0; k < c; ++k) {
    const double g = gamma[k] * invstd_[k];
    ka[k] = g;
    kb[k] = -g * invstd_[k] * sum_dy_xhat[k] / m;
    k0[k] = -g * sum_dy[k] / m;
  }
  // Padding did not enter the statistics, so the loss does not depend on it: no gradient.
  // Note [Gradients as convolution operands] (mirror/ops.h): dx is written as the
  // producing convolution's operand when nothing is done to it after this map.
  const bool operand = input_grad_as_conv_operand() && mask_.empty() && converted_block_ == 0;
  const ops::ChannelAffine input_grad{
      .ka = ka, .kb = kb, .cb = mean_, .k0 = k0, .conv_operand = operand};
  const Tensor dx = masked ? ops::channel_affine(dy, x_, input_grad, v, relu_mask_)
                           : ops::channel_affine(dy, x_, input_grad, v);
  if (operand) return dx;  // laid out as conv2d_operand makes it, not necessarily like dy
  return mask_.empty() ? dx.reshape(dy.shape()) : mask_samples(dx.reshape(dy.shape()), mask_);
}

// Note [Device batch norm] (mirror/ops.h): the same steps as forward/backward above, with the
// statistics, their replica sum and the coefficients kept on the device.
Tensor BatchNormalization::forward_on_device(const Tensor& x, ForwardContext& ctx,
                                             const ops::ChannelView& v) {
  weights_ = ctx.sample_weights.defined() ? ctx.sample_weights.to(x.device()) : Tensor();
  Tensor stats = ops::batchnorm_statistics(x, weights_, v);
  if (replica_sum_ != nullptr) replica_sum_->sum_on_device(stats, name() + " statistics");
  ops::BatchNormNormalized n =
      ops::batchnorm_normalize(x, stats, scale_ ? gamma_.value : Tensor(),
                               center_ ? beta_.value : Tensor(), moving_mean_.value,
                               moving_variance_.value, momentum_, epsilon_, v);
  saved_ = n.saved;
  x_ = x;
  return n.y.reshape(x.shape());
}

Tensor BatchNormalization::backward_on_device(const Tensor& dy) {
  const ops::ChannelView v = view(x_);
  Tensor none_g, none_b;
  Tensor& gamma_grad = scale_ ? gamma_.grad : none_g;
  Tensor& beta_grad = center_ ? beta_.grad : none_b;
  Tensor sums = ops::batchnorm_gradient_sums(dy, x_, saved_, gamma_grad, beta_grad, v);
  if (!input_grad_needed()) return {};
  if (replica_sum_ != nullptr) replica_sum_->sum_on_device(sums, name() + " gradient sums");
  return ops::batchnorm_input_gradient(dy, x_, saved_, scale_ ? gamma_.value : Tensor(), sums,
                                       weights_, v);
}

nlohmann::json BatchNormalization::config() const {
  return {{"momentum", momentum_},
          {"epsilon", epsilon_},
          {"center", center_},
          {"scale", scale_},
          {"synchronized", synchronized_}};
}

// ---------------------------------------------------------------- LayerNormalization

LayerNormalization::LayerNormalization(double epsilon, bool center, bool scale)
    : epsilon_(epsilon), center_(center), scale_(scale) {
  MIRROR_CHECK(epsilon > 0, InvalidArgument,
               "LayerNormalization: epsilon must be positive, got " + std::to_string(epsilon));
}

Shape LayerNormalization::build(const Shape& input_shape, DType dtype, Device device, InitRng&) {
  MIRROR_CHECK(input_shape.size() == 1 || input_shape.size() == 2, InvalidArgument,
               name() + " (layer_normalization): normalises the last axis of features [F] or " +
                   "sequences [T, F], got " + shape_str(input_shape) +
                   "; for images use batch_normalization");
  input_shape_ = input_shape;
  dtype_ = dtype;
  features_ = input_shape.back();
  gamma_ = detail::make_parameter(
      *this, "gamma",
      init::to_tensor(ones(static_cast<std::size_t>(features_)), {features_}, dtype, device));
  beta_ = detail::make_parameter(*this, "beta", init::zeros({features_}, dtype, device));
  return input_shape;
}

std::vector<Parameter*> LayerNormalization::parameters() {
  std::vector<Parameter*> p;
  if (scale_) p.push_back(&gamma_);
  if (center_) p.push_back(&beta_);
  return p;
}

Tensor LayerNormalization::forward(const Tensor& x, ForwardContext&) {
  MIRROR_CHECK(features_ > 0, InvalidArgument, name() + " (layer_normalization): not built");
  Shape inner = input_shape_;
  if (inner.size() == 2) inner[0] = -1;  // any sequence length
  detail::check_input(*this, x, inner, dtype_);
  const std::int64_t rows = x.numel() / features_;
  const auto r = static_cast<std::size_t>(rows);
  const std::vector<double> s = ops::channel_sums(x, x, {1, rows, features_});
  rstd_.resize(r);
  std::vector<double> mean(r);
  for (std::size_t i = 0; i < r; ++i) {
    mean[i] = s[i] / static_cast<double>(features_);
    const double var = std::max(s[r + i] / static_cast<double>(features_) - mean[i] * mean[i], 0.0);
    rstd_[i] = 1.0 / std::sqrt(var + epsilon_);
  }
  xhat_ = ops::channel_affine(x, {}, {.ka = rstd_, .ca = mean}, {1, rows, features_});
  const auto f = static_cast<std::size_t>(features_);
  const std::vector<double> gamma = scale_ ? detail::host_values(gamma_.value) : ones(f);
  const std::vector<double> beta =
      center_ ? detail::host_values(beta_.value) : std::vector<double>(f, 0.0);
  return ops::channel_affine(xhat_, {}, {.ka = gamma, .k0 = beta}, {rows, features_, 1});
}

Tensor LayerNormalization::backward(const Tensor& dy) {
  MIRROR_CHECK(xhat_.defined(), InvalidArgument,
               name() + " (layer_normalization): backward without forward");
  check_shape(dy, xhat_.shape(), (name() + " backward dy").c_str());
  const std::int64_t rows = dy.numel() / features_;
  const auto f = static_cast<std::size_t>(features_);
  const auto r = static_cast<std::size_t>(rows);
  const std::vector<double> per_feature = ops::channel_sums(dy, xhat_, {rows, features_, 1});
  if (center_) add_to_grad(beta_, {per_feature.begin(), per_feature.begin() + features_});
  if (scale_) add_to_grad(gamma_, {per_feature.begin() + features_, per_feature.end()});
  if (!input_grad_needed()) return {};
  const std::vector<double> gamma = scale_ ? detail::host_values(gamma_.value) : ones(f);
  const Tensor dxhat = ops::channel_affine(dy, {}, {.ka = gamma}, {rows, features_, 1});
  // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) per row.
  const std::vector<double> s = ops::channel_sums(dxhat, xhat_, {1, rows, features_});
  std::vector<double> kb(r), k0(r);
  for (std::size_t i = 0; i < r; ++i) {
    kb[i] = -rstd_[i] * s[r + i] / static_cast<double>(features_);
    k0[i] = -rstd_[i] * s[i] / static_cast<double>(features_);
  }
  // xhat = (x - mean) rstd, so "kb xhat" is the xhat term directly.
  return ops::channel_affine(dxhat, xhat_, {.ka = rstd_, .kb = kb, .k0 = k0}, {1, rows, features_});
}

nlohmann::json LayerNormalization::config() const {
  return {{"epsilon", epsilon_}, {"center", center_}, {"scale", scale_}};
}

}  // namespace mirror::nn
