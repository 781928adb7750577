// GRU and LSTM forward/backward through cuDNN 9's RNN API (cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8) with per-sample sequence lengths: one
// implementation for both cells (RnnKind says which), so descriptors, weight conversion and
// padding rules are written once.
//
// Configuration: CUDNN_GRU or CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS (b_ih and b_hh; for the GRU the
// reset gate multiplies U_n h + b_hn: docs/architecture.md invariant 5), CUDNN_LINEAR_INPUT,
// CUDNN_UNIDIRECTIONAL (Bidirectional is a layer over two of these: src/nn/bidirectional.cpp),
// one layer, no projection, float32 data, the precision policy's math type (math_type.h:
// CUDNN_FMA_MATH, no TF32, under float32; tensor-op math under the mixed policies), no dropout,
// CUDNN_RNN_PADDED_IO_ENABLED with CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED: x is ops.h's
// [N, T, F] as it is, y is [N, T, H]. hx = cx = NULL (zero initial states); hy (and cy) are the
// states after each sequence's last valid step.
//
// Note [GRU padding]: ops.h promises y = 0 at steps >= length. cuDNN fills padded output
// positions with the data descriptor's paddingFill (0 here); we also zero them, and the padded
// steps of dx and of the incoming dy, with zero_past_length, so the result does not depend on
// how a cuDNN version treats padding. The same holds for the LSTM.
//
// Note [GRU weight layout]: the framework keeps PyTorch's layout (w_ih [G*H, F], w_hh [G*H, H],
// b_ih [G*H], b_hh [G*H]; GRU: G = 3 gate blocks r, z, n; LSTM: G = 4 blocks i, f, g, o), so
// checkpoints are device-independent. cuDNN keeps an opaque weight space;
// cudnnGetRNNWeightParams returns, per linLayerID, the address and shape of one gate's matrix
// and bias. IDs 0 .. G-1 are the input (W) matrices of the gates in the order above (cuDNN's
// GRU: reset, update, new; LSTM: input, forget, new memory c', output: PyTorch's orders too)
// and G .. 2G-1 the recurrent (U) ones, with the matching bias vectors (b_i* for the first G,
// b_h* for the others); each matrix is row-major [H, inputs]. gate_block() below is the ONE
// place that maps an ID to the framework's rows; pack (framework -> cuDNN) and unpack (cuDNN
// gradient -> framework gradient) both use it, and check_block() verifies cuDNN's reported
// shape before any copy.
//
// Note [RNN empty sizes]: cuDNN rejects a zero batch, zero hidden size and zero input size with
// CUDNN_STATUS_BAD_PARAM, so these are handled before any descriptor is built: N = 0 or H = 0
// give empty outputs (and a zero dx); F = 0 runs the same recurrence with one input feature
// that is zero and a zero weight column, which is exactly the F = 0 model (the input
// projection of an empty input is zero, the biases still act), as the CPU computes it.
#include <initializer_list>
#include <string>

#include "cuda/cuda_kernels.h"
#include "cuda/kernels.h"
#include "cuda/math_type.h"

namespace mirror::cuda {
namespace {

/// Which cell: cuDNN's mode, the number of gate blocks G, and the op name for messages.
struct RnnKind {
  cudnnRNNMode_t mode;
  int gates;
  const char* name;
};
constexpr RnnKind kGru{CUDNN_GRU, 3, "gru"};
constexpr RnnKind kLstm{CUDNN_LSTM, 4, "lstm"};

/// The four weight (or gradient) tensors of either cell, PyTorch layout.
struct RnnParams {
  Tensor w_ih, w_hh, b_ih, b_hh;
};
struct RnnOutputs {
  Tensor y, h_last, c_last, reserve;
};

struct RnnDims {
  int n, t, f, h;
};

struct RnnDescs {
  RnnDesc rnn;
  DropoutDesc dropout;
  RnnDataDesc x, y;
  TensorDesc hidden = make_tensor_desc();

