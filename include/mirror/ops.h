// defines: the backend-neutral kernels every layer and optimizer is built from. Each call
// dispatches on the device of its tensors (all must be on one device) to the CPU backend
// (oneDNN + plain loops, float32 and float64) or the CUDA backend (cuBLAS/cuDNN, float32).
//
// Conventions:
//  - Outputs are returned as new tensors from the device allocator (cached, so the steady state
//    allocates nothing from the backend).
//  - Parameter-gradient outputs (`dw`, `dbias`, `dtable`, GRU weight grads) are ACCUMULATED
//    into the tensors passed in (+=), so micro-batches and buckets can sum into them; callers
//    zero them at the start of a step.
//  - Layouts: dense activations [N, C]; images NCHW; convolution kernels OIHW; sequences
//    [N, T, F] (batch-major); GRU weights as in GruWeights below.
//  - Bad shapes or dtypes throw InvalidArgument naming the op and the shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mirror/precision.h"
#include "mirror/tensor.h"

namespace mirror::ops {

// ---------------------------------------------------------------- dense
/// c = alpha * op(a) @ op(b) + beta * c, 2-D row-major; op(x) = x^T when trans_x.
/// `c` must already have the right shape (beta = 0 ignores its contents).
void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
          Tensor& c);
/// y[n, c, ...] += bias[c] (channel is dimension 1; works for [N,C] and [N,C,H,W]).
void bias_add(Tensor& y, const Tensor& bias);
/// dbias[c] += sum over all other dimensions of dy[n, c, ...].
void bias_grad(const Tensor& dy, Tensor& dbias);

// ---------------------------------------------------------------- convolution and pooling
enum class Activation { kIdentity, kRelu, kTanh, kSigmoid };

/// Explicit padding (TF "same" may be asymmetric: extra row/column goes bottom/right).
struct Conv2DGeometry {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  /// Grouped convolution: the C input and O output channels form `groups` groups (both divisible
  /// by it); output channel o reads the C / groups input channels of group o / (O / groups), and
  /// the kernel is [O, C / groups, KH, KW]. groups = C is a depthwise convolution.
  int groups = 1;
  /// TensorFlow's "same" padding for an input size and kernel/stride; "valid" is all zeros.
  static Conv2DGeometry same(int in_h, int in_w, int k_h, int k_w, int stride_h, int stride_w);
  static Conv2DGeometry valid(int stride_h, int stride_w);
  int out_h(int in_h, int k_h) const { return (in_h + pad_top + pad_bottom - k_h) / stride_h + 1; }
  int out_w(int in_w, int k_w) const { return (in_w + pad_left + pad_right - k_w) / stride_w + 1; }
};

/// y = conv(x[N,C,H,W], w[O,C/groups,KH,KW]) (+ bias[O] when defined) -> [N,O,OH,OW].
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2DGeometry& g);
/// dx = conv_transpose(dy, w) -> shape of x (`x_shape`). Overwrites (returns new).
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2DGeometry& g);
/// dw += correlation(x, dy); dbias += sum(dy) when dbias is defined. x and dy may be blocked
/// (Note [Blocked images]).
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                             const Conv2DGeometry& g);

// Note [Blocked images]: oneDNN's convolutions compute in a blocked layout, channels in groups of
// b (nChw16c with AVX-512, nChw8c with AVX2), and reordering every input and output between that
// and plain NCHW made a third of the CNN's first convolution (Note [Convolution layouts]). So a
// float32 image may stay blocked between the layers that agree to it: the tensor is then rank 5,
// [N, C/b, H, W, b], channel c at [n, c / b, h, w, c % b]. Only the functions below produce
// one, only when asked (`blocked_out`), and only on a backend that computes in such a layout
// (the CPU's; elsewhere they return plain NCHW). Sequential asks a layer for a blocked output
// only when every reader accepts one (Layer::accepts_blocked_input), and a gradient travels in
// the layout of the activation it belongs to. A layer that does not accept blocked input rejects
// a rank-5 tensor in its shape check, so a missed conversion is an error, never a misread.
// Element-wise ops (activations, axpy) work on either form unchanged, and the normalisation ops
// take a blocked image through ChannelView::block, so a ResNet's convolution, BatchNorm, ReLU
// and Add pass blocked images from one to the next; a layer that reads several inputs or must
// give a plain output converts (blocked_image, plain_image).

