// GRU, LSTM and Masking layers: thin wrappers over ops::gru_* / ops::lstm_* and a host scan of
// the trailing padding.
#include "mirror/nn/recurrent.h"

#include <algorithm>
#include <string>

#include "mirror/nn/init.h"
#include "mirror/nn/layers.h"

namespace mirror::nn {

namespace {

/// Checks the build arguments GRU and LSTM share; returns F.
std::int64_t check_build(const Layer& l, const Shape& input_shape, DType dtype) {
  MIRROR_CHECK(input_shape.size() == 2 && input_shape[1] > 0, InvalidArgument,
               l.name() + " (" + l.kind() +
                   "): expects sequences [T, F] (e.g. after an Embedding), got " +
                   shape_str(input_shape));
  MIRROR_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, InvalidArgument,
               l.name() + " (" + l.kind() + "): parameters must be float32 or float64, got " +
                   dtype_name(dtype));
  return input_shape[1];
}

/// kernel [G*H, F] Glorot uniform over the whole matrix, then the recurrent kernel [G*H, H]
/// orthogonal per gate block. The draw order is fixed (kernel, then the blocks in gate order) so
/// a seed always gives the same weights.
void init_kernels(Layer& l, int gates, std::int64_t h, std::int64_t f, DType dtype, Device device,
                  InitRng& rng, Parameter& kernel, Parameter& recurrent_kernel) {
  const std::int64_t gh = gates * h;
  kernel =
      detail::make_parameter(l, "kernel", init::glorot_uniform({gh, f}, f, gh, dtype, device, rng));
  std::vector<double> recurrent;
  recurrent.reserve(static_cast<std::size_t>(gh * h));
  for (int gate = 0; gate < gates; ++gate) {
    const std::vector<double> block = init::orthogonal_values(h, h, rng);
    recurrent.insert(recurrent.end(), block.begin(), block.end());
  }
  recurrent_kernel = detail::make_parameter(l, "recurrent_kernel",
                                            init::to_tensor(recurrent, {gh, h}, dtype, device));
}

/// The lengths a recurrent layer runs with: ctx.lengths, or every sequence full (T).
std::vector<std::int32_t> lengths_for(const Layer& l, const Tensor& x, const ForwardContext& ctx) {
  const std::int64_t n = x.dim(0), t = x.dim(1);
  std::vector<std::int32_t> lengths = ctx.lengths;
  if (lengths.empty()) lengths.assign(static_cast<std::size_t>(n), static_cast<std::int32_t>(t));
  MIRROR_CHECK(static_cast<std::int64_t>(lengths.size()) == n, InvalidArgument,
               l.name() + " (" + l.kind() + "): " + std::to_string(lengths.size()) +
                   " sequence lengths for a batch of " + std::to_string(n) +
                   "; the batch (or a Masking layer) must give one length per sample");
  return lengths;
}

/// backward's preconditions: a saved training forward and dy of the output's shape.
void check_backward(const Layer& l, bool saved, const Tensor& x, int units, bool sequences,
                    const Tensor& dy) {
  MIRROR_CHECK(saved, InvalidArgument,
               l.name() + " (" + l.kind() +
                   "): backward needs a preceding forward with ctx.training = true");
  const Shape want = sequences ? Shape{x.dim(0), x.dim(1), units} : Shape{x.dim(0), units};
  MIRROR_CHECK(dy.defined() && dy.shape() == want, InvalidArgument,
               l.name() + " (" + l.kind() + ") backward: expected dy " + shape_str(want) +
                   ", got " + (dy.defined() ? dy.str() : std::string("an undefined tensor")));
}

}  // namespace

// ---------------------------------------------------------------- GRU

GRU::GRU(int units, bool return_sequences) : units_(units), return_sequences_(return_sequences) {
  MIRROR_CHECK(units > 0, InvalidArgument,
               "GRU: units must be positive, got " + std::to_string(units));
}

Shape GRU::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  const std::int64_t h = units_;
  features_ = check_build(*this, input_shape, dtype);
  dtype_ = dtype;
  init_kernels(*this, 3, h, features_, dtype, device, rng, kernel_, recurrent_kernel_);
  bias_ = detail::make_parameter(*this, "bias", init::zeros({3 * h}, dtype, device));
  recurrent_bias_ =
      detail::make_parameter(*this, "recurrent_bias", init::zeros({3 * h}, dtype, device));
  if (return_sequences_) return {input_shape[0], h};
  return {h};
}

