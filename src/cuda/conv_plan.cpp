// Convolutions through cuDNN's graph API: Note [Convolution plans] in conv_plan.h.
#include "cuda/conv_plan.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/check.h"
#include "mirror/error.h"

namespace mirror::cuda {
namespace {

// cuDNN 9.19 marks the two handle attributes deprecated (a device-property descriptor can stand
// in for the device when plans are built ahead of time); here the plan is for the handle's own
// GPU, which is what the handle says.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

// The variant pack's unique ids of the three operands, whatever the direction.
constexpr std::int64_t kXId = 1, kWId = 2, kYId = 3;

/// One backend descriptor, destroyed with the object.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    MIRROR_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  Desc(Desc&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  ~Desc() {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }

  cudnnStatus_t try_set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                        const void* values, std::int64_t count = 1) {
    return cudnnBackendSetAttribute(d_, name, type, count, values);
  }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const void* values,
           std::int64_t count = 1) {
    MIRROR_CUDNN_CHECK(try_set(name, type, values, count));
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value) {
    const cudnnBackendDescriptor_t v = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &v);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

/// A packed float32 NCHW tensor (or KCRS filter), 16-byte aligned (Note [cuDNN alignment]).
Desc tensor(std::int64_t uid, std::int64_t d0, std::int64_t d1, std::int64_t d2, std::int64_t d3) {
  const std::int64_t dims[4] = {d0, d1, d2, d3};
  const std::int64_t strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const std::int64_t alignment = 16;
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims, 4);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides, 4);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  MIRROR_CUDNN_CHECK(t.finalize());
  return t;
}

Desc convolution(const ConvPlanProblem& p) {
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t spatial = 2;
  const std::int64_t dilations[2] = {1, 1}, strides[2] = {p.stride_h, p.stride_w},
                     padding[2] = {p.pad_h, p.pad_w};
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
  c.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  c.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial);
  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, padding, 2);
  c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, padding, 2);
  MIRROR_CUDNN_CHECK(c.finalize());
  return c;
}

/// The attributes of one direction's operation, the x-, w- and y-shaped operands in that order.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

constexpr OperationAttributes kOperations[3] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

/// The operation of one direction over the x-, w- and y-shaped tensors: alpha 1, beta 0, except
/// backward filter's beta 1 (it accumulates, ops.h's convention).
Desc operation(ConvPlanDirection dir, const Desc& x, const Desc& w, const Desc& y,
               const Desc& conv) {
  const OperationAttributes& a = kOperations[dir];
  const float alpha = 1.0f, beta = dir == kPlanBackwardFilter ? 1.0f : 0.0f;
  Desc op(a.type);
  op.set_desc(a.x, x);
  op.set_desc(a.w, w);
  op.set_desc(a.y, y);
  op.set_desc(a.conv, conv);
  op.set(a.alpha, CUDNN_TYPE_FLOAT, &alpha);
  op.set(a.beta, CUDNN_TYPE_FLOAT, &beta);
  MIRROR_CUDNN_CHECK(op.finalize());
  return op;
}

/// What an engine's notes say (Note [Convolution plans]); false when cuDNN would not tell.
bool read_notes(cudnnBackendDescriptor_t engine, EngineNotes& notes) {
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  std::int64_t count = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &count,
                               numerical) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    switch (numerical[i]) {
      case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
        notes.tensor_core = true;
        break;
      case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
        notes.down_convert = true;
        break;
      case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
        notes.reduced_reduction = true;
        break;
      case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
        notes.nondeterministic = true;
        break;
      default:
        break;
    }
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &count,
                               behavior) != CUDNN_STATUS_SUCCESS) {
    return false;
  }
  for (std::int64_t i = 0; i < count; ++i)
    if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) notes.runtime_compiled = true;
  return true;
}

/// The descriptors a plan was made from, kept alive as long as the plan.
struct PlanHolder {
  std::vector<Desc> parts;
  std::vector<Desc> configs;
  std::optional<Desc> plan;
};

}  // namespace

namespace {
bool env_is_1(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}
}  // namespace

bool conv_plans_enabled() {
  static const bool enabled = !env_is_1("MIRROR_CUDNN_LEGACY");
  return enabled;
}