/// Whether `x` is a blocked image (rank 5), and its block b (0 for a plain tensor).
std::int64_t image_block(const Tensor& x);
/// The NCHW shape of an image in either layout.
Shape image_shape(const Tensor& x);
/// A blocked image as plain NCHW (a plain one is returned as it is).
Tensor plain_image(const Tensor& x);
/// An image in the layout of block `block`: plain NCHW for 0, else [N, C/block, H, W, block]
/// (C divisible by block); one already in that layout is returned as it is.
Tensor blocked_image(const Tensor& x, std::int64_t block);
/// act(conv2d_forward(x, w, bias, g)) with x plain or blocked; blocked when `blocked_out` and
/// the backend computes blocked (the ReLU then runs inside the convolution).
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const Conv2DGeometry& g, Activation act, bool blocked_out);
/// conv2d_backward_data with dy plain or blocked; dx blocked with `block` (image_block of the
/// forward's x) or plain when `block` is 0.
Tensor conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                            const Conv2DGeometry& g, std::int64_t block);

// Note [Convolution operands]: under MathMode::kBFloat16 the CPU's convolution primitives read
// bfloat16 images, and each rounds a float32 image by a reorder before it runs. A Conv2D's output
// gradient is read by two of them (the input and the weight gradients), so it was rounded twice.
// conv2d_operand rounds once, into the layout the primitives read (a bfloat16 blocked image
// [N, C/16, H, W, 16]); conv2d_backward_data and conv2d_backward_weights take the result as dy,
// and conv2d_forward and conv2d_backward_weights take one as x. The rounding is the reorder the
// primitives ran themselves, so the results are the same bits. The layer does not keep a rounded
// x from forward for the weight gradient: in the ResNet's step that saved 1.3 ms of reorders and
// cost the weight-gradient primitives 1.55 ms, which read it cold (a reorder run just before a
// primitive leaves its output in cache). Where rounding gains nothing (another math mode,
// backend, dtype, or C not a multiple of 16) t is returned as it is. An operand is for the
// convolutions only: no other op takes it, and dx is float32 in the layout asked for.
Tensor conv2d_operand(const Tensor& t);

// Note [Gradients as convolution operands]: most convolutions' output gradients come from one
// layer's backward, a max pool's (the CNN) or a BatchNormalization's (the ResNet), and the
// convolution rounds that float32 gradient straight away (conv2d_operand). Written as float32
// and then rounded, the gradient crosses memory three times (the write, the reorder's read and
// its write); for a pool it is four times the size of dy and three quarters zeros. So
// maxpool2d_backward (as_conv_operand) and channel_affine (ChannelAffine::conv_operand) can
// return conv2d_operand(result) directly: on the CPU their loops compute each element in float32
// as before and round 16 lanes at a time in registers with VCVTNEPS2BF16, the instruction
// oneDNN's reorder runs where Mirror computes in bfloat16, so the bits are conv2d_operand's.
// Elsewhere (another mode, layout or backend) the two ops run. Sequential asks for it where a
// layer's backward reads dy through conv2d_operand alone (Layer::output_grad_is_conv_operand: a
// Conv2D without an activation, or whose ReLU its reader masks) and that layer's only reader can
// return one (Layer::can_return_conv_operand).

struct Pool2DGeometry {
  int k_h = 2, k_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int out_h(int in_h) const { return (in_h + pad_top + pad_bottom - k_h) / stride_h + 1; }
  int out_w(int in_w) const { return (in_w + pad_left + pad_right - k_w) / stride_w + 1; }
};
/// Max pooling; padded positions never win. Ties: the first maximum in row-major window order
/// receives the gradient (deterministic, same on every backend).
/// x may be blocked (Note [Blocked images]); y is blocked like it when `blocked_out`, plain
/// NCHW otherwise.
Tensor maxpool2d_forward(const Tensor& x, const Pool2DGeometry& g, bool blocked_out = false);
/// dy is laid out like y; dx like x. `relu_input`: x is a ReLU's output, and dx gets its mask
/// too (relu backward through x), in one pass (Note [ReLU through max pool], cpu_pool.cpp).
/// `as_conv_operand`: dx comes back as conv2d_operand(dx) would make it, for a gradient that only
/// a convolution's backward reads (Note [Gradients as convolution operands] above): the same
/// bits, without writing the float32 dx first.
Tensor maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                          const Pool2DGeometry& g, bool relu_input = false,
                          bool as_conv_operand = false);