  RnnDescs(cudnnHandle_t handle, const RnnKind& kind, const RnnDims& d,
           const std::vector<std::int32_t>& lengths) {
    cudnnDropoutDescriptor_t drop = nullptr;
    MIRROR_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&drop));
    dropout = DropoutDesc(drop);
    MIRROR_CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout, handle, 0.0f, nullptr, 0, 0));
    cudnnRNNDescriptor_t r = nullptr;
    MIRROR_CUDNN_CHECK(cudnnCreateRNNDescriptor(&r));
    rnn = RnnDesc(r);
    MIRROR_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        rnn, CUDNN_RNN_ALGO_STANDARD, kind.mode, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, cudnn_math_type(), d.f, d.h, d.h, 1,
        dropout, CUDNN_RNN_PADDED_IO_ENABLED));
    x = data_desc(d, d.f, lengths);
    y = data_desc(d, d.h, lengths);
    // hx/hy and cx/cy share this [layers = 1, N, H] descriptor (no projection: cell = hidden).
    const int dims[3] = {1, d.n, d.h}, strides[3] = {d.n * d.h, d.h, 1};
    MIRROR_CUDNN_CHECK(cudnnSetTensorNdDescriptor(hidden, CUDNN_DATA_FLOAT, 3, dims, strides));
  }

  static RnnDataDesc data_desc(const RnnDims& d, int width,
                               const std::vector<std::int32_t>& lengths) {
    cudnnRNNDataDescriptor_t p = nullptr;
    MIRROR_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&p));
    RnnDataDesc desc(p);
    float fill = 0.0f;  // Note [GRU padding]
    MIRROR_CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc, CUDNN_DATA_FLOAT,
                                                 CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED, d.t,
                                                 d.n, width, lengths.data(), &fill));
    return desc;
  }
};

/// Byte sizes of cuDNN's buffers for one problem.
struct RnnSpace {
  std::size_t weights = 0, work = 0, reserve = 0;
  std::size_t reserve_offset() const { return (weights + 255) / 256 * 256; }
};

RnnSpace space_sizes(cudnnHandle_t handle, const RnnDescs& d, cudnnForwardMode_t mode) {
  RnnSpace s;
  MIRROR_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, d.rnn, &s.weights));
  MIRROR_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, d.rnn, mode, d.x, &s.work, &s.reserve));
  return s;
}

/// The framework's rows for cuDNN's linLayerID `id` (Note [GRU weight layout]).
struct Block {
  float* matrix;  // row-major [h, cols]
  float* bias;    // [h]
  int cols;
};
Block gate_block(const RnnKind& kind, const RnnParams& w, int id, const RnnDims& d) {
  const int gate = id % kind.gates;  // cuDNN's gate order is PyTorch's (Note [GRU weight layout])
  const bool recurrent = id >= kind.gates;
  const Tensor& m = recurrent ? w.w_hh : w.w_ih;
  const Tensor& b = recurrent ? w.b_hh : w.b_ih;
  const int cols = recurrent ? d.h : d.f;
  return {f32(m, kind.name) + static_cast<std::int64_t>(gate) * d.h * cols,
          f32(b, kind.name) + static_cast<std::int64_t>(gate) * d.h, cols};
}

/// Verifies that cuDNN describes `desc` as `count` packed floats (innermost stride 1).
void check_block(cudnnTensorDescriptor_t desc, std::int64_t count, int id, const RnnKind& kind,
                 const char* what) {
  cudnnDataType_t type{};
  int nb = 0, dims[8] = {}, strides[8] = {};
  MIRROR_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &type, &nb, dims, strides));
  std::int64_t product = 1;
  for (int i = 0; i < nb; ++i) product *= dims[i];
  std::string shape;
  for (int i = 0; i < nb; ++i) shape += (i ? "," : "") + std::to_string(dims[i]);
  MIRROR_CHECK(type == CUDNN_DATA_FLOAT && product == count && nb > 0 && strides[nb - 1] == 1,
               Error,
               std::string("cuDNN describes ") + kind.name + " " + what + " " + std::to_string(id) +
                   " as [" + shape + "], expected " + std::to_string(count) +
                   " packed floats; the weight conversion in src/cuda/rnn.cpp (Note [GRU weight "
                   "layout]) does not match this cuDNN version");
}

/// Calls visit(cudnn_matrix, cudnn_bias, framework_block) for the 2G gate blocks.
template <class Visit>
void for_each_block(cudnnHandle_t handle, const RnnKind& kind, const RnnDescs& desc,
                    const RnnDims& d, const Tensor& space, const RnnParams& w, Visit&& visit) {
  TensorDesc m = make_tensor_desc(), b = make_tensor_desc();
  for (int id = 0; id < 2 * kind.gates; ++id) {
    void* m_addr = nullptr;
    void* b_addr = nullptr;
    MIRROR_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, desc.rnn, 0, space.nbytes(),
                                               space.raw_data(), id, m, &m_addr, b, &b_addr));
    const Block blk = gate_block(kind, w, id, d);
    check_block(m, static_cast<std::int64_t>(d.h) * blk.cols, id, kind, "matrix");
    check_block(b, d.h, id, kind, "bias");
    visit(static_cast<float*>(m_addr), static_cast<float*>(b_addr), blk);
  }
}

