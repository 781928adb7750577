// CudaKernels: copies, element-wise ops, reductions, loss, embedding and optimizer updates.
// Host code only: the kernels are launched through cuda/kernels.h.
#include "cuda/cuda_kernels.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "math/convert.h"

namespace mirror::cuda {
namespace {

/// The CUDA calls of a peer copy (copy_between_devices, Note [No device lock across a wait]).
struct CudaPeerCopyOps {
  void* dst;
  const void* src;
  std::size_t bytes;
  using Event = cuda::Event;
  DeviceMutex& mutex(int device) { return context(device).mutex(); }
  Event record(int device) {
    use_device(device);
    Event e = make_event();
    MIRROR_CUDA_CHECK(cudaEventRecord(e, context(device).compute()));
    return e;  // destroying a recorded event is safe: CUDA releases it once it completes
  }
  void wait(int device, const Event& e) {
    use_device(device);
    MIRROR_CUDA_CHECK(cudaStreamWaitEvent(context(device).compute(), e, 0));
  }
  void copy(int dst_dev, int src_dev) {
    MIRROR_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, context(dst_dev).compute()));
  }
};

/// Throws the CPU backend's message for a bad label (one host read of the offending value).
[[noreturn]] void throw_bad_label(DeviceContext& ctx, const Tensor& labels, int code,
                                  std::int64_t classes, const char* op) {
  const std::int64_t row = code - 1;
  std::int32_t value = 0;
  ctx.download(&value, static_cast<const std::int32_t*>(labels.raw_data()) + row, sizeof value);
  throw InvalidArgument(std::string(op) + ": label " + std::to_string(value) + " of sample " +
                        std::to_string(row) + " is outside [0, " + std::to_string(classes) +
                        "); the model has " + std::to_string(classes) +
                        " classes, check the data's labels");
}

[[noreturn]] void throw_bad_id(std::int32_t value, std::int64_t at, std::int64_t steps,
                               std::int64_t vocab, const char* op) {
  throw InvalidArgument(std::string(op) + ": token id " + std::to_string(value) + " at [sample " +
                        std::to_string(at / steps) + ", step " + std::to_string(at % steps) +
                        "] is outside the vocabulary [0, " + std::to_string(vocab) +
                        "); check the tokenizer and the table size");
}

}  // namespace

// ---------------------------------------------------------------- memory
void CudaKernels::copy(void* dst, Device dst_device, const void* src, Device src_device,
                       std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    if (dst_device.index != src_device.index) {
      CudaPeerCopyOps ops{dst, src, bytes};
      return copy_between_devices(ops, dst_device.index, src_device.index);
    }
    DeviceContext& c = context(dst_device.index);
    std::lock_guard<DeviceMutex> lock(c.mutex());
    MIRROR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.compute()));
  } else if (dst_device.is_cuda()) {
    DeviceContext& c = context(dst_device.index);
    std::lock_guard<DeviceMutex> lock(c.mutex());
    c.upload(dst, src, bytes);
  } else if (src_device.is_cuda()) {
    context(src_device.index).download(dst, src, bytes);  // takes the lock while it enqueues
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void CudaKernels::memset_zero(void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  cudaPointerAttributes attr{};
  MIRROR_CUDA_CHECK(cudaPointerGetAttributes(&attr, dst));
  if (attr.type != cudaMemoryTypeDevice) {
    std::memset(dst, 0, bytes);
    return;
  }
  DeviceContext& c = context(attr.device);
  std::lock_guard<DeviceMutex> lock(c.mutex());
  MIRROR_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, c.compute()));
}

void CudaKernels::synchronize(Device device) {
  if (device.is_cuda()) context(device.index).synchronize();
}

