// Convolution through cuDNN: a graph-API execution plan per shape and direction (Note
// [Convolution plans], conv_plan.h), else the legacy convolution API (grouped convolutions, no
// qualifying engine, MIRROR_CUDNN_LEGACY=1); max pooling through our kernels (layout.cu).
//
// Layouts: x NCHW, w OIHW = cuDNN's filter NCHW/KCRS, y NCHW, all fully packed float32; the
// mode is CUDNN_CROSS_CORRELATION (no kernel flip), as oneDNN and every framework use.
//
// Note [Asymmetric padding]: cuDNN pads symmetrically (one pad_h, one pad_w). TensorFlow's
// "same" padding puts the odd extra row/column at the bottom/right. When top != bottom or
// left != right we pad the input explicitly with pad2d (zeros) and run cuDNN with zero
// padding; backward-data then crops the padded gradient back to x's shape, and
// backward-filter correlates the padded input. Output sizes agree with Conv2DGeometry by
// construction: (H + top + bottom - KH) / stride + 1 either way.
//
// Note [Algorithm choice] (algo_choice.h): chosen once per problem shape and math mode (cache
// in the DeviceContext) from cuDNN's heuristics, among the candidates whose math type the mode
// allows (tensor cores under mixed precision), preferring those whose workspace the device
// allocator can give; the chosen candidate's math type is set on the descriptor before it runs; the workspace is a uint8 Tensor from that allocator, so the steady state
// allocates nothing new. Should the cached choice's workspace later fail to allocate (memory
// filled up since), the shape falls back for good, with a warning, instead of failing.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/algo_choice.h"
#include "cuda/conv_plan.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels.h"
#include "cuda/math_type.h"
#include "mirror/memory.h"
#include "mirror/precision.h"

namespace mirror::cuda {
namespace {

struct ConvProblem {
  int n, c, h, w;      // the input cuDNN sees (explicitly padded when asymmetric)
  int o, kh, kw;       // filter
  int sh, sw, ph, pw;  // stride and cuDNN's symmetric padding
  int oh, ow;          // output
  bool explicit_pad;   // Note [Asymmetric padding]
  int top, left;       // explicit padding offsets
  int in_h, in_w;      // the caller's input size
  int groups;          // Conv2DGeometry::groups (cuDNN's group count)
};

ConvProblem plan(const Shape& x, const Shape& w, const ops::Conv2DGeometry& g) {
  ConvProblem p{};
  p.n = static_cast<int>(x[0]);
  p.c = static_cast<int>(x[1]);
  p.in_h = static_cast<int>(x[2]);
  p.in_w = static_cast<int>(x[3]);
  p.o = static_cast<int>(w[0]);
  p.kh = static_cast<int>(w[2]);
  p.kw = static_cast<int>(w[3]);
  p.sh = g.stride_h;
  p.sw = g.stride_w;
  p.groups = g.groups;
  p.oh = g.out_h(p.in_h, p.kh);
  p.ow = g.out_w(p.in_w, p.kw);
  p.explicit_pad = g.pad_top != g.pad_bottom || g.pad_left != g.pad_right;
  if (p.explicit_pad) {
    p.h = p.in_h + g.pad_top + g.pad_bottom;
    p.w = p.in_w + g.pad_left + g.pad_right;
    p.top = g.pad_top;
    p.left = g.pad_left;
  } else {
    p.h = p.in_h;
    p.w = p.in_w;
    p.ph = g.pad_top;
    p.pw = g.pad_left;
  }
  MIRROR_CHECK(static_cast<long long>(p.n) * p.c * p.h * p.w < (1ll << 31) &&
                   static_cast<long long>(p.n) * p.o * p.oh * p.ow < (1ll << 31),
               InvalidArgument, "conv2d: tensors over 2^31 elements are not supported on CUDA");
  return p;
}

/// The four cuDNN descriptors of one problem.
struct ConvDescs {
  TensorDesc x = make_tensor_desc(), y = make_tensor_desc();
  FilterDesc w = make_filter_desc();
  ConvDesc conv = make_conv_desc();
  explicit ConvDescs(const ConvProblem& p) {
    MIRROR_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p.n, p.c, p.h, p.w));
    MIRROR_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p.n, p.o, p.oh, p.ow));
    MIRROR_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p.o, p.c / p.groups,
                                   p.kh, p.kw));
    MIRROR_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, p.ph, p.pw, p.sh, p.sw, 1, 1,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MIRROR_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, p.groups));
    MIRROR_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, cudnn_math_type()));
  }
};

