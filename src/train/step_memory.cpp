// The step host-memory estimate (Note [Step memory], step_memory.h).
#include "train/step_memory.h"

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
      train.target_kind() == data::TargetKind::kClass ? 4 : numel(train.target_shape()) * 4;
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

void check_step_memory(const StepMemory& need, std::uint64_t budget,
                       const std::string& budget_text) {
  if (budget == 0 || need.total() <= budget) return;
  throw OutOfMemory(
      "a training step needs at least " + need.text() + " of host memory, more than " +
      budget_text + " (" + gib(budget) +
      "); nothing was allocated. Use a smaller --batch-size or --batch-per-replica, or "
      "--accumulation N to run each step as N micro-batches (same result, 1/N of the memory)");
}

}  // namespace mirror::train