/// Framework weights -> cuDNN weight space.
void pack_weights(DeviceContext& ctx, const RnnKind& kind, const RnnDescs& desc, const RnnDims& d,
                  const Tensor& space, const RnnParams& w) {
  for_each_block(ctx.cudnn(), kind, desc, d, space, w, [&](float* m, float* b, const Block& blk) {
    const std::size_t mat = sizeof(float) * d.h * blk.cols, vec = sizeof(float) * d.h;
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(m, blk.matrix, mat, cudaMemcpyDeviceToDevice, ctx.compute()));
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(b, blk.bias, vec, cudaMemcpyDeviceToDevice, ctx.compute()));
  });
}

/// Framework gradients += cuDNN weight-space gradients.
void unpack_gradients(DeviceContext& ctx, const RnnKind& kind, const RnnDescs& desc,
                      const RnnDims& d, const Tensor& dspace, const RnnParams& dw) {
  for_each_block(ctx.cudnn(), kind, desc, d, dspace, dw, [&](float* m, float* b, const Block& blk) {
    axpy<float>(1.0f, m, blk.matrix, static_cast<std::int64_t>(d.h) * blk.cols, ctx.compute());
    axpy<float>(1.0f, b, blk.bias, d.h, ctx.compute());
  });
}

RnnDims dims_of(const RnnKind& kind, const Tensor& x, const RnnParams& w) {
  MIRROR_CHECK(x.numel() < (1ll << 31), InvalidArgument,
               std::string(kind.name) + ": inputs over 2^31 elements");
  return {static_cast<int>(x.dim(0)), static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2)),
          static_cast<int>(w.w_hh.dim(1))};
}

Tensor bytes_tensor(std::size_t bytes, Device device) {
  return Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::kUInt8, device);
}
void* ptr(const Tensor& t) { return t.defined() && t.nbytes() ? t.raw_data() : nullptr; }

Tensor device_lengths(DeviceContext& ctx, const std::vector<std::int32_t>& lengths, Device dev) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(lengths.size())}, DType::kInt32, dev);
  ctx.upload(t.raw_data(), lengths.data(), lengths.size() * sizeof(std::int32_t));
  return t;
}

/// The F = 0 problem as an F = 1 problem with a zero feature and a zero weight column
/// (Note [RNN empty sizes]).
Tensor one_zero_feature(const Tensor& x) {
  return Tensor::zeros({x.dim(0), x.dim(1), 1}, DType::kFloat32, x.device());
}
RnnParams with_zero_column(const RnnParams& w) {
  RnnParams out = w;
  out.w_ih = Tensor::zeros({w.w_hh.dim(0), 1}, DType::kFloat32, w.w_hh.device());
  return out;
}

RnnOutputs rnn_forward(const RnnKind& kind, const Tensor& x,
                       const std::vector<std::int32_t>& lengths, const RnnParams& w,
                       bool training) {
  OpScope op(x);
  DeviceContext& ctx = op.ctx();
  const RnnDims d = dims_of(kind, x, w);
  RnnOutputs r;
  if (d.n == 0 || d.h == 0) {  // Note [RNN empty sizes]: nothing to compute
    r.y = Tensor::zeros({d.n, d.t, d.h}, DType::kFloat32, x.device());
    r.h_last = Tensor::zeros({d.n, d.h}, DType::kFloat32, x.device());
    r.c_last = Tensor::zeros({d.n, d.h}, DType::kFloat32, x.device());
    if (training) r.reserve = Tensor::empty({0}, DType::kUInt8, x.device());
    return r;
  }
  if (d.f == 0) {
    return rnn_forward(kind, one_zero_feature(x), lengths, with_zero_column(w), training);
  }
  const RnnDescs desc(ctx.cudnn(), kind, d, lengths);
  const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  const RnnSpace s = space_sizes(ctx.cudnn(), desc, mode);
  // Training keeps [weight space | reserve space] in one tensor: backward needs both, and
  // the weights exactly as forward used them.
  Tensor keep = bytes_tensor(training ? s.reserve_offset() + s.reserve : s.weights, x.device());
  const Tensor space = keep.view(0, {static_cast<std::int64_t>(s.weights)});
  pack_weights(ctx, kind, desc, d, space, w);
  const Tensor work = bytes_tensor(s.work, x.device());
  const Tensor reserve = training ? keep.view(static_cast<std::int64_t>(s.reserve_offset()),
                                              {static_cast<std::int64_t>(s.reserve)})
                                  : Tensor();
  const Tensor len = device_lengths(ctx, lengths, x.device());
  const bool lstm = kind.mode == CUDNN_LSTM;
  r.y = Tensor::empty({d.n, d.t, d.h}, DType::kFloat32, x.device());
  r.h_last = Tensor::empty({d.n, d.h}, DType::kFloat32, x.device());
  if (lstm) r.c_last = Tensor::empty({d.n, d.h}, DType::kFloat32, x.device());
  const Tensor xa = aligned_copy(x);  // Note [cuDNN alignment]
  MIRROR_CUDNN_CHECK(cudnnRNNForward(
      ctx.cudnn(), desc.rnn, mode, len.data<std::int32_t>(), desc.x, f32(xa, kind.name), desc.y,
      f32(r.y, kind.name), desc.hidden, nullptr, f32(r.h_last, kind.name), desc.hidden, nullptr,
      lstm ? f32(r.c_last, kind.name) : nullptr, s.weights, space.raw_data(), s.work, ptr(work),
      s.reserve, training ? ptr(reserve) : nullptr));
  zero_past_length(f32(r.y, kind.name), len.data<std::int32_t>(), d.n, d.t, d.h, op.stream());
  if (training) r.reserve = keep;
  return r;
}