// ---------------------------------------------------------------- element-wise
Tensor CudaKernels::activation_forward(ops::Activation act, const Tensor& x) {
  OpScope op(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  cuda::activation_forward(act, f32(x, "activation_forward"), f32(y, "activation_forward"),
                           x.numel(), op.stream());
  return y;
}

Tensor CudaKernels::activation_backward(ops::Activation act, const Tensor& y, const Tensor& dy) {
  OpScope op(y);
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
  cuda::activation_backward(act, f32(y, "activation_backward"), f32(dy, "activation_backward"),
                            f32(dx, "activation_backward"), y.numel(), op.stream());
  return dx;
}

Tensor CudaKernels::dropout_forward(const Tensor& x, float rate, std::uint64_t seed,
                                    const Tensor& sample_ids, Tensor& mask) {
  OpScope op(x);
  f32(x, "dropout_forward");
  // As on the CPU: reuse the caller's mask when it fits (steady state), replace it otherwise.
  if (!mask.defined() || mask.shape() != x.shape() || mask.dtype() != x.dtype() ||
      mask.device() != x.device()) {
    mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const std::int64_t n = x.dim(0), per = n ? x.numel() / n : 0;
  cuda::dropout_forward(f32(x, "dropout_forward"), f32(y, "dropout_forward"),
                        f32(mask, "dropout_forward"), sample_ids.data<std::int64_t>(), x.numel(),
                        per, rate, seed, op.stream());
  return y;
}

Tensor CudaKernels::dropout_backward(const Tensor& dy, const Tensor& mask) {
  OpScope op(dy);
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  cuda::multiply(f32(dy, "dropout_backward"), f32(mask, "dropout_backward"),
                 f32(dx, "dropout_backward"), dy.numel(), op.stream());
  return dx;
}

void CudaKernels::axpy(double alpha, const Tensor& b, Tensor& a) {
  OpScope op(a);
  if (a.dtype() == DType::kFloat64) {
    return cuda::axpy<double>(alpha, b.data<double>(), a.data<double>(), a.numel(), op.stream());
  }
  cuda::axpy<float>(static_cast<float>(alpha), f32(b, "axpy"), f32(a, "axpy"), a.numel(),
                    op.stream());
}

void CudaKernels::scale(Tensor& a, double alpha) {
  OpScope op(a);
  if (a.dtype() == DType::kFloat64) {
    return cuda::scale<double>(a.data<double>(), alpha, a.numel(), op.stream());
  }
  cuda::scale<float>(f32(a, "scale"), static_cast<float>(alpha), a.numel(), op.stream());
}

void CudaKernels::fill(Tensor& a, double value) {
  OpScope op(a);
  const std::int64_t n = a.numel();
  void* p = a.raw_data();
  switch (a.dtype()) {
    case DType::kFloat32:
      return cuda::fill(static_cast<float*>(p), static_cast<float>(value), n, op.stream());
    case DType::kFloat64:
      return cuda::fill(static_cast<double*>(p), value, n, op.stream());
    case DType::kInt32:
      return cuda::fill(static_cast<std::int32_t*>(p), static_cast<std::int32_t>(value), n,
                        op.stream());
    case DType::kInt64:
      return cuda::fill(static_cast<std::int64_t*>(p), static_cast<std::int64_t>(value), n,
                        op.stream());
    case DType::kUInt8:
      return cuda::fill(static_cast<std::uint8_t*>(p), static_cast<std::uint8_t>(value), n,
                        op.stream());
    case DType::kFloat16:
      return cuda::fill(static_cast<std::uint16_t*>(p),
                        math::float_to_half_bits(static_cast<float>(value)), n, op.stream());
    case DType::kBFloat16:
      return cuda::fill(static_cast<std::uint16_t*>(p),
                        math::float_to_bfloat16_bits(static_cast<float>(value)), n, op.stream());
  }
}

double CudaKernels::sum_squares(const Tensor& a) {
  OpScope op(a);
  const std::int64_t blocks = (a.numel() + kSumSquaresBlock - 1) / kSumSquaresBlock;
  if (blocks == 0) return 0.0;
  Tensor partials = Tensor::empty({blocks}, DType::kFloat64, a.device());
  if (a.dtype() == DType::kFloat64) {
    sum_squares_partials(a.data<double>(), a.numel(), partials.data<double>(), op.stream());
  } else {
    sum_squares_partials(f32(a, "sum_squares"), a.numel(), partials.data<double>(), op.stream());
  }
  std::vector<double> host(static_cast<std::size_t>(blocks));
  op.ctx().download(host.data(), partials.raw_data(), host.size() * sizeof(double));
  double total = 0;  // block order, as the CPU backend adds its blocks
  for (double p : host) total += p;
  return total;
}

Tensor CudaKernels::cast(const Tensor& a, DType to) {
  if (a.dtype() == to) return a.clone();
  OpScope op(a);
  Tensor out = Tensor::empty(a.shape(), to, a.device());
  cuda::cast(a.dtype(), to, a.raw_data(), out.raw_data(), a.numel(), op.stream());
  return out;
}

bool CudaKernels::all_finite(const Tensor& a) {
  OpScope op(a);
  Tensor flag = Tensor::zeros({1}, DType::kInt32, a.device());
  nonfinite_flag(a.dtype(), a.raw_data(), a.numel(), flag.data<std::int32_t>(), op.stream());
  std::int32_t bad = 0;
  op.ctx().download(&bad, flag.raw_data(), sizeof bad);
  return bad == 0;
}

// ---------------------------------------------------------------- embedding
Tensor CudaKernels::embedding_forward(const Tensor& ids, const Tensor& table) {
  OpScope op(ids);
  const std::int64_t vocab = table.dim(0), dim = table.dim(1);
  Tensor y = Tensor::empty({ids.dim(0), ids.dim(1), dim}, table.dtype(), table.device());
  cuda::embedding_forward(ids.data<std::int32_t>(), f32(table, "embedding_forward"),
                          f32(y, "embedding_forward"), ids.numel(), vocab, dim,
                          op.ctx().error_word(), op.stream());
  // Note [Validated indices]: the error word is read back (a wait for the stream) so a bad id
  // throws here, like on the CPU, instead of silently producing zeros.
  if (const int code = op.ctx().read_and_clear_error()) {
    std::int32_t value = 0;
    op.ctx().download(&value, ids.data<std::int32_t>() + (code - 1), sizeof value);
    throw_bad_id(value, code - 1, ids.dim(1), vocab, "embedding_forward");
  }
  return y;
}

void CudaKernels::embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) {
  OpScope op(dtable);
  require_dtype(ids, DType::kInt32, "embedding_backward", "ids");
  f32(dy, "embedding_backward");
  const std::int64_t vocab = dtable.dim(0), dim = dtable.dim(1), count = ids.numel();
  std::vector<std::int32_t> host(static_cast<std::size_t>(count));
  op.ctx().download(host.data(), ids.raw_data(), host.size() * sizeof(std::int32_t));
  for (std::int64_t i = 0; i < count; ++i) {
    if (host[i] < 0 || host[i] >= vocab)
      throw_bad_id(host[i], i, ids.dim(1), vocab, "embedding_backward");
  }
  // Segments of equal ids, positions ascending inside each (stable sort): the kernel then adds
  // each row's gradients in position order, the CPU loop's order, with no atomics.
  std::vector<std::int32_t> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return host[a] < host[b]; });
  std::vector<std::int32_t> rows, offsets, positions;
  for (std::int32_t p : order) {
    if (host[p] == 0) continue;  // padding id: its row never learns
    if (rows.empty() || rows.back() != host[p]) {
      rows.push_back(host[p]);
      offsets.push_back(static_cast<std::int32_t>(positions.size()));
    }
    positions.push_back(p);
  }
  if (rows.empty()) return;
  offsets.push_back(static_cast<std::int32_t>(positions.size()));
  // One upload: [rows | offsets | positions].
  std::vector<std::int32_t> packed(rows);
  packed.insert(packed.end(), offsets.begin(), offsets.end());
  packed.insert(packed.end(), positions.begin(), positions.end());
  Tensor plan =
      Tensor::empty({static_cast<std::int64_t>(packed.size())}, DType::kInt32, dtable.device());
  op.ctx().upload(plan.raw_data(), packed.data(), packed.size() * sizeof(std::int32_t));
  const std::int32_t* base = plan.data<std::int32_t>();
  const auto segments = static_cast<std::int64_t>(rows.size());
  cuda::embedding_backward(base, base + segments, base + 2 * segments + 1, segments,
                           f32(dy, "embedding_backward"), f32(dtable, "embedding_backward"), dim,
                           op.stream());
}