// ---------------------------------------------------------------- element-wise
Tensor activation_forward(Activation act, const Tensor& x);
/// Gradient expressed through the forward OUTPUT y (valid for all four activations).
Tensor activation_backward(Activation act, const Tensor& y, const Tensor& dy);

/// Inverted dropout. The keep decision for element j of sample n is a pure function of
/// (seed, sample_ids[n], j), so a sample is masked the same way whichever replica holds it;
/// this keeps R replicas exactly equivalent to one (docs/architecture.md invariant 2).
/// sample_ids: int64 [N]. Returns y; `mask` receives the scale per element (0 or 1/(1-rate)).
Tensor dropout_forward(const Tensor& x, float rate, std::uint64_t seed, const Tensor& sample_ids,
                       Tensor& mask);
Tensor dropout_backward(const Tensor& dy, const Tensor& mask);

/// a += alpha * b (same shape/dtype).
void axpy(double alpha, const Tensor& b, Tensor& a);
/// xs[0] + xs[1] + ... summed left to right in their dtype (the bits of axpy with alpha 1 into a
/// copy of xs[0]), then max(sum, 0) with `relu` (Note [BatchNorm and ReLU]: an Add read only by a
/// ReLU applies it); one pass. Two or more tensors of one shape, dtype and device.
Tensor add_n(const std::vector<Tensor>& xs, bool relu = false);
void scale(Tensor& a, double alpha);
void fill(Tensor& a, double value);
/// Sum of squares in double precision (for global-norm clipping).
double sum_squares(const Tensor& a);
/// Converts between float32 and float16 / bfloat16 (round to nearest even) or float64.
Tensor cast(const Tensor& a, DType to);
/// cast(a, out.dtype()) written into out (same shape and device): no new tensor per call.
void cast_into(const Tensor& a, Tensor& out);
/// True when every element is finite.
bool all_finite(const Tensor& a);

/// What a device's backend can do with a math mode (Note [Mixed precision], precision.h).
struct MathSupport {
  std::string missing;   // non-empty: the mode cannot run here; says what the device lacks
  std::string fallback;  // non-empty: the mode runs, emulated (slower); says how, to be logged
};
MathSupport math_support(Device device, MathMode mode);
/// The instruction set a device's kernels run, in words (the CPU: oneDNN's ISA and Mirror's
/// vector loops, both capped by ONEDNN_MAX_CPU_ISA); empty when the backend reports none.
std::string instruction_set(Device device);

// ---------------------------------------------------------------- normalisation, pooling, merging
/// Note [Channel view]: the normalisation ops see a tensor as [outer, channels, inner] (row
/// major): BatchNorm on NCHW is [N, C, H*W] (or [N, C, 1] for [N, C]); LayerNorm's per-row
/// statistics are [1, rows, features] and its per-feature scale [rows, features, 1].
/// `block` > 0: the tensor is a blocked image (Note [Blocked images]), [N, C/block, H, W, block]
/// seen as [N, C, H*W], element (o, c, i) at ((o C/block + c/block) inner + i) block + c%block;
/// channel_sums and channel_affine give the same bits as on the plain image.
struct ChannelView {
  std::int64_t outer = 1, channels = 1, inner = 1;
  std::int64_t block = 0;
  std::int64_t numel() const { return outer * channels * inner; }
};
/// Per channel c, in double precision and a fixed order (deterministic on every backend):
/// result[c] = sum of a[o, c, i] and result[C + c] = sum of a[o, c, i] * b[o, c, i] (pass b = a
/// for sums of squares). Returned on the host: 2 * channels values.
std::vector<double> channel_sums(const Tensor& a, const Tensor& b, const ChannelView& v);
/// Per-channel host coefficients of channel_affine, one value per channel; an empty vector is
/// all zeros (ka is required). The centres ca/cb are subtracted before scaling, as
/// (x - mean) * invstd, so values far from zero keep their relative precision.
struct ChannelAffine {
  std::vector<double> ka{}, ca{}, kb{}, cb{}, k0{};
  /// The map's ReLU, max(out, 0), applied as it is written (Note [BatchNorm and ReLU]).
  bool relu = false;
  /// The result as conv2d_operand would make it, for a map only a convolution's backward reads
  /// (Note [Gradients as convolution operands] above): the same bits.
  bool conv_operand = false;
};
/// out[o, c, i] = ka[c] (a[o, c, i] - ca[c]) + kb[c] (b[o, c, i] - cb[c]) + k0[c], computed in
/// the tensors' dtype in that order; a new tensor shaped like a. `b` may be undefined when kb is
/// empty.
Tensor channel_affine(const Tensor& a, const Tensor& b, const ChannelAffine& k,
                      const ChannelView& v);