ops::GruWeights GRU::weights() const {
  return {kernel_.value, recurrent_kernel_.value, bias_.value, recurrent_bias_.value};
}

Tensor GRU::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(kernel_.value.defined(), InvalidArgument,
               name() + " (gru): used before build(); add it to a Sequential and build it");
  detail::check_input(*this, x, {-1, features_}, dtype_);
  std::vector<std::int32_t> lengths = lengths_for(*this, x, ctx);
  const ConstantOperands constant(  // Note [Cast once per step]
      {kernel_.value.raw_data(), recurrent_kernel_.value.raw_data()});
  ops::GruForwardResult fwd = ops::gru_forward(x, lengths, weights(), ctx.training);
  Tensor out = return_sequences_ ? carry_outputs(fwd.y, lengths, ctx) : fwd.h_last;
  if (ctx.training) {
    x_ = x;
    lengths_ = std::move(lengths);
    fwd_ = std::move(fwd);
  } else {  // nothing to keep: let the allocator reuse the memory
    x_ = Tensor();
    fwd_ = ops::GruForwardResult();
  }
  return out;
}

Tensor GRU::backward(const Tensor& dy) {
  check_backward(*this, x_.defined() && fwd_.reserve.defined(), x_, units_, return_sequences_, dy);
  ops::GruWeights dw{kernel_.grad, recurrent_kernel_.grad, bias_.grad, recurrent_bias_.grad};
  const Tensor none;
  const ConstantOperands constant({kernel_.value.raw_data(), recurrent_kernel_.value.raw_data()});
  Tensor dx = ops::gru_backward(x_, lengths_, weights(), fwd_,
                                return_sequences_ ? carried_gradient(dy) : none,
                                return_sequences_ ? none : dy, dw, input_grad_needed());
  // The saved activations are not needed again; release them to the allocator's cache.
  x_ = Tensor();
  fwd_ = ops::GruForwardResult();
  return dx;
}

nlohmann::json GRU::config() const {
  return {{"units", units_},      {"return_sequences", return_sequences_},
          {"activation", "tanh"}, {"recurrent_activation", "sigmoid"},
          {"reset_after", true},  {"gate_order", "rzn"}};
}

// ---------------------------------------------------------------- LSTM

LSTM::LSTM(int units, bool return_sequences, bool unit_forget_bias)
    : units_(units), return_sequences_(return_sequences), unit_forget_bias_(unit_forget_bias) {
  MIRROR_CHECK(units > 0, InvalidArgument,
               "LSTM: units must be positive, got " + std::to_string(units));
}

Shape LSTM::build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) {
  const std::int64_t h = units_;
  features_ = check_build(*this, input_shape, dtype);
  dtype_ = dtype;
  init_kernels(*this, 4, h, features_, dtype, device, rng, kernel_, recurrent_kernel_);
  std::vector<double> bias(static_cast<std::size_t>(4 * h), 0.0);
  if (unit_forget_bias_) std::fill(bias.begin() + h, bias.begin() + 2 * h, 1.0);  // block f
  bias_ = detail::make_parameter(*this, "bias", init::to_tensor(bias, {4 * h}, dtype, device));
  recurrent_bias_ =
      detail::make_parameter(*this, "recurrent_bias", init::zeros({4 * h}, dtype, device));
  if (return_sequences_) return {input_shape[0], h};
  return {h};
}

ops::LstmWeights LSTM::weights() const {
  return {kernel_.value, recurrent_kernel_.value, bias_.value, recurrent_bias_.value};
}

Tensor LSTM::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(kernel_.value.defined(), InvalidArgument,
               name() + " (lstm): used before build(); add it to a Sequential and build it");
  detail::check_input(*this, x, {-1, features_}, dtype_);
  std::vector<std::int32_t> lengths = lengths_for(*this, x, ctx);
  const ConstantOperands constant(  // Note [Cast once per step]
      {kernel_.value.raw_data(), recurrent_kernel_.value.raw_data()});
  ops::LstmForwardResult fwd = ops::lstm_forward(x, lengths, weights(), ctx.training);
  Tensor out = return_sequences_ ? carry_outputs(fwd.y, lengths, ctx) : fwd.h_last;
  if (ctx.training) {
    x_ = x;
    lengths_ = std::move(lengths);
    fwd_ = std::move(fwd);
  } else {
    x_ = Tensor();
    fwd_ = ops::LstmForwardResult();
  }
  return out;
}