// ---------------------------------------------------------------- loss and metrics
ops::LossResult CudaKernels::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                                   const Tensor& weights, double global_count) {
  OpScope op(logits);
  const char* name = "softmax_cross_entropy";
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  ops::LossResult r;
  r.dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor rows = Tensor::empty({n}, DType::kFloat64, logits.device());
  softmax_xent(f32(logits, name), labels.data<std::int32_t>(), f32(weights, name), n, c,
               1.0 / global_count, f32(r.dlogits, name), rows.data<double>(), op.ctx().error_word(),
               op.stream());
  std::vector<double> host(static_cast<std::size_t>(n));
  op.ctx().download(host.data(), rows.raw_data(), host.size() * sizeof(double));
  if (const int code = op.ctx().read_and_clear_error())
    throw_bad_label(op.ctx(), labels, code, c, name);
  double total = 0;  // rows in order, as on the CPU: the loss is reproducible bit for bit
  for (double v : host) total += v;
  r.loss = total / global_count;
  return r;
}

std::int64_t CudaKernels::correct_count(const Tensor& logits, const Tensor& labels,
                                        const Tensor& weights) {
  OpScope op(logits);
  const char* name = "correct_count";
  require_dtype(labels, DType::kInt32, name, "labels");
  MIRROR_CHECK(weights.rank() == 1 && weights.dim(0) == logits.dim(0), InvalidArgument,
               "correct_count: weights " + weights.str() + " for logits " + logits.str());
  const std::int64_t n = logits.dim(0), c = logits.dim(1);
  Tensor count = Tensor::zeros({1}, DType::kInt64, logits.device());
  cuda::correct_count(f32(logits, name), labels.data<std::int32_t>(), f32(weights, name), n, c,
                      reinterpret_cast<unsigned long long*>(count.data<std::int64_t>()),
                      op.ctx().error_word(), op.stream());
  std::int64_t host = 0;
  op.ctx().download(&host, count.raw_data(), sizeof host);
  if (const int code = op.ctx().read_and_clear_error())
    throw_bad_label(op.ctx(), labels, code, c, name);
  return host;
}