// Note [BatchNorm and ReLU]: a BatchNormalization or an Add read only by a ReLU layer takes the
// ReLU into its own passes (Sequential pairs them; the ReLU layer then passes values and
// gradients through). Forward clamps the normalised output (ChannelAffine::relu) or the sum
// (add_n), which saves the ReLU's read and write of the activation. Backward needs the ReLU's
// mask, output > 0. For BatchNorm the output is the forward map m(x) = ka (x - ca) + k0 of its
// input, which its backward reads anyway, so the mask is recomputed from x in the same float
// arithmetic (ReluMask) instead of read from memory: the gradient sums and the input gradient
// read dy as (m(x) > 0 ? dy : 0), the ReLU's backward without its three passes. The Add keeps
// the output and runs the ReLU's backward itself. The bits are those of the layers apart
// (tests/nn_batchnorm_relu_test.cpp).
struct ReluMask {
  std::vector<double> ka{}, ca{}, k0{};  // per channel, as the forward's ChannelAffine
};
/// channel_sums with `a` read as (m(b) > 0 ? a : 0), m the mask's map.
std::vector<double> channel_sums(const Tensor& a, const Tensor& b, const ChannelView& v,
                                 const ReluMask& mask);
/// channel_affine with `a` read as (m(b) > 0 ? a : 0); b is required (kb may be empty).
Tensor channel_affine(const Tensor& a, const Tensor& b, const ChannelAffine& k,
                      const ChannelView& v, const ReluMask& mask);

// ---------------------------------------------------------------- device batch normalisation
/// Note [Device batch norm]: BatchNormalization's training step with everything on the tensors'
/// device: its statistics, their sum over the replicas (synchronized BatchNorm: the ReplicaSum
/// sums a device tensor, nn/layer.h) and the normalisation, and the same in backward. A GPU
/// replica then never waits on the host inside a BN layer: its host thread only enqueues. Every
/// BN layer training on a GPU takes this path, synchronized or not (the host path's read-back of
/// the statistics made the ResNet's GPU step wait for the device 128 times). The
/// arithmetic is the layer's host path (nn/norm.cpp), coefficient for coefficient
/// (src/math/batchnorm.h); the CPU implements the same ops (tests compare the two paths).
/// Tensors: `x` [N, ...] seen as `v` (Note [Channel view]); `weights` float32 [N] (weight > 0: a
/// real sample, else padding, left out of the statistics and given no gradient; undefined: all
/// real); gamma, beta, the moving statistics [C] in x's dtype (gamma/beta undefined: 1 and 0).

/// Per channel, over the real samples: sum of x, then sum of x^2; then the element count. A
/// float64 [2C + 1] tensor on x's device.
Tensor batchnorm_statistics(const Tensor& x, const Tensor& weights, const ChannelView& v);
struct BatchNormNormalized {
  Tensor y;      // gamma invstd (x - mean) + beta, shaped like x
  Tensor saved;  // float64 [2C + 1]: mean, invstd per channel, then the count (for backward)
};
/// Normalises x with the statistics `stats` (batchnorm_statistics, summed over the replicas when
/// synchronized; mean and biased variance); when the count is > 0, also moves the moving
/// statistics towards them (moving = momentum moving + (1 - momentum) batch), in place.
BatchNormNormalized batchnorm_normalize(const Tensor& x, const Tensor& stats, const Tensor& gamma,
                                        const Tensor& beta, Tensor& moving_mean,
                                        Tensor& moving_variance, double momentum, double epsilon,
                                        const ChannelView& v);