// The three directions of a convolution, as the conv_algos() cache keys them and the plans
// (conv_plan.h) take them.
using Dir = ConvPlanDirection;
constexpr Dir kForward = kPlanForward, kBackwardData = kPlanBackwardData,
              kBackwardFilter = kPlanBackwardFilter;

ConvKey key(Dir dir, const ConvProblem& p) {
  // The math type changes which algorithms exist and how fast they are: one choice per mode;
  // and per group count (a depthwise problem has the shapes of a dense one).
  // TF32 float32 (Note [TF32]) keys as a fourth mode.
  const int mode = float32_on_tf32() ? 3 : static_cast<int>(math_mode());
  return {dir + 3 * mode + 16 * p.groups,
          p.n,
          p.c,
          p.h,
          p.w,
          p.o,
          p.kh,
          p.kw,
          p.sh,
          p.sw,
          p.ph,
          p.pw};
}

/// The always-available deterministic algorithm of each direction.
int fallback_algo(Dir dir) {
  switch (dir) {
    case kForward:
      return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    case kBackwardData:
      return CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case kBackwardFilter:
      return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  }
  return 0;
}

std::string algo_name(Dir dir, int algo) {
  static const char* const fwd[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char* const data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                     "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const filter[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const char* const* names = dir == kForward ? fwd : dir == kBackwardData ? data : filter;
  const int count = dir == kForward ? 8 : dir == kBackwardData ? 6 : 7;
  const char* prefix = dir == kForward        ? "forward "
                       : dir == kBackwardData ? "backward-data "
                                              : "backward-filter ";
  return prefix + (algo >= 0 && algo < count ? std::string(names[algo]) : std::to_string(algo));
}

/// What a cuDNN math type computes in, for float32 data (Note [Algorithm choice]).
AlgoMath algo_math(cudnnMathType_t type) {
  switch (type) {
    case CUDNN_FMA_MATH:
      return AlgoMath::kFma;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return AlgoMath::kFp16;
    case CUDNN_DEFAULT_MATH:  // may use tensor cores on float32 data: TF32
    case CUDNN_TENSOR_OP_MATH:
      break;
  }
  return AlgoMath::kTf32;
}

/// The math the mode in force allows convolutions (Note [Algorithm choice]).
MathAllowance allowed_math() {
  switch (math_mode()) {
    case MathMode::kFloat16:
      return {true, true};
    case MathMode::kBFloat16:
      return {true, false};
    case MathMode::kFloat32:
      break;
  }
  return {tf32(), false};  // Note [TF32]
}

/// Sets the math type the next query or run of `d` uses.
void set_math(const ConvDescs& d, int math_type) {
  MIRROR_CUDNN_CHECK(
      cudnnSetConvolutionMathType(d.conv, static_cast<cudnnMathType_t>(math_type)));
}

/// cudnnGet*WorkspaceSize for `algo` in `math_type` (left set on the descriptor); false when
/// cuDNN does not support it for this problem.
bool workspace_size(DeviceContext& ctx, const ConvDescs& d, Dir dir, int algo, int math_type,
                    std::size_t* bytes) {
  set_math(d, math_type);
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (dir) {
    case kForward:
      st = cudnnGetConvolutionForwardWorkspaceSize(
          ctx.cudnn(), d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      break;
    case kBackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(
          ctx.cudnn(), d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
          bytes);
      break;
    case kBackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          ctx.cudnn(), d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
          bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS;
}

constexpr int kMaxCandidates = 16;

template <class Perf>
std::vector<AlgoCandidate> to_candidates(DeviceContext& ctx, const ConvDescs& d, Dir dir,
                                         const Perf* perf, int count) {
  std::vector<AlgoCandidate> out;
  for (int i = 0; i < count; ++i) {
    AlgoCandidate c;
    c.algo = static_cast<int>(perf[i].algo);
    c.name = algo_name(dir, c.algo);
    c.deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
    c.math_type = static_cast<int>(perf[i].mathType);
    c.math = algo_math(perf[i].mathType);
    c.time_ms = perf[i].time;
    // The workspace query is the authority; the heuristics' `memory` may be 0 (not measured).
    // It depends on the math type, so it is asked with the candidate's.
    std::size_t bytes = 0;
    c.succeeded = perf[i].status == CUDNN_STATUS_SUCCESS &&
                  workspace_size(ctx, d, dir, c.algo, c.math_type, &bytes);
    c.workspace = std::max(bytes, perf[i].memory);
    out.push_back(c);
  }
  return out;
}

/// cuDNN's heuristic candidates for one direction, fastest expected first.
std::vector<AlgoCandidate> candidates(DeviceContext& ctx, const ConvDescs& d, Dir dir) {
  int count = 0;
  switch (dir) {
    case kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxCandidates] = {};
      MIRROR_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn(), d.x, d.w, d.conv, d.y,
                                                                kMaxCandidates, &count, perf));
      return to_candidates(ctx, d, dir, perf, count);
    }
    case kBackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxCandidates] = {};
      MIRROR_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          ctx.cudnn(), d.w, d.y, d.conv, d.x, kMaxCandidates, &count, perf));
      return to_candidates(ctx, d, dir, perf, count);
    }
    case kBackwardFilter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxCandidates] = {};
      MIRROR_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          ctx.cudnn(), d.x, d.y, d.conv, d.w, kMaxCandidates, &count, perf));
      return to_candidates(ctx, d, dir, perf, count);
    }
  }
  return {};
}

