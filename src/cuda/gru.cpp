// GRU forward/backward through cuDNN 9's RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8) with per-sample sequence lengths.
//
// Configuration: CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS (b_ih and b_hh, so the reset gate multiplies
// U_n h + b_hn: docs/architecture.md invariant 5), CUDNN_LINEAR_INPUT, CUDNN_UNIDIRECTIONAL, one
// layer, float32 data and math, CUDNN_FMA_MATH (no TF32), no dropout, CUDNN_RNN_PADDED_IO_ENABLED
// with CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED: x is ops.h's [N, T, F] as it is, y is [N, T, H].
// hx = NULL (zero initial state); hy is the state after each sequence's last valid step.
//
// Note [GRU padding]: ops.h promises y = 0 at steps >= length. cuDNN fills padded output
// positions with the data descriptor's paddingFill (0 here); we also zero them, and the padded
// steps of dx and of the incoming dy, with zero_past_length, so the result does not depend on
// how a cuDNN version treats padding.
//
// Note [GRU weight layout]: the framework keeps PyTorch's layout (w_ih [3H, F], w_hh [3H, H],
// b_ih [3H], b_hh [3H], gate blocks in order r, z, n), so checkpoints are device-independent.
// cuDNN keeps an opaque weight space; cudnnGetRNNWeightParams returns, per linLayerID, the
// address and shape of one gate's matrix and bias. For CUDNN_GRU, IDs 0, 1, 2 are the input
// (W) matrices of the reset, update and new gates and 3, 4, 5 the recurrent (U) ones, with
// the matching bias vectors (b_i* for 0..2, b_h* for 3..5); each matrix is row-major
// [H, inputs]. gate_block() below is the ONE place that maps an ID to the framework's rows;
// pack (framework -> cuDNN) and unpack (cuDNN gradient -> framework gradient) both use it,
// and check_block() verifies cuDNN's reported shape before any copy.
#include <initializer_list>
#include <string>

#include "cuda/cuda_kernels.h"
#include "cuda/kernels.h"

namespace mirror::cuda {
namespace {

struct GruDims {
  int n, t, f, h;
};

struct GruDescs {
  RnnDesc rnn;
  DropoutDesc dropout;
  RnnDataDesc x, y;
  TensorDesc hidden = make_tensor_desc();

  GruDescs(cudnnHandle_t handle, const GruDims& d, const std::vector<std::int32_t>& lengths) {
    cudnnDropoutDescriptor_t drop = nullptr;
    MIRROR_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&drop));
    dropout = DropoutDesc(drop);
    MIRROR_CUDNN_CHECK(cudnnSetDropoutDescriptor(dropout, handle, 0.0f, nullptr, 0, 0));
    cudnnRNNDescriptor_t r = nullptr;
    MIRROR_CUDNN_CHECK(cudnnCreateRNNDescriptor(&r));
    rnn = RnnDesc(r);
    MIRROR_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
        rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
        CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, d.f, d.h, d.h, 1,
        dropout, CUDNN_RNN_PADDED_IO_ENABLED));
    x = data_desc(d, d.f, lengths);
    y = data_desc(d, d.h, lengths);
    const int dims[3] = {1, d.n, d.h}, strides[3] = {d.n * d.h, d.h, 1};
    MIRROR_CUDNN_CHECK(cudnnSetTensorNdDescriptor(hidden, CUDNN_DATA_FLOAT, 3, dims, strides));
  }

  static RnnDataDesc data_desc(const GruDims& d, int width,
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
struct GruSpace {
  std::size_t weights = 0, work = 0, reserve = 0;
  std::size_t reserve_offset() const { return (weights + 255) / 256 * 256; }
};

GruSpace space_sizes(cudnnHandle_t handle, const GruDescs& d, cudnnForwardMode_t mode) {
  GruSpace s;
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
Block gate_block(const ops::GruWeights& w, int id, const GruDims& d) {
  const int gate = id % 3;  // 0 reset (r), 1 update (z), 2 new (n): PyTorch's order too
  const bool recurrent = id >= 3;
  const Tensor& m = recurrent ? w.w_hh : w.w_ih;
  const Tensor& b = recurrent ? w.b_hh : w.b_ih;
  const int cols = recurrent ? d.h : d.f;
  return {f32(m, "gru") + static_cast<std::int64_t>(gate) * d.h * cols,
          f32(b, "gru") + static_cast<std::int64_t>(gate) * d.h, cols};
}

/// Verifies that cuDNN describes `desc` as `count` packed floats (innermost stride 1).
void check_block(cudnnTensorDescriptor_t desc, std::int64_t count, int id, const char* what) {
  cudnnDataType_t type{};
  int nb = 0, dims[8] = {}, strides[8] = {};
  MIRROR_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &type, &nb, dims, strides));
  std::int64_t product = 1;
  for (int i = 0; i < nb; ++i) product *= dims[i];
  std::string shape;
  for (int i = 0; i < nb; ++i) shape += (i ? "," : "") + std::to_string(dims[i]);
  MIRROR_CHECK(type == CUDNN_DATA_FLOAT && product == count && nb > 0 && strides[nb - 1] == 1,
               Error,
               std::string("cuDNN describes GRU ") + what + " " + std::to_string(id) + " as [" +
                   shape + "], expected " + std::to_string(count) +
                   " packed floats; the weight conversion in src/cuda/gru.cpp (Note [GRU weight "
                   "layout]) does not match this cuDNN version");
}