bool conv_choice_log() {
  static const bool log = env_is_1("MIRROR_CUDNN_LOG");
  return log;
}

ConvPlan make_conv_plan(cudnnHandle_t handle, const ConvPlanProblem& p, ConvPlanDirection dir,
                        MathAllowance allowed, std::size_t budget) {
  auto holder = std::make_shared<PlanHolder>();
  std::vector<Desc>& parts = holder->parts;
  parts.push_back(tensor(kXId, p.n, p.c, p.h, p.w));
  parts.push_back(tensor(kWId, p.o, p.c, p.kh, p.kw));
  parts.push_back(tensor(kYId, p.n, p.o, p.oh, p.ow));
  parts.push_back(convolution(p));
  parts.push_back(operation(dir, parts[0], parts[1], parts[2], parts[3]));
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t op = parts[4].get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, &op);
  graph.set(kGraphHandle, CUDNN_TYPE_HANDLE, &handle);
  ConvPlan none;
  if (const cudnnStatus_t st = graph.finalize(); st != CUDNN_STATUS_SUCCESS) {
    none.why = std::string("the operation graph did not finalize: ") + cudnnGetErrorString(st);
    return none;
  }
  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (const cudnnStatus_t st = heuristics.finalize(); st != CUDNN_STATUS_SUCCESS) {
    none.why = std::string("the heuristics did not finalize: ") + cudnnGetErrorString(st);
    return none;
  }
  std::int64_t count = 0;
  MIRROR_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Desc>& configs = holder->configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t got = 0;
  if (count > 0) {
    MIRROR_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                                raw.data()));
  }
  // The engines in cuDNN's order (fastest expected first), each with what its notes say.
  std::vector<AlgoCandidate> ranked;
  std::vector<cudnnBackendDescriptor_t> config_of;  // ranked[k]'s engine configuration
  for (std::int64_t i = 0; i < got; ++i) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    std::int64_t n = 0;
    if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &e) != CUDNN_STATUS_SUCCESS)
      continue;
    EngineNotes notes;
    if (!read_notes(e, notes)) continue;
    std::int64_t global = -1;
    (void)cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                   &global);
    ranked.push_back(engine_candidate(static_cast<int>(ranked.size()),
                                      "engine " + std::to_string(global), notes));
    config_of.push_back(raw[i]);
  }
  // pick_engine makes plans in that order until one fits; the last one made is the winner's.
  std::optional<Desc> made;
  auto make_plan = [&](std::size_t k) -> std::optional<std::size_t> {
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    const cudnnBackendDescriptor_t config = config_of[k];
    std::int64_t workspace = 0, n = 0;
    const bool ok =
        plan.try_set(kPlanHandle, CUDNN_TYPE_HANDLE, &handle) == CUDNN_STATUS_SUCCESS &&
        plan.try_set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     &config) == CUDNN_STATUS_SUCCESS &&
        plan.finalize() == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &n, &workspace) == CUDNN_STATUS_SUCCESS &&
        workspace >= 0;
    if (!ok) return std::nullopt;
    made.emplace(std::move(plan));
    return static_cast<std::size_t>(workspace);
  };
  const EnginePick pick = pick_engine(ranked, allowed, budget, make_plan);
  if (pick.index < 0) {
    none.why = pick.why;
    return none;
  }
  const AlgoCandidate& winner = ranked[static_cast<std::size_t>(pick.index)];
  ConvPlan out;
  out.workspace = pick.workspace;
  out.name = winner.name + " (" + algo_math_name(winner.math) + ")";
  out.note = pick.note;
  holder->plan.emplace(std::move(*made));
  out.plan = std::move(holder);
  return out;
}

void run_conv_plan(cudnnHandle_t handle, const std::shared_ptr<void>& plan, void* x, void* w,
                   void* y, void* workspace) {
  const auto* holder = static_cast<const PlanHolder*>(plan.get());
  void* pointers[3] = {x, w, y};
  const std::int64_t ids[3] = {kXId, kWId, kYId};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, ids, 3);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  MIRROR_CUDNN_CHECK(pack.finalize());
  MIRROR_CUDNN_CHECK(cudnnBackendExecute(handle, holder->plan->get(), pack.get()));
}

}  // namespace mirror::cuda