/// The workspace bytes the device allocator can give now (Note [Algorithm choice]): free device
/// memory plus its cached blocks (released for a larger request), within a limit policy's
/// limit; under preallocate, what is left of the arena.
std::size_t workspace_budget(DeviceContext& ctx) {
  const CachingAllocator& a = allocator_for(Device::cuda(ctx.device()));
  const MemoryStats s = a.stats();
  std::size_t free = 0, total = 0;
  use_device(ctx.device());
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    free = 0;
  }
  const std::size_t growth = free + s.cached;
  switch (a.policy().kind) {
    case MemoryPolicy::Kind::kLimit:
      return std::min(growth, s.limit > s.in_use ? s.limit - s.in_use : 0);
    case MemoryPolicy::Kind::kPreallocate:
      return s.reserved > s.in_use ? s.reserved - s.in_use : 0;
    case MemoryPolicy::Kind::kGrowth:
      break;
  }
  return growth;
}

void warn(const char* op, const ConvProblem& p, const std::string& note) {
  std::fprintf(stderr, "mirror: warning: %s of a %dx%dx%dx%d input, %d filters %dx%d: %s\n", op,
               p.n, p.c, p.h, p.w, p.o, p.kh, p.kw, note.c_str());
}

void log_choice(const char* op, const ConvProblem& p, const std::string& what) {
  std::fprintf(stderr, "mirror: %s of a %dx%dx%dx%d input, %d filters %dx%d, stride %dx%d: %s\n",
               op, p.n, p.c, p.h, p.w, p.o, p.kh, p.kw, p.sh, p.sw, what.c_str());
}

/// The always-available deterministic algorithm of a direction, in FMA math.
ConvAlgo fallback_of(Dir dir) {
  ConvAlgo a;
  a.algo = fallback_algo(dir);
  a.math_type = static_cast<int>(CUDNN_FMA_MATH);
  return a;
}

/// Note [Algorithm choice]: the legacy API's algorithm (and math type) for this shape and
/// direction, run with `descs`.
ConvAlgo legacy_algo(DeviceContext& ctx, const ConvProblem& p, Dir dir, const char* op,
                     const std::shared_ptr<void>& descs) {
  const ConvDescs& d = *static_cast<const ConvDescs*>(descs.get());
  AlgoCandidate fallback;
  fallback.algo = fallback_algo(dir);
  fallback.math_type = static_cast<int>(CUDNN_FMA_MATH);
  fallback.name = algo_name(dir, fallback.algo);
  const std::vector<AlgoCandidate> found = candidates(ctx, d, dir);
  (void)workspace_size(ctx, d, dir, fallback.algo, fallback.math_type, &fallback.workspace);
  const AlgoChoice choice = choose_algo(found, allowed_math(), workspace_budget(ctx), fallback);
  if (!choice.note.empty()) warn(op, p, choice.note);
  // A candidate's workspace came from cudnnGet*WorkspaceSize above (the fallback's is asked
  // again, with its error, by conv_workspace).
  set_math(d, choice.math_type);  // the queries above left the last candidate's
  return {choice.algo, choice.math_type, choice.workspace, !choice.fallback, descs, nullptr};
}