/// This replica's per-channel sums of dy and of dy * xhat (xhat = (x - mean) invstd): a float64
/// [2C] tensor; adds them to gamma_grad and beta_grad (each when defined), the parameter
/// gradients' local share.
Tensor batchnorm_gradient_sums(const Tensor& dy, const Tensor& x, const Tensor& saved,
                               Tensor& gamma_grad, Tensor& beta_grad, const ChannelView& v);
/// dx = gamma invstd (dy - sum_dy / M - xhat sum_dy_xhat / M) with M the count in `saved` and
/// `sums` the (replica-summed) batchnorm_gradient_sums; zero for padding samples.
Tensor batchnorm_input_gradient(const Tensor& dy, const Tensor& x, const Tensor& saved,
                                const Tensor& gamma, const Tensor& sums, const Tensor& weights,
                                const ChannelView& v);

/// Average pooling, NCHW. Padded positions are left out of each window's count (TensorFlow's
/// "same" average pooling, cuDNN's COUNT_EXCLUDE_PADDING).
Tensor avgpool2d_forward(const Tensor& x, const Pool2DGeometry& g);
Tensor avgpool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2DGeometry& g);

/// A strided copy of a 4-D block of elements: for every index (i0, i1, i2, i3) < dims,
/// dst[dst_offset + sum ik * dst_strides[k]] = src[src_offset + sum ik * src_strides[k]].
/// dst and src must have the same dtype and device; every addressed element must lie inside
/// its tensor (checked). Concatenation, splitting, zero padding and cropping are built on it.
struct BlockCopy {
  std::int64_t dims[4] = {1, 1, 1, 1};
  std::int64_t dst_strides[4] = {0, 0, 0, 0}, src_strides[4] = {0, 0, 0, 0};
  std::int64_t dst_offset = 0, src_offset = 0;
};
void copy_block(Tensor& dst, const Tensor& src, const BlockCopy& b);
/// Concatenation along dimension 1 (channels of NCHW, features of [N, F]); the other
/// dimensions must agree. split_channels is its inverse: pieces of `sizes` channels each.
Tensor concat_channels(const std::vector<Tensor>& xs);
std::vector<Tensor> split_channels(const Tensor& y, const std::vector<std::int64_t>& sizes);
/// Zero padding of NCHW rows/columns (top, bottom, left, right); crop2d is its inverse.
Tensor zero_pad2d(const Tensor& x, int top, int bottom, int left, int right);
Tensor crop2d(const Tensor& y, int top, int bottom, int left, int right);

/// GELU, the exact (erf) form (Keras's default approximate=False; PyTorch's default):
/// y = x * Phi(x). Its gradient needs the INPUT x (unlike activation_backward).
Tensor gelu_forward(const Tensor& x);
Tensor gelu_backward(const Tensor& x, const Tensor& dy);

// ---------------------------------------------------------------- embedding
/// ids int32 [N, T] in [0, V); table [V, D] -> [N, T, D]. Index 0 is padding: its row is
/// returned as stored (kept zero) and receives no gradient.
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable);

// ---------------------------------------------------------------- loss and metrics
struct LossResult {
  double loss = 0;  // sum_n w[n] * nll[n] / global_count: this replica's share of the mean
  Tensor dlogits;   // d loss / d logits = w[n] * (softmax - onehot) / global_count
};
/// Softmax cross-entropy with int32 labels [N] in [0, C), per-sample weights [N] (0 for padded
/// samples) and the GLOBAL number of real samples in the step, so that summing the results of
/// all replicas gives the exact global mean. Labels out of range throw InvalidArgument.
LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& weights,
                                 double global_count);
/// Number of samples (weight > 0) whose argmax equals the label.
std::int64_t correct_count(const Tensor& logits, const Tensor& labels, const Tensor& weights);