Tensor LSTM::backward(const Tensor& dy) {
  check_backward(*this, x_.defined() && fwd_.reserve.defined(), x_, units_, return_sequences_, dy);
  ops::LstmWeights dw{kernel_.grad, recurrent_kernel_.grad, bias_.grad, recurrent_bias_.grad};
  const Tensor none;
  const ConstantOperands constant({kernel_.value.raw_data(), recurrent_kernel_.value.raw_data()});
  Tensor dx = ops::lstm_backward(x_, lengths_, weights(), fwd_,
                                 return_sequences_ ? carried_gradient(dy) : none,
                                 return_sequences_ ? none : dy, dw, input_grad_needed());
  x_ = Tensor();
  fwd_ = ops::LstmForwardResult();
  return dx;
}

nlohmann::json LSTM::config() const {
  return {{"units", units_},
          {"return_sequences", return_sequences_},
          {"unit_forget_bias", unit_forget_bias_},
          {"activation", "tanh"},
          {"recurrent_activation", "sigmoid"},
          {"gate_order", "ifgo"}};
}

// ---------------------------------------------------------------- Masking

Shape Masking::build(const Shape& input_shape, DType, Device, InitRng&) {
  MIRROR_CHECK(
      input_shape.size() == 1 || input_shape.size() == 2, InvalidArgument,
      name() + " (masking): expects ids [T] or sequences [T, F], got " + shape_str(input_shape));
  input_shape_ = input_shape;
  return input_shape;
}

namespace {

template <class T>
std::vector<std::int32_t> trailing_lengths(const Tensor& host, std::int64_t n, std::int64_t t,
                                           std::int64_t f) {
  const T* p = host.data<T>();
  std::vector<std::int32_t> lengths(static_cast<std::size_t>(n), 1);
  for (std::int64_t s = 0; s < n; ++s) {
    for (std::int64_t step = t - 1; step > 0; --step) {  // step 0 never shortens further
      const T* row = p + (s * t + step) * f;
      bool any = false;
      for (std::int64_t j = 0; j < f && !any; ++j) any = row[j] != T(0);
      if (any) {
        lengths[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(step + 1);
        break;
      }
    }
  }
  return lengths;
}

}  // namespace

std::vector<std::int32_t> Masking::lengths_of(const Tensor& x) {
  const bool ids = x.defined() && x.dtype() == DType::kInt32 && x.rank() == 2;
  const bool seq = x.defined() && x.rank() == 3 &&
                   (x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64);
  MIRROR_CHECK(ids || seq, InvalidArgument,
               "masking: expected int32 ids [N, T] or float32/float64 sequences [N, T, F], got " +
                   (x.defined() ? x.str() : std::string("an undefined tensor")));
  const std::int64_t n = x.dim(0), t = x.dim(1), f = ids ? 1 : x.dim(2);
  MIRROR_CHECK(t > 0 || n == 0, InvalidArgument,
               "masking: sequences need at least one step, got " + x.str());
  const Tensor host = x.to(Device::cpu());
  if (ids) return trailing_lengths<std::int32_t>(host, n, t, f);
  if (x.dtype() == DType::kFloat64) return trailing_lengths<double>(host, n, t, f);
  return trailing_lengths<float>(host, n, t, f);
}

Tensor Masking::forward(const Tensor& x, ForwardContext& ctx) {
  MIRROR_CHECK(!input_shape_.empty(), InvalidArgument,
               name() + " (masking): used before build(); add it to a Sequential and build it");
  MIRROR_CHECK(
      x.defined() && x.rank() == static_cast<int>(input_shape_.size()) + 1, InvalidArgument,
      name() + " (masking): expected input of rank " + std::to_string(input_shape_.size() + 1) +
          " (batch + " + shape_str(input_shape_) + ", T may vary), got " +
          (x.defined() ? x.str() : std::string("nothing")));
  ctx.lengths = lengths_of(x);
  return x;
}

nlohmann::json Masking::config() const { return {{"mask_value", 0}, {"trailing_only", true}}; }

}  // namespace mirror::nn