/// Note [Convolution plans]: the graph API's plan for this shape and direction, when there is
/// one (not for grouped convolutions, nor with MIRROR_CUDNN_LEGACY=1). Should the graph API
/// itself fail, it is left alone for the rest of the process, with a warning.
bool planned_algo(DeviceContext& ctx, const ConvProblem& p, Dir dir, const char* op,
                  ConvAlgo& out) {
  static std::atomic<bool> broken{false};
  if (p.groups != 1 || !conv_plans_enabled() || broken.load()) return false;
  const ConvPlanProblem problem{p.n,  p.c,  p.h,  p.w,  p.o,  p.kh, p.kw,
                                p.oh, p.ow, p.sh, p.sw, p.ph, p.pw};
  try {
    const ConvPlan plan =
        make_conv_plan(ctx.cudnn(), problem, dir, allowed_math(), workspace_budget(ctx));
    if (conv_choice_log()) {
      log_choice(op, p,
                 plan.plan ? "graph API " + plan.name + ", " + algo_bytes(plan.workspace)
                           : "no graph-API plan: " + plan.why);
    }
    if (!plan.plan) return false;
    if (!plan.note.empty()) warn(op, p, plan.note);
    out.plan = plan.plan;
    out.workspace = plan.workspace;
    out.sized = true;
    return true;
  } catch (const Error& e) {
    if (!broken.exchange(true)) {
      std::fprintf(stderr,
                   "mirror: warning: cuDNN's graph API failed (%s); convolutions use cuDNN's "
                   "legacy API from now on, which costs more host time per call\n",
                   e.what());
    }
    return false;
  }
}

/// The cached choice of this shape and direction: a graph-API plan when one qualifies, else
/// the legacy algorithm; with the legacy descriptors either way (descs_of).
ConvAlgo conv_algo(DeviceContext& ctx, const ConvProblem& p, Dir dir, const char* op) {
  auto [it, fresh] = ctx.conv_algos().try_emplace(key(dir, p), fallback_of(dir));
  if (!fresh) return it->second;
  auto descs = std::make_shared<ConvDescs>(p);
  it->second.descs = descs;  // should a choice below throw, the fallback runs with them
  ConvAlgo planned;
  if (planned_algo(ctx, p, dir, op, planned)) {
    planned.descs = descs;
    it->second = planned;
  } else {
    it->second = legacy_algo(ctx, p, dir, op, descs);
    if (conv_choice_log()) {
      log_choice(op, p,
                 "legacy " + algo_name(dir, it->second.algo) + ", math type " +
                     std::to_string(it->second.math_type));
    }
  }
  return it->second;
}

const ConvDescs& descs_of(const ConvAlgo& algo) {
  return *static_cast<const ConvDescs*>(algo.descs.get());
}

