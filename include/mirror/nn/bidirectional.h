// defines: Bidirectional, the wrapper that runs a recurrent layer over each sequence forwards and
// backwards and merges the two outputs (Keras's Bidirectional).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/recurrent.h"

namespace mirror::nn {

/// How the two directions' outputs are combined (Keras merge_mode).
enum class MergeMode { kConcat, kSum, kAve, kMul };
/// "concat", "sum", "ave", "mul" (Keras's names); anything else throws InvalidArgument.
MergeMode parse_merge_mode(const std::string& name);
const char* merge_mode_name(MergeMode mode);

/// Runs `layer` (forward direction) and a fresh copy of it (backward direction) over [N, T, F].
/// The backward direction reads each sequence's own valid steps in reverse, x[len-1], ...,
/// x[0], (PyTorch's packed bidirectional RNN and cuDNN's padded layout, not a reversal of the
/// padding): its last state is the one after x[0], and with return_sequences its output at step
/// t is the one it produced reading x[t], so both directions line up per step; zeros past each
/// length. Merge: concat (default; [.., 2*units], forward first), sum, ave (mean), mul.
///
/// Parameters: the forward layer's, then the backward layer's, named
/// `<name>/forward/<param>` and `<name>/backward/<param>` (e.g. bidirectional_1/forward/kernel).
class Bidirectional : public Layer {
 public:
  explicit Bidirectional(std::unique_ptr<Recurrent> layer, MergeMode mode = MergeMode::kConcat);
  std::string kind() const override { return "bidirectional"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  std::vector<Parameter*> parameters() override;
  nlohmann::json config() const override;

  MergeMode merge_mode() const { return mode_; }
  Recurrent& forward_layer() { return *forward_; }
  Recurrent& backward_layer() { return *backward_; }

 private:
  std::unique_ptr<Recurrent> forward_, backward_;
  MergeMode mode_;
  // Saved by a training forward for backward.
  std::vector<std::int32_t> lengths_;
  Tensor y_forward_, y_backward_;  // the two directions' outputs (mul merge only)
  bool saved_ = false;
};

}  // namespace mirror::nn