void check_backward_args(const RnnKind& kind, const Tensor& x, const RnnParams& w,
                         const RnnParams& dw, const Tensor& y, const RnnDims& d) {
  const std::string name = std::string(kind.name) + "_backward";
  check_shape(y, {d.n, d.t, d.h}, (name + ": forward output y").c_str());
  const Tensor* others[] = {&w.w_hh, &w.b_ih, &w.b_hh, &dw.w_hh, &dw.b_ih, &dw.b_hh};
  for (const Tensor* t : others) {
    MIRROR_CHECK(
        t->defined() && t->device() == x.device(), InvalidArgument,
        name + ": every weight and gradient must be on " + x.device().str() + ", got " + t->str());
  }
  check_shape(dw.w_ih, w.w_ih.shape(), (name + ": dw.w_ih").c_str());
  check_shape(dw.w_hh, w.w_hh.shape(), (name + ": dw.w_hh").c_str());
  check_shape(dw.b_ih, w.b_ih.shape(), (name + ": dw.b_ih").c_str());
  check_shape(dw.b_hh, w.b_hh.shape(), (name + ": dw.b_hh").c_str());
}

Tensor rnn_backward(const RnnKind& kind, const Tensor& x, const std::vector<std::int32_t>& lengths,
                    const RnnParams& w, const Tensor& y, const Tensor& saved, const Tensor& dy,
                    const Tensor& dh_last, const RnnParams& dw) {
  OpScope op(x);
  DeviceContext& ctx = op.ctx();
  const char* name = kind.name;
  const RnnDims d = dims_of(kind, x, w);
  if (d.n == 0 || d.h == 0) {  // Note [RNN empty sizes]: no weight gradient, dx = 0
    return Tensor::zeros({d.n, d.t, d.f}, DType::kFloat32, x.device());
  }
  if (d.f == 0) {
    RnnParams dw1 = dw;
    dw1.w_ih = Tensor::zeros({w.w_hh.dim(0), 1}, DType::kFloat32, x.device());  // discarded
    rnn_backward(kind, one_zero_feature(x), lengths, with_zero_column(w), y, saved, dy, dh_last,
                 dw1);
    return Tensor::zeros({d.n, d.t, 0}, DType::kFloat32, x.device());
  }
  const RnnDescs desc(ctx.cudnn(), kind, d, lengths);
  const RnnSpace s = space_sizes(ctx.cudnn(), desc, CUDNN_FWD_MODE_TRAINING);
  MIRROR_CHECK(saved.defined() && saved.device() == x.device() &&
                   saved.nbytes() == s.reserve_offset() + s.reserve,
               InvalidArgument,
               std::string(name) + "_backward: expected the result of " + name +
                   "_forward(training = true) for these inputs and lengths on " + x.device().str() +
                   ", got reserve " + saved.str());
  check_backward_args(kind, x, w, dw, y, d);
  const Tensor space = saved.view(0, {static_cast<std::int64_t>(s.weights)});
  const Tensor reserve = saved.view(static_cast<std::int64_t>(s.reserve_offset()),
                                    {static_cast<std::int64_t>(s.reserve)});
  const Tensor work = bytes_tensor(s.work, x.device());
  const Tensor len = device_lengths(ctx, lengths, x.device());
  // dy with its padded steps zeroed (Note [GRU padding]); zeros when only dh_last is used.
  if (dy.defined()) check_shape(dy, {d.n, d.t, d.h}, "rnn backward: dy");
  if (dh_last.defined()) check_shape(dh_last, {d.n, d.h}, "rnn backward: dh_last");
  Tensor g =
      dy.defined() ? dy.clone() : Tensor::zeros({d.n, d.t, d.h}, DType::kFloat32, x.device());
  zero_past_length(f32(g, name), len.data<std::int32_t>(), d.n, d.t, d.h, op.stream());
  const Tensor xa = aligned_copy(x);  // Note [cuDNN alignment]
  const Tensor dha = dh_last.defined() ? aligned_copy(dh_last) : Tensor();
  Tensor dx = Tensor::empty({d.n, d.t, d.f}, DType::kFloat32, x.device());
  // dcy = NULL: the final cell state feeds nothing (the LSTM's output is h).
  MIRROR_CUDNN_CHECK(cudnnRNNBackwardData_v8(
      ctx.cudnn(), desc.rnn, len.data<std::int32_t>(), desc.y, f32(y, name), f32(g, name), desc.x,
      f32(dx, name), desc.hidden, nullptr, dha.defined() ? f32(dha, name) : nullptr, nullptr,
      desc.hidden, nullptr, nullptr, nullptr, s.weights, space.raw_data(), s.work, ptr(work),
      s.reserve, ptr(reserve)));
  zero_past_length(f32(dx, name), len.data<std::int32_t>(), d.n, d.t, d.f, op.stream());
  // Weight gradients into a zeroed cuDNN space (ADD mode: it accumulates), then added into the
  // framework's gradients (ops.h's accumulate convention). Must follow BackwardData, which
  // leaves what BackwardWeights needs in the reserve space.
  Tensor dspace = Tensor::zeros({static_cast<std::int64_t>(s.weights)}, DType::kUInt8, x.device());
  MIRROR_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
      ctx.cudnn(), desc.rnn, CUDNN_WGRAD_MODE_ADD, len.data<std::int32_t>(), desc.x, f32(xa, name),
      desc.hidden, nullptr, desc.y, f32(y, name), s.weights, dspace.raw_data(), s.work, ptr(work),
      s.reserve, ptr(reserve)));
  unpack_gradients(ctx, kind, desc, d, dspace, dw);
  return dx;
}

}  // namespace