/// Calls visit(cudnn_matrix, cudnn_bias, framework_block) for the six gate blocks.
template <class Visit>
void for_each_block(cudnnHandle_t handle, const GruDescs& desc, const GruDims& d,
                    const Tensor& space, const ops::GruWeights& w, Visit&& visit) {
  TensorDesc m = make_tensor_desc(), b = make_tensor_desc();
  for (int id = 0; id < 6; ++id) {
    void* m_addr = nullptr;
    void* b_addr = nullptr;
    MIRROR_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, desc.rnn, 0, space.nbytes(),
                                               space.raw_data(), id, m, &m_addr, b, &b_addr));
    const Block blk = gate_block(w, id, d);
    check_block(m, static_cast<std::int64_t>(d.h) * blk.cols, id, "matrix");
    check_block(b, d.h, id, "bias");
    visit(static_cast<float*>(m_addr), static_cast<float*>(b_addr), blk);
  }
}

/// Framework weights -> cuDNN weight space.
void pack_weights(DeviceContext& ctx, const GruDescs& desc, const GruDims& d, const Tensor& space,
                  const ops::GruWeights& w) {
  for_each_block(ctx.cudnn(), desc, d, space, w, [&](float* m, float* b, const Block& blk) {
    const std::size_t mat = sizeof(float) * d.h * blk.cols, vec = sizeof(float) * d.h;
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(m, blk.matrix, mat, cudaMemcpyDeviceToDevice, ctx.compute()));
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(b, blk.bias, vec, cudaMemcpyDeviceToDevice, ctx.compute()));
  });
}

/// Framework gradients += cuDNN weight-space gradients.
void unpack_gradients(DeviceContext& ctx, const GruDescs& desc, const GruDims& d,
                      const Tensor& dspace, ops::GruWeights& dw) {
  for_each_block(ctx.cudnn(), desc, d, dspace, dw, [&](float* m, float* b, const Block& blk) {
    axpy<float>(1.0f, m, blk.matrix, static_cast<std::int64_t>(d.h) * blk.cols, ctx.compute());
    axpy<float>(1.0f, b, blk.bias, d.h, ctx.compute());
  });
}

GruDims dims_of(const Tensor& x, const ops::GruWeights& w) {
  MIRROR_CHECK(x.numel() < (1ll << 31), InvalidArgument, "gru: inputs over 2^31 elements");
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

}  // namespace

ops::GruForwardResult CudaKernels::gru_forward(const Tensor& x,
                                               const std::vector<std::int32_t>& lengths,
                                               const ops::GruWeights& w, bool training) {
  OpScope op(x);
  DeviceContext& ctx = op.ctx();
  const GruDims d = dims_of(x, w);
  if (d.n == 0) {  // cuDNN rejects an empty batch; the result is empty (as on the CPU)
    ops::GruForwardResult r;
    r.y = Tensor::empty({0, d.t, d.h}, DType::kFloat32, x.device());
    r.h_last = Tensor::empty({0, d.h}, DType::kFloat32, x.device());
    if (training) r.reserve = Tensor::empty({0}, DType::kUInt8, x.device());
    return r;
  }
  const GruDescs desc(ctx.cudnn(), d, lengths);
  const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  const GruSpace s = space_sizes(ctx.cudnn(), desc, mode);
  // Training keeps [weight space | reserve space] in one tensor: backward needs both, and
  // the weights exactly as forward used them.
  ops::GruForwardResult r;
  Tensor keep = bytes_tensor(training ? s.reserve_offset() + s.reserve : s.weights, x.device());
  const Tensor space = keep.view(0, {static_cast<std::int64_t>(s.weights)});
  pack_weights(ctx, desc, d, space, w);
  const Tensor work = bytes_tensor(s.work, x.device());
  const Tensor reserve = training ? keep.view(static_cast<std::int64_t>(s.reserve_offset()),
                                              {static_cast<std::int64_t>(s.reserve)})
                                  : Tensor();
  const Tensor len = device_lengths(ctx, lengths, x.device());
  r.y = Tensor::empty({d.n, d.t, d.h}, DType::kFloat32, x.device());
  r.h_last = Tensor::empty({d.n, d.h}, DType::kFloat32, x.device());
  const Tensor xa = aligned_copy(x);  // Note [cuDNN alignment]
  MIRROR_CUDNN_CHECK(cudnnRNNForward(
      ctx.cudnn(), desc.rnn, mode, len.data<std::int32_t>(), desc.x, f32(xa, "gru_forward"), desc.y,
      f32(r.y, "gru_forward"), desc.hidden, nullptr, f32(r.h_last, "gru_forward"), desc.hidden,
      nullptr, nullptr, s.weights, space.raw_data(), s.work, ptr(work), s.reserve,
      training ? ptr(reserve) : nullptr));
  zero_past_length(f32(r.y, "gru_forward"), len.data<std::int32_t>(), d.n, d.t, d.h, op.stream());
  if (training) r.reserve = keep;
  return r;
}

