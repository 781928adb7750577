// defines: StepMemory, the estimate of one training step's host memory that the Trainer checks
// before it allocates anything batch-sized (Note [Step memory]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mirror/data/dataset.h"
#include "mirror/nn/sequential.h"

namespace mirror::train {

// Note [Step memory]: on the CPU a step that does not fit is not an error but a machine brought
// to its knees (malloc overcommits; the OOM killer ends the job with no message). So the
// Trainer adds up, per local replica and micro-batch of B samples: the batch as the loader
// stages it (inputs, targets, weights, ids; twice: one batch in use, one prefetched), each
// layer's output for B samples twice (kept for backward, and its gradient), and the
// parameters, their gradients and the optimizer's slots; then it refuses a step whose total
// exceeds what the host allocator may hold (Note [CPU growth cap], memory.h). It is a lower
// bound (layers keep more, e.g. a GRU's gates), so it only catches steps that cannot fit.
struct StepMemory {
  std::int64_t micro_batch = 0;   // samples per replica per micro-batch
  int replicas = 1;               // local replicas sharing this host
  std::uint64_t batch_bytes = 0;  // per replica
  std::uint64_t activation_bytes = 0;
  std::uint64_t state_bytes = 0;  // parameters + gradients + optimizer slots
  std::uint64_t total() const;
  /// e.g. "9.31 GiB (micro-batch of 50000 samples x 1 replica(s): batch 150 MiB, activations
  /// 9.12 GiB, parameters/gradients/optimizer 40.0 MiB)"
  std::string text() const;
};

/// `model` is built (per-sample layer output shapes known); `optimizer_slots` tensors per
/// parameter (Adam: 2, SGD with momentum: 1).
StepMemory estimate_step_memory(nn::Sequential& model, const data::Dataset& train,
                                std::int64_t micro_batch, int replicas, int optimizer_slots,
                                bool cpu_replicas);

/// Note [Parameter floor]: a layer of 10^9 units is built (and its host copy initialised) before
/// the step estimate can run, and ends in std::bad_alloc. So before the model is built, a lower
/// bound of its parameters is read from the bound spec's canonical layers (to_json()): a dense
/// has units x inputs, an embedding input_dim x output_dim, a convolution filters x kernel x
/// input channels, a GRU 3 and an LSTM 4 x units x (inputs + units) (twice that in a
/// Bidirectional), where the inputs are a lower bound followed through the layers that keep the
/// last axis (1 where it is not known). Other layers count 0, so the bound only refuses what
/// cannot fit.
std::uint64_t parameter_floor(const nlohmann::json& spec);

/// The parameters, gradients and optimizer slots of `parameters` float32 values for `replicas`
/// replicas (no batch or activations): the part of StepMemory known before the model exists.
StepMemory parameter_memory(std::uint64_t parameters, int replicas, int optimizer_slots);

/// Throws OutOfMemory when `need` exceeds `budget` bytes: the message names the estimate, the
/// budget (`budget_text`, e.g. "90% of the 20.1 GiB MemAvailable") and what to change.
/// `advice` replaces the default (smaller batch, --accumulation) when given.
void check_step_memory(const StepMemory& need, std::uint64_t budget, const std::string& budget_text,
                       const std::string& advice = "");

}  // namespace mirror::train
