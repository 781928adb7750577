// defines: CudaKernels, the CUDA KernelSet (cuBLAS GEMM, cuDNN convolution and GRU, our own
// kernels for everything element-wise; float32 compute), and OpScope, the per-call device
// context + lock every implementation file uses. Implementation is split by concern:
// cuda_kernels.cpp (memory, element-wise, loss, embedding, updates), dense.cpp (GEMM, bias),
// conv.cpp (convolution, pooling), rnn.cpp (cuDNN GRU and LSTM), sequence.cpp (sequence ops).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "cuda/context.h"
#include "mirror/error.h"
#include "ops/kernel_set.h"

namespace mirror::cuda {

class CudaKernels final : public KernelSet {
 public:
  const char* name() const override { return "cuda"; }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) override;
  void memset_zero(void* dst, std::size_t bytes) override;
  void synchronize(Device device) override;

  void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
            Tensor& c) override;
  void bias_add(Tensor& y, const Tensor& bias) override;
  void bias_grad(const Tensor& dy, Tensor& dbias) override;

  Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                        const ops::Conv2DGeometry& g) override;
  Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                              const ops::Conv2DGeometry& g) override;
  void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                               const ops::Conv2DGeometry& g) override;
  Tensor maxpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) override;
  Tensor maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                            const ops::Pool2DGeometry& g) override;

  Tensor activation_forward(ops::Activation act, const Tensor& x) override;
  Tensor activation_backward(ops::Activation act, const Tensor& y, const Tensor& dy) override;
  Tensor dropout_forward(const Tensor& x, float rate, std::uint64_t seed, const Tensor& sample_ids,
                         Tensor& mask) override;
  Tensor dropout_backward(const Tensor& dy, const Tensor& mask) override;
  void axpy(double alpha, const Tensor& b, Tensor& a) override;
  void scale(Tensor& a, double alpha) override;
  void fill(Tensor& a, double value) override;
  double sum_squares(const Tensor& a) override;
  Tensor cast(const Tensor& a, DType to) override;
  bool all_finite(const Tensor& a) override;
  ops::MathSupport math_support(Device device, MathMode mode) override;

  std::vector<double> channel_sums(const Tensor& a, const Tensor& b,
                                   const ops::ChannelView& v) override;
  Tensor channel_affine(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                        const ops::ChannelView& v) override;
  Tensor batchnorm_statistics(const Tensor& x, const Tensor& weights,
                              const ops::ChannelView& v) override;
  ops::BatchNormNormalized batchnorm_normalize(const Tensor& x, const Tensor& stats,
                                               const Tensor& gamma, const Tensor& beta,
                                               Tensor& moving_mean, Tensor& moving_variance,
                                               double momentum, double epsilon,
                                               const ops::ChannelView& v) override;
  Tensor batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                 Tensor& gamma_grad, Tensor& beta_grad,
                                 const ops::ChannelView& v) override;
  Tensor batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                  const Tensor& gamma, const Tensor& sums, const Tensor& weights,
                                  const ops::ChannelView& v) override;
  Tensor avgpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) override;
  Tensor avgpool2d_backward(const Tensor& dy, const Shape& x_shape,
                            const ops::Pool2DGeometry& g) override;
  void copy_block(Tensor& dst, const Tensor& src, const ops::BlockCopy& b) override;
  Tensor gelu_forward(const Tensor& x) override;
  Tensor gelu_backward(const Tensor& x, const Tensor& dy) override;

  Tensor embedding_forward(const Tensor& ids, const Tensor& table) override;
  void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override;

  ops::LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                        const Tensor& weights, double global_count) override;
  std::int64_t correct_count(const Tensor& logits, const Tensor& labels,
                             const Tensor& weights) override;
  ops::TargetLossResult target_loss(ops::TargetLoss kind, const Tensor& logits,
                                    const Tensor& targets, const Tensor& weights,
                                    double global_count) override;

  ops::GruForwardResult gru_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                    const ops::GruWeights& w, bool training) override;
  Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                      const ops::GruWeights& w, const ops::GruForwardResult& fwd, const Tensor& dy,
                      const Tensor& dh_last, ops::GruWeights& dw, bool need_dx) override;
  ops::LstmForwardResult lstm_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                      const ops::LstmWeights& w, bool training) override;
  Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                       const ops::LstmWeights& w, const ops::LstmForwardResult& fwd,
                       const Tensor& dy, const Tensor& dh_last, ops::LstmWeights& dw,
                       bool need_dx) override;
  Tensor reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths) override;
  Tensor concat_features(const Tensor& a, const Tensor& b) override;
  Tensor slice_features(const Tensor& y, std::int64_t begin, std::int64_t count) override;
  Tensor multiply(const Tensor& a, const Tensor& b) override;
  Tensor im2col1d(const Tensor& x, const ops::Window1D& g) override;
  Tensor col2im1d(const Tensor& cols, const ops::Window1D& g, std::int64_t steps) override;
  Tensor pool1d_forward(ops::Pool1D mode, const Tensor& x, const std::vector<std::int32_t>& lengths,
                        const ops::Window1D& g) override;
  Tensor pool1d_backward(ops::Pool1D mode, const Tensor& x, const Tensor& dy,
                         const std::vector<std::int32_t>& lengths, const ops::Window1D& g) override;
  Tensor zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths) override;

  Tensor eltwise_forward(const ops::Eltwise& f, const Tensor& x) override;
  Tensor eltwise_backward(const ops::Eltwise& f, const Tensor& x, const Tensor& dy) override;
  Tensor extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask) override;
  void batched_gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                    double beta, Tensor& c) override;
  Tensor attention_softmax(const Tensor& scores, const ops::AttentionMask& m) override;
  Tensor attention_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                    const ops::AttentionMask& m) override;

  Tensor augment_forward(const ops::ImageAugment& a, const Tensor& x, std::uint64_t seed,
                         const Tensor& sample_ids) override;
  Tensor augment_backward(const ops::ImageAugment& a, const Tensor& x, const Tensor& dy,
                          std::uint64_t seed, const Tensor& sample_ids) override;

  void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr,
                  double momentum, bool nesterov, double weight_decay) override;
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr, double beta1,
                   double beta2, double eps, double weight_decay, bool decoupled,
                   std::int64_t step) override;
};