/// Note [Dense labels] (mirror/data/dataset.h): softmax cross-entropy per step or per pixel.
/// logits [N, T, K] with int32 labels [N, T] (a tagger), or [N, K, H, W] (classes on the channel
/// axis, NCHW) with labels [N, H, W] (a segmentation); weights [N] per sample (0 for padding);
/// counted[n] the positions of sample n that count in the loss: its first counted[n] steps (the
/// rest are masked padding) or all H*W pixels; global_count the counted positions of the GLOBAL
/// batch. Every counted position is one row of softmax_cross_entropy, the same arithmetic
/// (math/loss.h) on both backends, so loss = sum_positions w * nll / global_count: summing the
/// replicas' results gives the exact global mean. dlogits has the logits' shape (zero where a
/// position does not count). Labels out of [0, K) at a counted position throw InvalidArgument.
struct DenseLossResult : LossResult {
  std::int64_t correct = 0;  // counted positions (of samples with w > 0) whose argmax is the label
  std::int64_t counted = 0;  // counted positions of the samples with w > 0
};
DenseLossResult dense_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                            const Tensor& weights,
                                            const std::vector<std::int32_t>& counted,
                                            double global_count);

/// The float-target losses, with the metric sums a step reports (Note [Float-target losses]).
enum class TargetLoss { kBinaryCrossEntropy, kMeanSquaredError };
struct TargetLossResult : LossResult {
  double squared_error_sum = 0;    // sum of (p - t)^2 over the elements of samples with w > 0,
                                   // p = logit (MSE) or sigmoid(logit) (BCE); unweighted
  double abs_error_sum = 0;        // sum of |p - t| over the same elements
  std::int64_t correct = 0;        // BCE: elements with (logit > 0) == (target > 0.5); MSE: 0
  std::int64_t target_values = 0;  // elements of the samples with w > 0
};
/// Note [Float-target losses]
/// logits [N, K] against float targets of the logits' dtype, [N, K] (or [N] when K == 1), with
/// per-sample weights [N] (0 for padded samples) and the GLOBAL real-sample count: a sample's
/// loss is the mean over its K elements of the element loss (Keras semantics), and
///   loss = sum_n w[n] * mean_k e(logit[n,k], target[n,k]) / global_count,
/// so summing the results of all replicas gives the exact global mean, as for
/// softmax_cross_entropy. A shape mismatch throws InvalidArgument naming both shapes.
///  - binary_cross_entropy: e = max(x, 0) - x t + log1p(exp(-|x|)) (stable for any finite x),
///    de/dx = sigmoid(x) - t; targets are probabilities in [0, 1].
///  - mean_squared_error: e = (x - t)^2, de/dx = 2 (x - t).
TargetLossResult binary_cross_entropy(const Tensor& logits, const Tensor& targets,
                                      const Tensor& weights, double global_count);
TargetLossResult mean_squared_error(const Tensor& logits, const Tensor& targets,
                                    const Tensor& weights, double global_count);
/// Either of the two above, chosen by `kind`.
TargetLossResult target_loss(TargetLoss kind, const Tensor& logits, const Tensor& targets,
                             const Tensor& weights, double global_count);

// ---------------------------------------------------------------- GRU
/// Weights in PyTorch/cuDNN layout and gate order (r, z, n):
///   w_ih [3H, F], w_hh [3H, H], b_ih [3H], b_hh [3H].
/// Semantics are docs/architecture.md invariant 5 (reset applied after the recurrent matmul).
struct GruWeights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};
struct GruForwardResult {
  Tensor y;        // [N, T, H]; steps at or past a sequence's length hold zeros
  Tensor h_last;   // [N, H]: state after each sequence's last valid step
  Tensor reserve;  // backend-specific saved activations for backward
};
/// x [N, T, F]; lengths int32 [N] on the HOST, each in [1, T] (throws otherwise); h0 zero.
GruForwardResult gru_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                             const GruWeights& w, bool training);
/// dy [N, T, H] (may be undefined: no sequence output used) and dh_last [N, H] (may be
/// undefined). Returns dx [N, T, F], or an undefined tensor when !need_dx (a model's first
/// layer: nothing reads the data's gradient, and the CPU skips its product); weight gradients
/// are accumulated into `dw` (same layout as `w`).
Tensor gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths, const GruWeights& w,
                    const GruForwardResult& fwd, const Tensor& dy, const Tensor& dh_last,
                    GruWeights& dw, bool need_dx = true);