/// The workspace of `algo` (updated in place), whose descriptors carry its math type: should
/// allocating it fail, the shape falls back to the direction's fallback algorithm from now on,
/// with a warning. Its size is asked of cuDNN once per shape (ConvAlgo::sized); the query sets
/// the math type on the descriptors.
Tensor conv_workspace(DeviceContext& ctx, const ConvProblem& p, Dir dir, ConvAlgo& algo,
                      std::size_t& bytes, const char* op) {
  const Device device = Device::cuda(ctx.device());
  const ConvDescs& d = descs_of(algo);
  if (!algo.sized) {
    MIRROR_CHECK(workspace_size(ctx, d, dir, algo.algo, algo.math_type, &algo.workspace),
                 InvalidArgument,
                 std::string(op) + ": cuDNN does not support " + algo_name(dir, algo.algo) +
                     " for this problem");
    algo.sized = true;
    ctx.conv_algos()[key(dir, p)] = algo;
  }
  bytes = algo.workspace;
  if (bytes == 0) return {};
  try {
    return Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::kUInt8, device);
  } catch (const OutOfMemory& e) {
    if (algo.plan) {  // the legacy API's choice, within what is left
      warn(op, p,
           "the " + algo_bytes(bytes) + " workspace of the graph API's plan could not be " +
               "allocated (" + e.what() + "); using the legacy API for this shape");
      algo = legacy_algo(ctx, p, dir, op, algo.descs);
      ctx.conv_algos()[key(dir, p)] = algo;
      return conv_workspace(ctx, p, dir, algo, bytes, op);
    }
    if (algo.algo == fallback_algo(dir)) throw;
    warn(op, p,
         "the " + algo_bytes(bytes) + " workspace of " + algo_name(dir, algo.algo) +
             " could not be allocated (" + e.what() + "); falling back to " +
             algo_name(dir, fallback_algo(dir)) + " for this shape, which may be slower");
    std::shared_ptr<void> descs = algo.descs;
    algo = fallback_of(dir);
    algo.descs = std::move(descs);
    ctx.conv_algos()[key(dir, p)] = algo;
    return conv_workspace(ctx, p, dir, algo, bytes, op);
  }
}

void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

/// The input cuDNN sees: x itself, or x padded explicitly (Note [Asymmetric padding]).
Tensor conv_input(const Tensor& x, const ConvProblem& p, cudaStream_t s) {
  if (!p.explicit_pad) return x;
  Tensor padded = Tensor::empty({p.n, p.c, p.h, p.w}, DType::kFloat32, x.device());
  const Planes d{static_cast<std::int64_t>(p.n) * p.c, p.in_h, p.in_w, p.h, p.w};
  pad2d(f32(x, "conv2d"), f32(padded, "conv2d"), d, p.top, p.left, s);
  return padded;
}

Planes pool_planes(const Tensor& x, const ops::Pool2DGeometry& g) {
  const int h = static_cast<int>(x.dim(2)), w = static_cast<int>(x.dim(3));
  return {x.dim(0) * x.dim(1), h, w, g.out_h(h), g.out_w(w)};
}

}  // namespace

Tensor CudaKernels::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                   const ops::Conv2DGeometry& g) {
  OpScope op(x);
  const ConvProblem p = plan(x.shape(), w.shape(), g);
  Tensor y = Tensor::empty({p.n, p.o, p.oh, p.ow}, DType::kFloat32, x.device());
  if (p.n == 0) return y;  // cuDNN rejects empty tensors; nothing to compute
  const Tensor in = aligned_copy(conv_input(x, p, op.stream()));
  const Tensor wa = aligned_copy(w);
  const char* name = "conv2d_forward";
  ConvAlgo algo = conv_algo(op.ctx(), p, kForward, name);
  const ConvDescs& d = descs_of(algo);
  std::size_t bytes = 0;
  const Tensor ws = conv_workspace(op.ctx(), p, kForward, algo, bytes, name);
  const float one = 1.0f, zero = 0.0f;
  if (algo.plan) {
    run_conv_plan(op.ctx().cudnn(), algo.plan, f32(in, name), f32(wa, name), f32(y, name), ptr(ws));
  } else {
    MIRROR_CUDNN_CHECK(cudnnConvolutionForward(op.ctx().cudnn(), &one, d.x, f32(in, name), d.w,
                                               f32(wa, name), d.conv,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo),
                                               ptr(ws), bytes, &zero, d.y, f32(y, name)));
  }
  if (bias.defined()) bias_add(y, bias);
  return y;
}

