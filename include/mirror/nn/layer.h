// defines: Parameter, ForwardContext and Layer, the interface every layer implements.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/tensor.h"

namespace mirror::nn {

/// A trainable tensor and its gradient. `grad` may be rebound by the strategy to a view inside
/// a flat all-reduce bucket, so layers must always write through `grad` at backward time and
/// never cache it. Gradients are accumulated (+=); clear_grad starts a step's sum.
///
/// Note [First gradient write]: zeroing a gradient and then adding the first contribution into
/// it reads and writes it twice; for the CNN's 12.8 MB Dense kernel that was 1.2 ms of a 30 ms
/// step. A layer that can write a gradient without reading it (a product with beta = 0) sets
/// `overwrites_grad`; clear_grad then only marks it `grad_unwritten` (its contents count as
/// zero), and the layer's first write of the step overwrites and clears the mark. Later writes
/// (micro-batches, a layer run several times) accumulate as usual.
struct Parameter {
  std::string name;  // "conv2d_1/kernel": deterministic, the same on every rank
  Tensor value;
  Tensor grad;
  bool overwrites_grad = false;
  bool grad_unwritten = false;
  /// Zeroes `grad` for a new step (only marks it, for overwrites_grad).
  void clear_grad();
  /// The beta of this step's next write into `grad` (0: overwrite, 1: add), clearing the mark.
  double take_grad_beta() {
    const double beta = grad_unwritten ? 0.0 : 1.0;
    grad_unwritten = false;
    return beta;
  }
};

/// A tensor that is part of the model's state but is not trained (BatchNormalization's moving
/// statistics): saved in checkpoints and covered by the replica fingerprint, never given to the
/// optimizer and never all-reduced as a gradient.
struct Buffer {
  std::string name;  // "batch_normalization_1/moving_mean": deterministic, like parameter names
  Tensor value;
};

/// Sums per-channel statistics over every replica of the step (cross-replica BatchNorm). The
/// strategy provides it; every replica calls it the same number of times in the same order
/// (the model is the same everywhere), so the collectives match. `values` is summed in place.
class ReplicaSum {
 public:
  virtual ~ReplicaSum() = default;
  virtual void sum(std::vector<double>& values, const std::string& tag) = 0;
  /// Sums `values`, a float64 tensor on the replica's device, in place, in device order (Note
  /// [Device batch norm], mirror/ops.h): on a GPU the work queued afterwards on the device sees
  /// the sum while the host does not wait for it. The default goes through sum() on the host.
  virtual void sum_on_device(Tensor& values, const std::string& tag) {
    std::vector<double> host = values.to(Device::cpu()).to_vector<double>();
    sum(host, tag);
    values.copy_from(Tensor::from_vector(host, values.shape()));
  }
};

/// Per-step information a forward pass needs besides the input.
struct ForwardContext {
  bool training = false;
  /// Seed of this step's random streams (dropout); identical on every replica.
  std::uint64_t seed = 0;
  /// int64 [N]: a global id per sample of this replica's shard (dropout masks depend on it,
  /// not on the replica, so data parallelism stays exact).
  Tensor sample_ids;
  /// Valid length of each sequence (host); set by the batch or by a Masking layer, read by GRU.
  /// Sequential gives each layer the lengths of its input (Note [Sequence masks]).
  std::vector<std::int32_t> lengths;
  /// Note [Sequence masks]: set by Sequential from its model; how sequence layers treat lengths.
  bool keras_masks = false;
  /// float32 [N]: the batch's per-sample weights (1 real, 0 padding); undefined = all real.
  /// Layers that mix samples (BatchNormalization) leave padding out of their statistics and
  /// give it no input gradient, so a padded last batch stays exact.
  Tensor sample_weights;
  /// Cross-replica sums for synchronized BatchNorm; null in a single-replica run (a layer then
  /// uses its own batch, which is the global one).
  ReplicaSum* replica_sum = nullptr;
};

/// Note [Sequence masks]
/// Mirror masks a sequence's padding with lengths (ForwardContext::lengths: the valid steps of
/// each sample; padding is trailing). Sequential keeps the lengths of every layer's output, gives
/// each layer those of its input (a merge: the longest of its inputs', none when an input has
/// none, as Keras 3 ORs masks), and ends them after a layer that turns a sequence into something
/// without a time axis (a recurrent layer returning its last state, Flatten, a global pool).
/// Two modes, chosen by the model (ModelSpec "masks"):
///  - Mirror's own (keras_masks false): a model reading token data knows each sequence's length
///    from the batch on; every sequence layer honours it: recurrent layers stop at the length,
///    1-D convolutions and pools compute what the unpadded sequence gives and pass on their
///    output lengths, Dense (and a sigmoid Activation) keep the output zero past the length, so
///    that a padded sequence gives the result of the unpadded one.
///  - Keras's (keras_masks true, every Keras model): padding is masked where Keras masks it and
///    nowhere else. The batch's lengths are not used; lengths start at a Masking layer (an
///    Embedding with mask_zero puts one before it); the layers that support masking in Keras
///    pass them on unchanged (Dense, Dropout, Activation, normalisations, recurrent layers
///    returning sequences, merges), those that read the mask use them (GRU, LSTM, Bidirectional,
///    GlobalAveragePooling1D), and every other layer computes on all steps and ends them
///    (Conv1D, 1-D pools, GlobalMaxPooling1D, Flatten).
/// A new layer over sequences states which of these it is.

/// Random source for initialisation (host, double precision; cast to the model dtype).
using InitRng = std::mt19937_64;

class Layer {
 public:
  virtual ~Layer() = default;
  /// Short kind used in names: "dense", "conv2d", "gru", ...
  virtual std::string kind() const = 0;
  /// Creates the parameters for an input shape WITHOUT the batch dimension and returns the
  /// output shape (without batch). Called once by Sequential::build.
  virtual Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) = 0;
  virtual Tensor forward(const Tensor& x, ForwardContext& ctx) = 0;
  /// Gradient of the input; accumulates parameter gradients. Uses what forward saved.
  virtual Tensor backward(const Tensor& dy) = 0;
  virtual std::vector<Parameter*> parameters() { return {}; }
  /// Non-trained state (moving statistics), in a fixed order.
  virtual std::vector<Buffer*> buffers() { return {}; }
  /// Layer hyper-parameters (for summaries, checkpoints and the model fingerprint).
  virtual nlohmann::json config() const = 0;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  /// Whether backward must return the input gradient. Sequential clears it for a layer whose
  /// inputs are the data or layers with no parameter at or above them (nothing consumes those
  /// gradients), so layers may skip that work and return an undefined Tensor; computing it
  /// anyway is also correct.
  bool input_grad_needed() const { return input_grad_needed_; }
  void set_input_grad_needed(bool needed) { input_grad_needed_ = needed; }
  /// Note [Blocked images] (mirror/ops.h): whether forward takes a blocked image as well as a
  /// plain one (backward then returns the input gradient blocked like the input).
  virtual bool accepts_blocked_input() const { return false; }
  /// Whether forward may return a blocked image. Sequential allows it when every reader of the
  /// output accepts one; the gradient backward receives is then laid out like the output.
  bool blocked_output_allowed() const { return blocked_output_allowed_; }
  void set_blocked_output_allowed(bool allowed) { blocked_output_allowed_ = allowed; }
  /// Note [ReLU through max pool] (src/cpu/cpu_pool.cpp): a layer whose output is a ReLU's
  /// (its backward masks dy by output > 0), and a reader that can apply that mask in its own
  /// backward. Sequential pairs a producer with its only reader: the reader then masks
  /// (masks_input_relu) and the producer skips its pass (relu_masked_by_reader).
  virtual bool relu_output() const { return false; }
  virtual bool can_mask_input_relu() const { return false; }
  bool relu_masked_by_reader() const { return relu_masked_by_reader_; }
  void set_relu_masked_by_reader(bool masked) { relu_masked_by_reader_ = masked; }
  bool masks_input_relu() const { return masks_input_relu_; }
  void set_masks_input_relu(bool masks) { masks_input_relu_ = masks; }
  /// Note [Gradients as convolution operands] (mirror/ops.h): a layer whose backward reads dy
  /// only through ops::conv2d_operand, and a reader that can return its input gradient already
  /// made so. Sequential pairs a producer with its only reader (input_grad_as_conv_operand).
  virtual bool output_grad_is_conv_operand() const { return false; }
  virtual bool can_return_conv_operand() const { return false; }
  bool input_grad_as_conv_operand() const { return input_grad_as_conv_operand_; }
  void set_input_grad_as_conv_operand(bool as_operand) { input_grad_as_conv_operand_ = as_operand; }
  /// Note [BatchNorm and ReLU] (mirror/ops.h): a layer that can apply the ReLU reading its
  /// output in its own passes, and a ReLU layer that can leave its work to its producer.
  /// Sequential pairs a producer with its only reader: the producer applies the ReLU forward and
  /// its mask backward (fuses_relu), the reader passes values and gradients through
  /// (relu_done_by_producer).
  virtual bool can_fuse_relu() const { return false; }
  virtual bool is_relu() const { return false; }
  bool fuses_relu() const { return fuses_relu_; }
  void set_fuses_relu(bool fuses) { fuses_relu_ = fuses; }
  bool relu_done_by_producer() const { return relu_done_by_producer_; }
  void set_relu_done_by_producer(bool done) { relu_done_by_producer_ = done; }
  /// Note [Spec initializers] (nn/init.h): the initializer a spec gives parameter `what`
  /// ("kernel", "bias", "depthwise", "pointwise"), a canonical {"class_name", "config"}; set
  /// before build, which draws it (init::kernel, init::bias). Null: the layer's own default.
  void set_initializer(const std::string& what, nlohmann::json initializer) {
    initializers_[what] = std::move(initializer);
  }
  const nlohmann::json& initializer(const std::string& what) const {
    static const nlohmann::json none;
    return initializers_.contains(what) ? initializers_[what] : none;
  }