Tensor CudaKernels::gru_backward(const Tensor& x, const std::vector<std::int32_t>& lengths,
                                 const ops::GruWeights& w, const ops::GruForwardResult& fwd,
                                 const Tensor& dy, const Tensor& dh_last, ops::GruWeights& dw) {
  OpScope op(x);
  DeviceContext& ctx = op.ctx();
  const char* name = "gru_backward";
  const GruDims d = dims_of(x, w);
  if (d.n == 0) return Tensor::empty({0, d.t, d.f}, DType::kFloat32, x.device());  // no gradient
  const GruDescs desc(ctx.cudnn(), d, lengths);
  const GruSpace s = space_sizes(ctx.cudnn(), desc, CUDNN_FWD_MODE_TRAINING);
  MIRROR_CHECK(fwd.reserve.defined() && fwd.reserve.device() == x.device() &&
                   fwd.reserve.nbytes() == s.reserve_offset() + s.reserve,
               InvalidArgument,
               "gru_backward: expected the result of gru_forward(training = true) for these "
               "inputs and lengths on " +
                   x.device().str() + ", got reserve " + fwd.reserve.str());
  check_shape(fwd.y, {d.n, d.t, d.h}, "gru_backward: forward output y");
  const Tensor* others[] = {&w.w_hh, &w.b_ih, &w.b_hh, &dw.w_hh, &dw.b_ih, &dw.b_hh};
  for (const Tensor* t : others) {
    MIRROR_CHECK(t->defined() && t->device() == x.device(), InvalidArgument,
                 "gru_backward: every weight and gradient must be on " + x.device().str() +
                     ", got " + t->str());
  }
  check_shape(dw.w_ih, w.w_ih.shape(), "gru_backward: dw.w_ih");
  check_shape(dw.w_hh, w.w_hh.shape(), "gru_backward: dw.w_hh");
  check_shape(dw.b_ih, w.b_ih.shape(), "gru_backward: dw.b_ih");
  check_shape(dw.b_hh, w.b_hh.shape(), "gru_backward: dw.b_hh");
  const Tensor space = fwd.reserve.view(0, {static_cast<std::int64_t>(s.weights)});
  const Tensor reserve = fwd.reserve.view(static_cast<std::int64_t>(s.reserve_offset()),
                                          {static_cast<std::int64_t>(s.reserve)});
  const Tensor work = bytes_tensor(s.work, x.device());
  const Tensor len = device_lengths(ctx, lengths, x.device());
  // dy with its padded steps zeroed (Note [GRU padding]); zeros when only dh_last is used.
  if (dy.defined()) check_shape(dy, {d.n, d.t, d.h}, "gru_backward: dy");
  if (dh_last.defined()) check_shape(dh_last, {d.n, d.h}, "gru_backward: dh_last");
  Tensor g =
      dy.defined() ? dy.clone() : Tensor::zeros({d.n, d.t, d.h}, DType::kFloat32, x.device());
  zero_past_length(f32(g, name), len.data<std::int32_t>(), d.n, d.t, d.h, op.stream());
  const Tensor xa = aligned_copy(x);  // Note [cuDNN alignment]
  const Tensor dha = dh_last.defined() ? aligned_copy(dh_last) : Tensor();
  Tensor dx = Tensor::empty({d.n, d.t, d.f}, DType::kFloat32, x.device());
  MIRROR_CUDNN_CHECK(cudnnRNNBackwardData_v8(
      ctx.cudnn(), desc.rnn, len.data<std::int32_t>(), desc.y, f32(fwd.y, name), f32(g, name),
      desc.x, f32(dx, name), desc.hidden, nullptr, dha.defined() ? f32(dha, name) : nullptr,
      nullptr, desc.hidden, nullptr, nullptr, nullptr, s.weights, space.raw_data(), s.work,
      ptr(work), s.reserve, ptr(reserve)));
  zero_past_length(f32(dx, name), len.data<std::int32_t>(), d.n, d.t, d.f, op.stream());
  // Weight gradients into a zeroed cuDNN space (ADD mode: it accumulates), then added into the
  // framework's gradients (ops.h's accumulate convention). Must follow BackwardData, which
  // leaves what BackwardWeights needs in the reserve space.
  Tensor dspace = Tensor::zeros({static_cast<std::int64_t>(s.weights)}, DType::kUInt8, x.device());
  MIRROR_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
      ctx.cudnn(), desc.rnn, CUDNN_WGRAD_MODE_ADD, len.data<std::int32_t>(), desc.x, f32(xa, name),
      desc.hidden, nullptr, desc.y, f32(fwd.y, name), s.weights, dspace.raw_data(), s.work,
      ptr(work), s.reserve, ptr(reserve)));
  unpack_gradients(ctx, desc, d, dspace, dw);
  return dx;
}

}  // namespace mirror::cuda
