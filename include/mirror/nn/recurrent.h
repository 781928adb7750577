// defines: the recurrent layers (Recurrent, the interface Bidirectional wraps; GRU; LSTM) and
// Masking (which sets the sequence lengths they read).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"
#include "mirror/ops.h"

namespace mirror::nn {

/// A recurrent layer over [N, T, F] with per-sequence lengths (ctx.lengths, left unchanged for
/// the next layer): GRU or LSTM. Output [N, units], or [N, T, units] with return_sequences
/// (zeros past each sequence's length).
class Recurrent : public Layer {
 public:
  virtual int units() const = 0;
  virtual bool return_sequences() const = 0;
  /// A new, unbuilt layer with the same hyper-parameters (Bidirectional's backward direction).
  virtual std::unique_ptr<Recurrent> fresh_copy() const = 0;

  /// Note [Carried outputs] (recurrent_carry.cpp): false for a standalone Keras GRU or LSTM
  /// returning sequences, whose steps past a sequence's length repeat its last valid output
  /// (Keras's zero_output_for_mask false) where Mirror's are zero; applies with Keras's masks.
  void set_zero_output_for_mask(bool zero) { zero_output_for_mask_ = zero; }
  bool zero_output_for_mask() const { return zero_output_for_mask_; }

 protected:
  /// A return_sequences output as this layer gives it: `y` (zero past `lengths`), or with the
  /// last valid step carried to the end (Note [Carried outputs]).
  Tensor carry_outputs(const Tensor& y, const std::vector<std::int32_t>& lengths,
                       const ForwardContext& ctx);
  /// The gradient of `y` (for the recurrent backward) given that of the output.
  Tensor carried_gradient(const Tensor& dy) const;

 private:
  bool zero_output_for_mask_ = true;
  std::vector<std::int32_t> carried_;  // the lengths of the last forward that carried
};

/// Gated recurrent unit with the semantics of docs/architecture.md invariant 5 (PyTorch GRU, Keras
/// reset_after=True, cuDNN). Input [N, T, F] (T may change from batch to batch), output
/// [N, units] (the state after each sequence's last valid step) or, with return_sequences,
/// [N, T, units] (zeros past a sequence's length). Lengths come from ctx.lengths (set by the
/// batch or a Masking layer); when empty every sequence has the full length T.
///
/// Parameters, in this order, in PyTorch/cuDNN layout with gate order (r, z, n):
///   <name>/kernel            w_ih [3*units, F]
///   <name>/recurrent_kernel  w_hh [3*units, units]
///   <name>/bias              b_ih [3*units]
///   <name>/recurrent_bias    b_hh [3*units]
/// Init (host, double, then cast): kernel Glorot uniform over the whole matrix (fan_in = F,
/// fan_out = 3*units, as Keras does for its [F, 3*units] kernel); recurrent kernel orthogonal
/// PER GATE BLOCK (each [units, units] block U_r, U_z, U_n has orthonormal rows and columns;
/// Keras instead orthogonalises its whole [units, 3*units] matrix); biases zero.
class GRU : public Recurrent {
 public:
  explicit GRU(int units, bool return_sequences = false);
  std::string kind() const override { return "gru"; }
  /// input_shape = [T, F] (T is only informative); returns [units] or [T, units].
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  /// dy is d(loss)/d(output); needs a preceding forward with ctx.training = true.
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override {
    return {&kernel_, &recurrent_kernel_, &bias_, &recurrent_bias_};
  }
  nlohmann::json config() const override;

  int units() const override { return units_; }
  bool return_sequences() const override { return return_sequences_; }
  std::unique_ptr<Recurrent> fresh_copy() const override {
    return std::make_unique<GRU>(units_, return_sequences_);
  }
  /// The parameters as the ops expect them (values, not gradients).
  ops::GruWeights weights() const;

 private:
  int units_;
  bool return_sequences_;
  std::int64_t features_ = 0;
  DType dtype_ = DType::kFloat32;
  Parameter kernel_, recurrent_kernel_, bias_, recurrent_bias_;
  // Saved by a training forward for backward (released by backward).
  Tensor x_;
  std::vector<std::int32_t> lengths_;
  ops::GruForwardResult fwd_;
};

/// Long short-term memory with the semantics of docs/architecture.md invariant 5 (PyTorch
/// nn.LSTM, cuDNN CUDNN_LSTM; gate order i, f, g, o; Keras's i, f, c, o is the same order, see
/// docs/checkpoint.md). Input [N, T, F]; output [N, units] (the hidden state after each
/// sequence's last valid step; both states are carried unchanged past it) or, with
/// return_sequences, [N, T, units] (zeros past a sequence's length). Lengths as for GRU.
///
/// Parameters, in this order, in PyTorch/cuDNN layout:
///   <name>/kernel            w_ih [4*units, F]
///   <name>/recurrent_kernel  w_hh [4*units, units]
///   <name>/bias              b_ih [4*units]
///   <name>/recurrent_bias    b_hh [4*units]
/// Init: kernel Glorot uniform over the whole matrix (fan_in = F, fan_out = 4*units), recurrent
/// kernel orthogonal per gate block (as GRU), biases zero except, with unit_forget_bias (Keras's
/// default), the forget block of `bias`, which is 1 (so b_if + b_hf = 1, Keras's forget bias).
class LSTM : public Recurrent {
 public:
  explicit LSTM(int units, bool return_sequences = false, bool unit_forget_bias = true);
  std::string kind() const override { return "lstm"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override {
    return {&kernel_, &recurrent_kernel_, &bias_, &recurrent_bias_};
  }
  nlohmann::json config() const override;

  int units() const override { return units_; }
  bool return_sequences() const override { return return_sequences_; }
  std::unique_ptr<Recurrent> fresh_copy() const override {
    return std::make_unique<LSTM>(units_, return_sequences_, unit_forget_bias_);
  }
  ops::LstmWeights weights() const;

 private:
  int units_;
  bool return_sequences_;
  bool unit_forget_bias_;
  std::int64_t features_ = 0;
  DType dtype_ = DType::kFloat32;
  Parameter kernel_, recurrent_kernel_, bias_, recurrent_bias_;
  Tensor x_;
  std::vector<std::int32_t> lengths_;
  ops::LstmForwardResult fwd_;
};

/// Derives each sequence's valid length from trailing padding and stores it in ctx.lengths;
/// the data passes through unchanged (backward returns dy as is). Padding is the value 0:
///   int32 ids [N, T]:   length = 1 + index of the last non-zero id;
///   float [N, T, F]:    length = 1 + index of the last step with any non-zero feature.
/// Only TRAILING padding shortens a sequence (zeros inside it are ordinary input, unlike Keras,
/// which skips every all-zero step); an all-padding sample gets length 1, since lengths are in
/// [1, T]. A CUDA input is copied to the host to scan it.
class Masking : public Layer {
 public:
  Masking() = default;
  std::string kind() const override { return "masking"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override { return dy; }
  nlohmann::json config() const override;

  /// The lengths Masking computes for `x` (exposed for tests and data pipelines).
  static std::vector<std::int32_t> lengths_of(const Tensor& x);

 private:
  Shape input_shape_;
};

}  // namespace mirror::nn