 private:
  nlohmann::json initializers_ = nlohmann::json::object();
  std::string name_;
  bool input_grad_needed_ = true;
  bool blocked_output_allowed_ = false;
  bool relu_masked_by_reader_ = false;
  bool masks_input_relu_ = false;
  bool fuses_relu_ = false;
  bool relu_done_by_producer_ = false;
  bool input_grad_as_conv_operand_ = false;
};

/// A layer with two or more inputs (Add, Concatenate). The single-input entry points throw; a
/// model graph calls the *_inputs ones with the inputs in the order the spec lists them.
class MergeLayer : public Layer {
 public:
  /// `names` are the producing layers' names (for errors that name both sides of a mismatch).
  virtual Shape build_inputs(const std::vector<Shape>& input_shapes,
                             const std::vector<std::string>& names, DType dtype, Device device) = 0;
  /// Creates random parameters after build_inputs, from the model's one generator (Sequential
  /// calls it in layer order, like build); most merges have none.
  virtual void init_parameters(DType dtype, Device device, InitRng& rng) {}
  virtual Tensor forward_inputs(const std::vector<Tensor>& xs, ForwardContext& ctx) = 0;
  /// One gradient per input (they may share storage with `dy` and with each other).
  virtual std::vector<Tensor> backward_inputs(const Tensor& dy) = 0;

  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) final;
  Tensor forward(const Tensor& x, ForwardContext& ctx) final;
  Tensor backward(const Tensor& dy) final;
};

}  // namespace mirror::nn