/// The context of a tensor's GPU, made current and locked for the duration of one op.
class OpScope {
 public:
  explicit OpScope(const Tensor& t) : ctx_(context(t.device().index)), lock_(ctx_.mutex()) {}
  DeviceContext& ctx() { return ctx_; }
  cudaStream_t stream() const { return ctx_.compute(); }
  Device device() const { return Device::cuda(ctx_.device()); }

 private:
  DeviceContext& ctx_;
  std::lock_guard<DeviceMutex> lock_;
};

/// Typed device pointer of a float32 tensor; other dtypes throw InvalidArgument naming the op
/// (the CUDA backend computes in float32; float64 is for CPU gradient checks).
inline float* f32(const Tensor& t, const char* op) {
  MIRROR_CHECK(t.dtype() == DType::kFloat32, InvalidArgument,
               std::string(op) + ": the CUDA backend computes in float32, got " + t.str() +
                   " (cast to float32, or use the CPU backend for float64)");
  return static_cast<float*>(t.raw_data());
}

/// Note [cuDNN alignment]: allocator blocks are 256-byte aligned, but a view need not be (the
/// weight gradients live back to back inside all-reduce buckets), and cuDNN's vectorised
/// kernels may need 16 bytes. Operands handed to cuDNN go through aligned_copy().
inline bool aligned16(const Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.raw_data()) % 16 == 0;
}
/// `t` itself when 16-byte aligned, else a fresh (aligned) copy on the same device.
inline Tensor aligned_copy(const Tensor& t) { return aligned16(t) ? t : t.clone(); }

/// Throws InvalidArgument unless `t` has dtype `want`.
inline void require_dtype(const Tensor& t, DType want, const char* op, const char* what) {
  MIRROR_CHECK(t.dtype() == want, InvalidArgument,
               std::string(op) + ": " + what + " must be " + dtype_name(want) + ", got " + t.str());
}

}  // namespace mirror::cuda
