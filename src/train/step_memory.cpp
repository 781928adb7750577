// The step host-memory estimate (Note [Step memory], step_memory.h).
#include "train/step_memory.h"

#include <algorithm>
#include <cstdio>

#include "mirror/error.h"

namespace mirror::train {
namespace {

std::uint64_t numel(const Shape& s) {
  std::uint64_t n = 1;
  for (auto d : s) n *= static_cast<std::uint64_t>(d > 0 ? d : 1);
  return n;
}

std::string gib(std::uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  return buf;
}

}  // namespace

std::uint64_t StepMemory::total() const {
  return static_cast<std::uint64_t>(replicas) * (batch_bytes + activation_bytes + state_bytes);
}

std::string StepMemory::text() const {
  if (micro_batch == 0) {  // parameter_memory: no step yet
    return gib(total()) + " (parameters, gradients and optimizer slots of " +
           std::to_string(replicas) + " replica(s))";
  }
  return gib(total()) + " (micro-batch of " + std::to_string(micro_batch) + " samples x " +
         std::to_string(replicas) + " replica(s): batch " + gib(batch_bytes) + ", activations " +
         gib(activation_bytes) + ", parameters/gradients/optimizer " + gib(state_bytes) + ")";
}

StepMemory estimate_step_memory(nn::Sequential& model, const data::Dataset& train,
                                std::int64_t micro_batch, int replicas, int optimizer_slots,
                                bool cpu_replicas) {
  StepMemory m;
  m.micro_batch = micro_batch;
  m.replicas = replicas;
  const auto b = static_cast<std::uint64_t>(micro_batch);
  const std::uint64_t input = numel(train.sample_shape()) * dtype_size(train.input_dtype());
  const std::uint64_t target =
      (train.target_kind() == data::TargetKind::kClass ? numel(train.label_shape())  // [] -> 1
                                                       : numel(train.target_shape())) *
      4;
  // weight (float) and sample id (int64) per sample; one batch in use, one prefetched.
  m.batch_bytes = 2 * b * (input + target + 4 + 8);
  if (!cpu_replicas) return m;  // a GPU holds the rest; its allocator says no by itself
  const std::uint64_t elem = dtype_size(model.dtype());
  std::uint64_t per_sample = numel(model.input_shape()) * elem;  // the input as the model sees it
  for (const Shape& out : model.layer_output_shapes()) per_sample += 2 * numel(out) * elem;
  m.activation_bytes = b * per_sample;
  const auto params = static_cast<std::uint64_t>(model.parameter_count());
  m.state_bytes = params * elem * (2 + static_cast<std::uint64_t>(optimizer_slots));
  return m;
}

namespace {

constexpr std::uint64_t kCap = std::uint64_t{1} << 62;  // no overflow on absurd sizes

std::uint64_t times(std::uint64_t a, std::uint64_t b) {
  return b != 0 && a > kCap / b ? kCap : std::min(kCap, a * b);
}

/// A non-negative integer field, or the product of an array of them (a kernel [kh, kw]); 0
/// when absent or not a number.
std::uint64_t field(const nlohmann::json& l, const char* name) {
  const auto it = l.find(name);
  if (it == l.end()) return 0;
  auto positive = [](const nlohmann::json& v) -> std::uint64_t {
    if (!v.is_number_integer()) return 0;
    const auto n = v.get<std::int64_t>();
    return n > 0 ? static_cast<std::uint64_t>(n) : 0;
  };
  if (!it->is_array()) return positive(*it);
  std::uint64_t n = 1;
  for (const auto& v : *it) n = times(n, positive(v));
  return it->empty() ? 0 : n;
}

/// The floor of one layer's parameters. `features` is a lower bound of the width of the
/// layer's input's last axis (channels for images), which the layer updates for the next one.
std::uint64_t layer_floor(const nlohmann::json& l, std::uint64_t& features) {
  const std::string type = l.value("type", "");
  const std::uint64_t in = std::max<std::uint64_t>(features, 1);
  const std::uint64_t units = field(l, "units"), filters = field(l, "filters");
  if (type == "dense") {
    features = std::max<std::uint64_t>(units, 1);
    return times(units, in);
  }
  if (type == "embedding") {
    features = std::max<std::uint64_t>(field(l, "output_dim"), 1);
    return times(field(l, "input_dim"), field(l, "output_dim"));
  }
  // A convolution has filters x kernel weights per input channel.
  if (type == "conv2d" || type == "conv1d") {
    features = std::max<std::uint64_t>(filters, 1);
    return times(times(filters, std::max<std::uint64_t>(field(l, "kernel"), 1)), in);
  }
  // A recurrent layer's kernels: gates x units x (inputs + units).
  if (type == "gru" || type == "lstm") {
    features = std::max<std::uint64_t>(units, 1);
    return times(type == "gru" ? 3 : 4, times(units, in + units));
  }
  if (type == "bidirectional" && l.contains("layer") && l["layer"].is_object()) {
    std::uint64_t inner = features;
    const std::uint64_t n = times(2, layer_floor(l["layer"], inner));
    features = l.value("merge_mode", "concat") == "concat" ? times(2, inner) : inner;
    return n;
  }
  // Layers that keep the last axis (or, flattening, keep at least its width).
  static const char* const kKeep[] = {
      "dropout",           "activation",        "batch_normalization", "layer_normalization",
      "masking",           "flatten",           "zero_padding2d",      "maxpool2d",
      "max_pooling2d",     "average_pooling2d", "maxpool1d",           "max_pooling1d",
      "average_pooling1d", "global_average_pooling2d", "global_average_pooling1d",
      "global_avgpool1d",  "global_maxpool1d",  "global_max_pooling1d"};
  if (std::find(std::begin(kKeep), std::end(kKeep), type) == std::end(kKeep)) features = 1;
  return 0;
}

}  // namespace

std::uint64_t parameter_floor(const nlohmann::json& spec) {
  if (!spec.is_object() || !spec.contains("layers") || !spec["layers"].is_array()) return 0;
  std::uint64_t floor = 0;
  std::uint64_t features = 1;  // a dense layer's inputs when the layer before is a dense
  for (const nlohmann::json& l : spec["layers"]) {
    if (!l.is_object()) continue;
    floor = std::min(kCap, floor + layer_floor(l, features));
  }
  return floor;
}

StepMemory parameter_memory(std::uint64_t parameters, int replicas, int optimizer_slots) {
  StepMemory m;
  m.replicas = replicas;
  constexpr std::uint64_t kFloat = 4;
  const std::uint64_t per_value = kFloat * (2 + static_cast<std::uint64_t>(optimizer_slots));
  m.state_bytes =
      parameters > UINT64_MAX / per_value / 1024 ? UINT64_MAX / 1024 : parameters * per_value;
  return m;
}

void check_step_memory(const StepMemory& need, std::uint64_t budget, const std::string& budget_text,
                       const std::string& advice) {
  if (budget == 0 || need.total() <= budget) return;
  throw OutOfMemory(std::string(need.micro_batch == 0 ? "the model needs at least "
                                                      : "a training step needs at least ") +
                    need.text() + " of host memory, more than " + budget_text + " (" + gib(budget) +
                    "); nothing was allocated. " +
                    (advice.empty()
                         ? "Use a smaller --batch-size or --batch-per-replica, or --accumulation N "
                           "to run each step as N micro-batches (same result, 1/N of the memory)"
                         : advice));
}

}  // namespace mirror::train