// ---------------------------------------------------------------- LSTM
/// Weights in PyTorch/cuDNN layout and gate order (i, f, g, o):
///   w_ih [4H, F], w_hh [4H, H], b_ih [4H], b_hh [4H].
/// Semantics are docs/architecture.md invariant 5 (PyTorch nn.LSTM, cuDNN CUDNN_LSTM).
struct LstmWeights {
  Tensor w_ih, w_hh, b_ih, b_hh;
};
struct LstmForwardResult {
  Tensor y;        // [N, T, H]; steps at or past a sequence's length hold zeros
  Tensor h_last;   // [N, H]: hidden state after each sequence's last valid step
  Tensor c_last;   // [N, H]: cell state after each sequence's last valid step
  Tensor reserve;  // backend-specific saved activations for backward
};
/// x [N, T, F]; lengths int32 [N] on the HOST, each in [1, T]; h0 = c0 = 0. Past a sequence's
/// length both states are carried unchanged.
LstmForwardResult lstm_forward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                               const LstmWeights& w, bool training);
/// dy [N, T, H] and dh_last [N, H] (either may be undefined, not both). Returns dx [N, T, F]
/// (undefined when !need_dx, as gru_backward); weight gradients are accumulated into `dw`
/// (same layout as `w`).
Tensor lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                     const LstmWeights& w, const LstmForwardResult& fwd, const Tensor& dy,
                     const Tensor& dh_last, LstmWeights& dw, bool need_dx = true);

// ---------------------------------------------------------------- sequence layout
/// x [N, T, F] -> y with y[n, t] = x[n, len_n - 1 - t] for t < len_n and y[n, t] = x[n, t]
/// past the length: each sequence reversed within its own length (PyTorch's packed reverse,
/// not a reversal of the padding). Its own inverse, so it is also its own backward.
Tensor reverse_sequences(const Tensor& x, const std::vector<std::int32_t>& lengths);
/// a [..., A] and b [..., B] with equal leading dimensions -> [..., A + B].
Tensor concat_features(const Tensor& a, const Tensor& b);
/// y [..., W] -> y[..., begin : begin + count] (a copy).
Tensor slice_features(const Tensor& y, std::int64_t begin, std::int64_t count);
/// a * b element-wise (same shape and dtype).
Tensor multiply(const Tensor& a, const Tensor& b);

// ---------------------------------------------------------------- 1-D windows over steps
/// A window over the steps of [N, T, C] sequences: k taps `dilation` steps apart, moved by
/// `stride`, with explicit zero padding before (left) and after (right) the steps.
struct Window1D {
  int k = 1, stride = 1, dilation = 1, pad_left = 0, pad_right = 0;
  int span() const { return dilation * (k - 1) + 1; }
  /// Output steps for `in` input steps.
  int out(int in) const { return (in + pad_left + pad_right - span()) / stride + 1; }
  /// Keras's padding names for `in` steps: "valid" (none), "same" (TensorFlow's rule: ceil(in /
  /// stride) outputs, the odd step of padding after), "causal" (span - 1 steps before).
  /// Throws InvalidArgument for other names or non-positive sizes.
  static Window1D make(const std::string& padding, int in, int k, int stride, int dilation);
};
/// x [N, T, C] -> columns [N, T_out, k * C]: cols[n, t, j, c] = x[n, t * stride - pad_left +
/// j * dilation, c], 0 in the padding (the left factor of a 1-D convolution as one gemm).
Tensor im2col1d(const Tensor& x, const Window1D& g);
/// The adjoint of im2col1d: columns [N, T_out, k * C] -> [N, steps, C], summing the taps that
/// read each step (in tap order: deterministic).
Tensor col2im1d(const Tensor& cols, const Window1D& g, std::int64_t steps);
/// Max or average over each window of x [N, T, C] -> [N, T_out, C], counting only in-bounds
/// steps before each sequence's length (lengths int32 [N] on the HOST, in [1, T]): padding never
/// wins a max nor counts in an average. Max ties: the first in window order gets the gradient.
/// A window with no counted step gives 0.
enum class Pool1D { kMax, kAverage };
Tensor pool1d_forward(Pool1D mode, const Tensor& x, const std::vector<std::int32_t>& lengths,
                      const Window1D& g);