ops::TargetLossResult CudaKernels::target_loss(ops::TargetLoss kind, const Tensor& logits,
                                               const Tensor& targets, const Tensor& weights,
                                               double global_count) {
  OpScope op(logits);
  const bool bce = kind == ops::TargetLoss::kBinaryCrossEntropy;
  const char* name = bce ? "binary_cross_entropy" : "mean_squared_error";
  const std::int64_t n = logits.dim(0), k = logits.dim(1);
  ops::TargetLossResult r;
  r.dlogits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  constexpr std::int64_t kColumns = 5;  // see cuda::target_loss
  Tensor rows = Tensor::empty({n, kColumns}, DType::kFloat64, logits.device());
  cuda::target_loss(bce, f32(logits, name), f32(targets, name), f32(weights, name), n, k,
                    1.0 / global_count, f32(r.dlogits, name), rows.data<double>(), op.stream());
  std::vector<double> host(static_cast<std::size_t>(n * kColumns));
  op.ctx().download(host.data(), rows.raw_data(), host.size() * sizeof(double));
  double total = 0;  // rows in order, as on the CPU
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = host.data() + i * kColumns;
    total += row[0];
    r.squared_error_sum += row[1];
    r.abs_error_sum += row[2];
    r.correct += static_cast<std::int64_t>(row[3]);
    if (row[4] > 0) r.target_values += k;
  }
  r.loss = total / global_count;
  return r;
}

// ---------------------------------------------------------------- optimizer updates
void CudaKernels::sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, double lr,
                             double momentum, bool nesterov, double weight_decay) {
  OpScope op(param);
  const char* name = "sgd_update";
  float* buf = nullptr;
  if (momentum != 0) {
    buf = f32(momentum_buf, name);
    MIRROR_CHECK(momentum_buf.numel() == param.numel(), InvalidArgument,
                 "sgd_update: momentum buffer " + momentum_buf.str() + " for param " + param.str());
  }
  cuda::sgd_update(f32(param, name), f32(grad, name), buf, param.numel(), static_cast<float>(lr),
                   static_cast<float>(momentum), nesterov, static_cast<float>(weight_decay),
                   op.stream());
}

void CudaKernels::adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr,
                              double beta1, double beta2, double eps, double weight_decay,
                              bool decoupled, std::int64_t step) {
  OpScope op(param);
  const char* name = "adam_update";
  const math::AdamScalars s =
      math::adam_scalars(lr, beta1, beta2, eps, weight_decay, decoupled, step);
  cuda::adam_update(f32(param, name), f32(grad, name), f32(m, name), f32(v, name), param.numel(), s,
                    op.stream());
}

}  // namespace mirror::cuda

namespace mirror {

KernelSet& cuda_kernels() {
  static cuda::CudaKernels kernels;
  return kernels;
}

namespace {
void cuda_device_sleep(int device_index, std::int64_t microseconds, bool on_comm_stream) {
  cuda::DeviceContext& c = cuda::context(device_index);
  std::lock_guard<cuda::DeviceMutex> lock(c.mutex());
  cuda::sleep(microseconds, on_comm_stream ? c.comm() : c.compute());
}
}  // namespace

void* cuda_backend_proc(const std::string& name) {
  if (name == "device_sleep") return reinterpret_cast<void*>(&cuda_device_sleep);
  return nullptr;
}

}  // namespace mirror
