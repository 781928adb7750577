// defines: KernelSet, the interface one backend (src/cpu, src/cuda) implements. ops.h
// functions validate arguments once in src/ops/dispatch.cpp, then call the KernelSet of the
// tensors' device; a backend never re-validates shapes.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mirror/error.h"
#include "mirror/ops.h"
#include "mirror/ops_augment.h"

namespace mirror {

class KernelSet {
 public:
  virtual ~KernelSet() = default;
  virtual const char* name() const = 0;

  // memory: copies between this backend and the host (or within the backend)
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    std::size_t bytes) = 0;
  virtual void memset_zero(void* dst, std::size_t bytes) = 0;
  /// Waits for all queued work on `device` (no-op on the CPU).
  virtual void synchronize(Device device) = 0;

  virtual void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                    double beta, Tensor& c) = 0;
  virtual void bias_add(Tensor& y, const Tensor& bias) = 0;
  virtual void bias_grad(const Tensor& dy, Tensor& dbias) = 0;

  virtual Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const ops::Conv2DGeometry& g) = 0;
  virtual Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const ops::Conv2DGeometry& g) = 0;
  virtual void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                                       const ops::Conv2DGeometry& g) = 0;
  virtual Tensor maxpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) = 0;
  virtual Tensor maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                    const ops::Pool2DGeometry& g) = 0;
  // Note [Blocked images] (ops.h): a backend that computes images in a blocked layout says so
  // and overrides the five below. The defaults compute plain NCHW; dispatch gives a backend
  // without blocked images no blocked tensor.
  virtual bool blocked_images() const { return false; }
  virtual Tensor conv2d_forward_blocked(const Tensor& x, const Tensor& w, const Tensor& bias,
                                        const ops::Conv2DGeometry& g, ops::Activation act,
                                        bool /*blocked_out*/) {
    Tensor y = conv2d_forward(x, w, bias, g);
    return act == ops::Activation::kIdentity ? y : activation_forward(act, y);
  }
  virtual Tensor conv2d_backward_data_blocked(const Tensor& dy, const Tensor& w,
                                              const Shape& x_shape, const ops::Conv2DGeometry& g,
                                              std::int64_t /*block*/) {
    return conv2d_backward_data(dy, w, x_shape, g);
  }
  virtual Tensor maxpool2d_forward_blocked(const Tensor& x, const ops::Pool2DGeometry& g,
                                           bool /*blocked_out*/) {
    return maxpool2d_forward(x, g);
  }
  virtual Tensor image_to_plain(const Tensor& x) {
    throw InvalidArgument(std::string("the ") + name() + " backend has no blocked images, got " +
                          x.str());
  }
  virtual Tensor image_to_blocked(const Tensor& x, std::int64_t /*block*/) {
    throw InvalidArgument(std::string("the ") + name() + " backend has no blocked images, asked " +
                          "to block " + x.str());
  }
  /// Note [Convolution operands] (ops.h): the default keeps t as it is.
  virtual Tensor conv2d_operand(const Tensor& t) { return t; }
  /// Note [ReLU through max pool] (src/cpu/cpu_pool.cpp): the max pool's input gradient with
  /// the ReLU mask of its input applied. The default runs the two ops.
  virtual Tensor maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                         const ops::Pool2DGeometry& g) {
    return activation_backward(ops::Activation::kRelu, x, maxpool2d_backward(x, y, dy, g));
  }
  /// Note [Gradients as convolution operands] (mirror/ops.h): the max pool's input gradient
  /// (with the ReLU mask when `relu`) as conv2d_operand makes it, or an undefined tensor where
  /// the backend has no such kernel for these arguments (dispatch then runs the two ops).
  virtual Tensor maxpool2d_backward_operand(const Tensor&, const Tensor&, const Tensor&,
                                            const ops::Pool2DGeometry&, bool) {
    return {};
  }

  virtual Tensor activation_forward(ops::Activation act, const Tensor& x) = 0;
  virtual Tensor activation_backward(ops::Activation act, const Tensor& y, const Tensor& dy) = 0;
  virtual Tensor dropout_forward(const Tensor& x, float rate, std::uint64_t seed,
                                 const Tensor& sample_ids, Tensor& mask) = 0;
  virtual Tensor dropout_backward(const Tensor& dy, const Tensor& mask) = 0;
  virtual void axpy(double alpha, const Tensor& b, Tensor& a) = 0;
  /// ops::add_n; the default copies xs[0] and adds the others with axpy.
  virtual Tensor add_n(const std::vector<Tensor>& xs, bool relu) {
    Tensor y = xs[0].clone();
    for (std::size_t i = 1; i < xs.size(); ++i) axpy(1.0, xs[i], y);
    return relu ? activation_forward(ops::Activation::kRelu, y) : y;
  }
  virtual void scale(Tensor& a, double alpha) = 0;
  virtual void fill(Tensor& a, double value) = 0;
  virtual double sum_squares(const Tensor& a) = 0;
  virtual Tensor cast(const Tensor& a, DType to) = 0;
  /// out = a in out's dtype, written in place. The default casts and copies.
  virtual void cast_into(const Tensor& a, Tensor& out) { out.copy_from(cast(a, out.dtype())); }
  virtual bool all_finite(const Tensor& a) = 0;
  /// Whether gemm and the convolutions honour `mode` on `device` (ops::math_support). A backend
  /// without mixed-precision kernels says so; it must never run a mode silently in float32.
  virtual ops::MathSupport math_support(Device, MathMode mode) {
    if (mode == MathMode::kFloat32) return {};
    return {std::string("the ") + name() + " backend has no " + math_mode_name(mode) + " kernels",
            {}};
  }
  /// The instruction set the kernels run on `device`, in words (ops::instruction_set); empty
  /// where the backend has no choice to report.
  virtual std::string instruction_set(Device) { return {}; }

  /// The normalisation ops take a view with `block` > 0 (a blocked image) only on a backend with
  /// blocked_images() (dispatch checks). channel_affine gets k.relu false and no mask unless the
  /// backend fuses them (fused_channel_relu); otherwise dispatch composes the two below.
  virtual std::vector<double> channel_sums(const Tensor& a, const Tensor& b,
                                           const ops::ChannelView& v) = 0;
  /// Note [BatchNorm and ReLU] (ops.h): whether channel_affine applies k.relu and the two
  /// *_masked entries below are overridden; if not, dispatch runs the ReLU and the mask as
  /// separate element-wise ops.
  virtual bool fused_channel_relu() const { return false; }
  virtual std::vector<double> channel_sums_masked(const Tensor& a, const Tensor&,
                                                  const ops::ReluMask&, const ops::ChannelView&) {
    throw InvalidArgument(std::string("the ") + name() + " backend fuses no ReLU mask, got " +
                          a.str());
  }
  virtual Tensor channel_affine_masked(const Tensor& a, const Tensor&, const ops::ChannelAffine&,
                                       const ops::ReluMask&, const ops::ChannelView&) {
    throw InvalidArgument(std::string("the ") + name() + " backend fuses no ReLU mask, got " +
                          a.str());
  }
  /// Every vector of `k` has `channels` values here (dispatch fills empty ones with zeros).
  virtual Tensor channel_affine(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                                const ops::ChannelView& v) = 0;
  /// Note [Gradients as convolution operands] (mirror/ops.h): channel_affine
  /// (masked when `mask`) written as conv2d_operand would make its result, or an undefined tensor
  /// where the backend has no such kernel for these arguments (dispatch then runs the two ops).
  /// `k` is filled, its conv_operand false.
  virtual Tensor channel_affine_operand(const Tensor&, const Tensor&, const ops::ChannelAffine&,
                                        const ops::ReluMask*, const ops::ChannelView&) {
    return {};
  }
  // Note [Device batch norm] (mirror/ops.h); arguments checked by dispatch.
  virtual Tensor batchnorm_statistics(const Tensor& x, const Tensor& weights,
                                      const ops::ChannelView& v) = 0;
  virtual ops::BatchNormNormalized batchnorm_normalize(const Tensor& x, const Tensor& stats,
                                                       const Tensor& gamma, const Tensor& beta,
                                                       Tensor& moving_mean, Tensor& moving_variance,
                                                       double momentum, double epsilon,
                                                       const ops::ChannelView& v) = 0;
  virtual Tensor batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                         Tensor& gamma_grad, Tensor& beta_grad,
                                         const ops::ChannelView& v) = 0;
  virtual Tensor batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                          const Tensor& gamma, const Tensor& sums,
                                          const Tensor& weights, const ops::ChannelView& v) = 0;
  virtual Tensor avgpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) = 0;
  virtual Tensor avgpool2d_backward(const Tensor& dy, const Shape& x_shape,
                                    const ops::Pool2DGeometry& g) = 0;
  virtual void copy_block(Tensor& dst, const Tensor& src, const ops::BlockCopy& b) = 0;
  virtual Tensor gelu_forward(const Tensor& x) = 0;
  virtual Tensor gelu_backward(const Tensor& x, const Tensor& dy) = 0;

  virtual Tensor embedding_forward(const Tensor& ids, const Tensor& table) = 0;
  virtual void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) = 0;

  virtual ops::LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                                const Tensor& weights, double global_count) = 0;
  virtual std::int64_t correct_count(const Tensor& logits, const Tensor& labels,
                                     const Tensor& weights) = 0;
  /// targets have the logits' dtype and N*K elements ([N, K], or [N] when K == 1).
  virtual ops::TargetLossResult target_loss(ops::TargetLoss kind, const Tensor& logits,
                                            const Tensor& targets, const Tensor& weights,
                                            double global_count) = 0;

  virtual ops::GruForwardResult gru_forward(const Tensor& x,
                                            const std::vector<std::int32_t>& lengths,
                                            const ops::GruWeights& w, bool training) = 0;
  virtual Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                              const ops::GruWeights& w, const ops::GruForwardResult& fwd,
                              const Tensor& dy, const Tensor& dh_last, ops::GruWeights& dw,
                              bool need_dx) = 0;

  virtual ops::LstmForwardResult lstm_forward(const Tensor& x,
                                              const std::vector<std::int32_t>& lengths,
                                              const ops::LstmWeights& w, bool training) = 0;
  virtual Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                               const ops::LstmWeights& w, const ops::LstmForwardResult& fwd,
                               const Tensor& dy, const Tensor& dh_last, ops::LstmWeights& dw,
                               bool need_dx) = 0;
  virtual Tensor reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths) = 0;
  virtual Tensor concat_features(const Tensor& a, const Tensor& b) = 0;
  virtual Tensor slice_features(const Tensor& y, std::int64_t begin, std::int64_t count) = 0;
  virtual Tensor multiply(const Tensor& a, const Tensor& b) = 0;

  virtual Tensor im2col1d(const Tensor& x, const ops::Window1D& g) = 0;
  virtual Tensor col2im1d(const Tensor& cols, const ops::Window1D& g, std::int64_t steps) = 0;
  virtual Tensor pool1d_forward(ops::Pool1D mode, const Tensor& x,
                                const std::vector<std::int32_t>& lengths,
                                const ops::Window1D& g) = 0;
  virtual Tensor pool1d_backward(ops::Pool1D mode, const Tensor& x, const Tensor& dy,
                                 const std::vector<std::int32_t>& lengths,
                                 const ops::Window1D& g) = 0;
  virtual Tensor zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths) = 0;

  // Keras's layers (ops.h "Keras's layers"; CPU: cpu_keras.cpp, CUDA: keras_ops.cpp).
  virtual Tensor eltwise_forward(const ops::Eltwise& f, const Tensor& x) = 0;
  virtual Tensor eltwise_backward(const ops::Eltwise& f, const Tensor& x, const Tensor& dy) = 0;
  virtual Tensor extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask) = 0;
  /// Default: one gemm per matrix on views (a backend with a batched call overrides it).
  virtual void batched_gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                            const Tensor& b, double beta, Tensor& c);
  virtual Tensor attention_softmax(const Tensor& scores, const ops::AttentionMask& m) = 0;
  virtual Tensor attention_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                            const ops::AttentionMask& m) = 0;

  // Keras's augmentation layers (ops_augment.h; CPU: cpu_augment.cpp, CUDA: augment.cu).
  virtual Tensor augment_forward(const ops::ImageAugment& a, const Tensor& x, std::uint64_t seed,
                                 const Tensor& sample_ids) = 0;
  virtual Tensor augment_backward(const ops::ImageAugment& a, const Tensor& x, const Tensor& dy,
                                  std::uint64_t seed, const Tensor& sample_ids) = 0;

  virtual void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr,
                          double momentum, bool nesterov, double weight_decay) = 0;
  virtual void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr,
                           double beta1, double beta2, double eps, double weight_decay,
                           bool decoupled, std::int64_t step) = 0;
};

}  // namespace mirror