/// d(loss)/dx for dy [N, T_out, C] (x is pool1d_forward's input).
Tensor pool1d_backward(Pool1D mode, const Tensor& x, const Tensor& dy,
                       const std::vector<std::int32_t>& lengths, const Window1D& g);
/// A copy of x [N, T, ...] with every step t >= lengths[n] set to zero.
Tensor zero_past_lengths(const Tensor& x, const std::vector<std::int32_t>& lengths);

// ---------------------------------------------------------------- optimizer updates
/// SGD with momentum (buf may be undefined when momentum == 0), Nesterov, L2 weight decay.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr, double momentum,
                bool nesterov, double weight_decay);
/// Adam / AdamW (decoupled = true) with bias correction at 1-based `step`.
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr, double beta1,
                 double beta2, double eps, double weight_decay, bool decoupled, std::int64_t step);

// ---------------------------------------------------------------- Keras's layers
/// Note [Parametric activations]: Keras's ReLU layer (max_value, negative_slope, threshold; relu6),
/// LeakyReLU and ELU, and the activations whose gradient needs the INPUT (silu, hard_sigmoid,
/// hard_silu, gelu), differentiated through their input (src/math/keras_activations.h):
///   relu:         y = clip(x > threshold ? x : 0, 0, max_value) - negative_slope * max(threshold - x, 0)
///                 (threshold 0: max(x, 0) before the clip; no clip when max_value < 0)
///   leaky_relu:   y = x >= 0 ? x : negative_slope * x
///   elu:          y = x > 0 ? x : alpha * (exp(x) - 1)
///   silu:         y = x * sigmoid(x) (Keras's swish)
///   hard_sigmoid: y = relu6(x + 3) / 6 (Keras 3's)
///   hard_silu:    y = x * hard_sigmoid(x) (Keras's hard_swish)
///   gelu:         y = x * Phi(x), the exact (erf) form (math/gelu.h)
///   gelu_tanh:    y = x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (approximate=True)
struct Eltwise {
  enum class Kind { kRelu, kLeakyRelu, kElu, kSilu, kHardSigmoid, kHardSilu, kGelu, kGeluTanh };
  Kind kind = Kind::kRelu;
  double negative_slope = 0, threshold = 0, alpha = 1;
  double max_value = -1;  // < 0: no upper clip
};
Tensor eltwise_forward(const Eltwise& f, const Tensor& x);
Tensor eltwise_backward(const Eltwise& f, const Tensor& x, const Tensor& dy);
/// y = max(a, b) (minimum: min(a, b)) element-wise; `mask` receives 1 where a was taken (ties
/// included) and 0 where b was, so d a = dy * mask and d b = dy - d a.
Tensor extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask);
/// c[i] = alpha op(a[i]) op(b[i]) + beta c[i] for each matrix i of 3-D row-major a, b, c (their
/// first dimension B), as gemm does for one.
void batched_gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
                  double beta, Tensor& c);
/// The masks of Keras's attention layers over scores [N * heads, Tq, Tk] (block b belongs to
/// sample b / heads): a key at or past its sample's length is masked, so is every score of a
/// query at or past it when `mask_queries` (MultiHeadAttention), and key j > query i when
/// `causal`. Empty `lengths`: no padding.
struct AttentionMask {
  std::vector<std::int32_t> lengths;
  int heads = 1;
  bool mask_queries = false;
  bool causal = false;
};
/// Softmax over the last axis with masked scores replaced by -1e9 (Keras's large negative), so a
/// row whose every key is masked (a padded query) is uniform, as in Keras.
Tensor attention_softmax(const Tensor& scores, const AttentionMask& m);
/// d scores for d probs (probs from attention_softmax): p (dp - sum(dp p)), 0 where masked.
Tensor attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, const AttentionMask& m);

/// 64-bit FNV-1a hash of the raw bytes (any device): the replica-divergence fingerprint.
std::uint64_t fingerprint(const Tensor& a);

}  // namespace mirror::ops