ops::GruForwardResult CudaKernels::gru_forward(const Tensor& x,
                                               const std::vector<std::int32_t>& lengths,
                                               const ops::GruWeights& w, bool training) {
  RnnOutputs r = rnn_forward(kGru, x, lengths, {w.w_ih, w.w_hh, w.b_ih, w.b_hh}, training);
  return {r.y, r.h_last, r.reserve};
}

Tensor CudaKernels::gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                 const ops::GruWeights& w, const ops::GruForwardResult& fwd,
                                 const Tensor& dy, const Tensor& dh_last, ops::GruWeights& dw,
                                 bool need_dx) {
  // cuDNN's backward-data pass yields the gate gradients the weights' pass needs, so dx is
  // computed either way; it is dropped when nothing reads it (ops.h).
  Tensor dx = rnn_backward(kGru, x, lengths, {w.w_ih, w.w_hh, w.b_ih, w.b_hh}, fwd.y, fwd.reserve,
                           dy, dh_last, {dw.w_ih, dw.w_hh, dw.b_ih, dw.b_hh});
  return need_dx ? dx : Tensor();
}

ops::LstmForwardResult CudaKernels::lstm_forward(const Tensor& x,
                                                 const std::vector<std::int32_t>& lengths,
                                                 const ops::LstmWeights& w, bool training) {
  RnnOutputs r = rnn_forward(kLstm, x, lengths, {w.w_ih, w.w_hh, w.b_ih, w.b_hh}, training);
  return {r.y, r.h_last, r.c_last, r.reserve};
}

Tensor CudaKernels::lstm_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                  const ops::LstmWeights& w, const ops::LstmForwardResult& fwd,
                                  const Tensor& dy, const Tensor& dh_last, ops::LstmWeights& dw,
                                  bool need_dx) {
  Tensor dx = rnn_backward(kLstm, x, lengths, {w.w_ih, w.w_hh, w.b_ih, w.b_hh}, fwd.y,
                           fwd.reserve, dy, dh_last, {dw.w_ih, dw.w_hh, dw.b_ih, dw.b_hh});
  return need_dx ? dx : Tensor();  // as gru_backward
}

}  // namespace mirror::cuda
