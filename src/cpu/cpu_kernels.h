// defines: CpuKernels, the CPU KernelSet (oneDNN for float32 GEMM and convolution, plain loops
// over src/math for everything else and for float64), and the small helpers its .cpp files
// share. Implementation is split by concern: cpu_kernels.cpp (memory, GRU forwarding),
// cpu_dense.cpp, cpu_conv.cpp, cpu_pool.cpp, cpu_eltwise.cpp, cpu_loss.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "mirror/error.h"
#include "ops/kernel_set.h"

namespace mirror::cpu {

class CpuKernels final : public KernelSet {
 public:
  const char* name() const override { return "cpu"; }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            std::size_t bytes) override;
  void memset_zero(void* dst, std::size_t bytes) override;
  void synchronize(Device) override {}

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
  bool blocked_images() const override { return true; }
  Tensor conv2d_forward_blocked(const Tensor& x, const Tensor& w, const Tensor& bias,
                                const ops::Conv2DGeometry& g, ops::Activation act,
                                bool blocked_out) override;
  Tensor conv2d_backward_data_blocked(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                      const ops::Conv2DGeometry& g, std::int64_t block) override;
  Tensor maxpool2d_forward_blocked(const Tensor& x, const ops::Pool2DGeometry& g,
                                   bool blocked_out) override;
  Tensor conv2d_operand(const Tensor& t) override;
  Tensor image_to_plain(const Tensor& x) override;
  Tensor image_to_blocked(const Tensor& x, std::int64_t block) override;
  Tensor maxpool2d_backward_relu(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 const ops::Pool2DGeometry& g) override;
  Tensor channel_affine_operand(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                                const ops::ReluMask* mask, const ops::ChannelView& v) override;
  Tensor maxpool2d_backward_operand(const Tensor& x, const Tensor& y, const Tensor& dy,
                                    const ops::Pool2DGeometry& g, bool relu) override;

  Tensor activation_forward(ops::Activation act, const Tensor& x) override;
  Tensor activation_backward(ops::Activation act, const Tensor& y, const Tensor& dy) override;
  Tensor dropout_forward(const Tensor& x, float rate, std::uint64_t seed, const Tensor& sample_ids,
                         Tensor& mask) override;
  Tensor dropout_backward(const Tensor& dy, const Tensor& mask) override;
  void axpy(double alpha, const Tensor& b, Tensor& a) override;
  Tensor add_n(const std::vector<Tensor>& xs, bool relu) override;
  void scale(Tensor& a, double alpha) override;
  void fill(Tensor& a, double value) override;
  double sum_squares(const Tensor& a) override;
  Tensor cast(const Tensor& a, DType to) override;
  void cast_into(const Tensor& a, Tensor& out) override;
  bool all_finite(const Tensor& a) override;
  ops::MathSupport math_support(Device device, MathMode mode) override;
  std::string instruction_set(Device) override;

  std::vector<double> channel_sums(const Tensor& a, const Tensor& b,
                                   const ops::ChannelView& v) override;
  Tensor channel_affine(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                        const ops::ChannelView& v) override;
  bool fused_channel_relu() const override { return true; }
  std::vector<double> channel_sums_masked(const Tensor& a, const Tensor& b,
                                          const ops::ReluMask& mask,
                                          const ops::ChannelView& v) override;
  Tensor channel_affine_masked(const Tensor& a, const Tensor& b, const ops::ChannelAffine& k,
                               const ops::ReluMask& mask, const ops::ChannelView& v) override;
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

 private:
  /// maxpool2d_backward, with the ReLU mask of its input when `relu` (cpu_pool.cpp).
  Tensor pool_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                       const ops::Pool2DGeometry& g, bool relu);
};

/// Element count above which element-wise loops fork OpenMP threads (below it the fork costs
/// more than the work).
inline constexpr std::int64_t kParallelGrain = 1 << 15;

/// Calls f(T{}) with T = float or double according to `t`'s dtype; other dtypes throw
/// InvalidArgument naming the op (dispatch.cpp does not check dtypes for every op).
template <class F>
decltype(auto) with_float(const Tensor& t, const char* op, F&& f) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    default:
      throw InvalidArgument(std::string(op) +
                            ": the CPU backend supports float32 and float64, got " + t.str());
  }
}

/// Note [CPU fp16 emulation]: x86 CPUs before AVX512-FP16 have no fp16 arithmetic, and oneDNN 2.6
/// no fp16 convolution or matmul on them. So MathMode::kFloat16 rounds each operand of the
/// matrix products (gemm, the convolutions) to fp16 and back (round_to_half), then computes in
/// float32. Values beyond fp16's range become inf exactly as on a GPU, so loss scaling and its
/// overflow skips are real; the speed is float32's plus the rounding pass, and the policy says so.
Tensor round_to_half(const Tensor& t);
/// Whether oneDNN will run AVX-512 BF16 kernels here (ONEDNN_MAX_CPU_ISA can cap it).
bool cpu_has_bf16();

/// Throws InvalidArgument unless `t` has dtype `want` (for the tensors dispatch.cpp does not
/// compare, e.g. optimizer state).
void require_dtype(const Tensor& t, DType want, const char* op, const char* what);

}  // namespace mirror::cpu