Tensor CudaKernels::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                         const ops::Conv2DGeometry& g) {
  OpScope op(dy);
  const ConvProblem p = plan(x_shape, w.shape(), g);
  check_shape(dy, {p.n, p.o, p.oh, p.ow}, "conv2d_backward_data: dy");
  if (p.n == 0) return Tensor::empty(x_shape, DType::kFloat32, dy.device());
  Tensor dx_in = Tensor::empty({p.n, p.c, p.h, p.w}, DType::kFloat32, dy.device());
  const char* name = "conv2d_backward_data";
  ConvAlgo algo = conv_algo(op.ctx(), p, kBackwardData, name);
  const ConvDescs& d = descs_of(algo);
  std::size_t bytes = 0;
  const Tensor ws = conv_workspace(op.ctx(), p, kBackwardData, algo, bytes, name);
  const float one = 1.0f, zero = 0.0f;
  const Tensor wa = aligned_copy(w), dya = aligned_copy(dy);
  if (algo.plan) {
    run_conv_plan(op.ctx().cudnn(), algo.plan, f32(dx_in, name), f32(wa, name), f32(dya, name),
                  ptr(ws));
  } else {
    MIRROR_CUDNN_CHECK(cudnnConvolutionBackwardData(
        op.ctx().cudnn(), &one, d.w, f32(wa, name), d.y, f32(dya, name), d.conv,
        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), ptr(ws), bytes, &zero, d.x,
        f32(dx_in, name)));
  }
  if (!p.explicit_pad) return dx_in;
  Tensor dx = Tensor::empty(x_shape, DType::kFloat32, dy.device());
  const Planes planes{static_cast<std::int64_t>(p.n) * p.c, p.h, p.w, p.in_h, p.in_w};
  crop2d(f32(dx_in, name), f32(dx, name), planes, p.top, p.left, op.stream());
  return dx;
}

void CudaKernels::conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw,
                                          Tensor& dbias, const ops::Conv2DGeometry& g) {
  OpScope op(x);
  const ConvProblem p = plan(x.shape(), dw.shape(), g);
  check_shape(dy, {p.n, p.o, p.oh, p.ow}, "conv2d_backward_weights: dy");
  if (p.n == 0) return;  // an empty batch adds nothing
  const Tensor in = aligned_copy(conv_input(x, p, op.stream()));
  const char* name = "conv2d_backward_weights";
  ConvAlgo algo = conv_algo(op.ctx(), p, kBackwardFilter, name);
  const ConvDescs& d = descs_of(algo);
  std::size_t bytes = 0;
  const Tensor ws = conv_workspace(op.ctx(), p, kBackwardFilter, algo, bytes, name);
  // beta = 1: dw += correlation(x, dy), ops.h's accumulate convention.
  const float one = 1.0f;
  const Tensor dya = aligned_copy(dy);
  Tensor out = aligned_copy(dw);  // Note [cuDNN alignment]: accumulate in a copy, copy back
  if (algo.plan) {                // the plan accumulates too (beta 1)
    run_conv_plan(op.ctx().cudnn(), algo.plan, f32(in, name), f32(out, name), f32(dya, name),
                  ptr(ws));
  } else {
    MIRROR_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        op.ctx().cudnn(), &one, d.x, f32(in, name), d.y, f32(dya, name), d.conv,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo), ptr(ws), bytes, &one, d.w,
        f32(out, name)));
  }
  if (!out.shares_storage_with(dw)) dw.copy_from(out);
  if (dbias.defined()) bias_grad(dy, dbias);
}

Tensor CudaKernels::maxpool2d_forward(const Tensor& x, const ops::Pool2DGeometry& g) {
  OpScope op(x);
  const Planes d = pool_planes(x, g);
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), d.oh, d.ow}, x.dtype(), x.device());
  maxpool_forward(f32(x, "maxpool2d_forward"), f32(y, "maxpool2d_forward"), d, g, op.stream());
  return y;
}

Tensor CudaKernels::maxpool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                       const ops::Pool2DGeometry& g) {
  OpScope op(x);
  const Planes d = pool_planes(x, g);
  MIRROR_CHECK(
      x.rank() == 4 && dy.rank() == 4 && dy.dim(0) == x.dim(0) && dy.dim(1) == x.dim(1) &&
          dy.dim(2) == d.oh && dy.dim(3) == d.ow && x.dtype() == dy.dtype(),
      InvalidArgument,
      "maxpool2d_backward: dy " + dy.str() + " does not match the pooled shape of x " + x.str());
  // Every element of dx is written by the gather kernel: no zero fill needed.
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  maxpool_backward(f32(x, "maxpool2d_backward"), f32(dy, "maxpool2d_backward"),
                   f32(dx, "maxpool2d_backward"), d, g, op.stream());
  return dx;
}

}  // namespace mirror::cuda
