// defines: Optimizer (per-parameter state created lazily on the parameter's device, named state
// for checkpoints, step count, the update fused per gradient bucket through FlatGroup), SGD,
// Adam, AdamW, and make_optimizer (a factory by name).
//
// The update formulas are PyTorch's (torch.optim.SGD / Adam / AdamW); the element-wise math is
// in ops::sgd_update / ops::adam_update, shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/nn/layer.h"
#include "mirror/tensor.h"

namespace mirror::optim {

/// Named optimizer state, sorted by name: "<param>/<slot>" tensors (e.g.
/// "dense_1/kernel/adam_m") on the parameters' devices, plus "step", an int64 [1] CPU tensor.
using State = std::map<std::string, Tensor>;

/// Parameters whose gradients are views of one flat buffer, back to back in `offsets` order with
/// no gaps (a gradient bucket, Note [Bucket assignment]); one dtype, one device.
struct FlatGroup {
  std::vector<nn::Parameter*> params;
  std::vector<std::int64_t> offsets;  // element offset of each parameter's gradient in `grad`
  Tensor grad;                        // the flat gradient buffer (may be longer than the group)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// "sgd", "adam", "adamw".
  virtual std::string name() const = 0;
  /// Hyper-parameters (without the learning rate, which step() receives).
  virtual nlohmann::json config() const = 0;

  /// Applies one update with learning rate `lr` to every parameter from its current grad, then
  /// increments steps(). Parameters are matched to their state by name, so the vector may be
  /// rebuilt between calls. Throws InvalidArgument for a parameter without a gradient.
  void step(const std::vector<nn::Parameter*>& params, double lr);
  /// The same update, fused per group (Note [Fused update]): one vectorised pass per group over
  /// flat parameter, gradient and slot buffers in the gradients' layout. The first call (and a
  /// call with other groups) makes each parameter's value a view of its group's flat value
  /// buffer and each slot a view of a flat slot buffer; state() names do not change. Bitwise the
  /// same parameters and state as step() with the same parameters.
  void step_groups(const std::vector<FlatGroup>& groups, double lr);
  /// Completed steps (Adam's bias correction uses steps() + 1 for the next step).
  std::int64_t steps() const { return steps_; }

  /// The live state (the tensors alias it: copy them to keep a snapshot across steps).
  State state() const;
  /// Restores what state() returned (e.g. read from a checkpoint; tensors on any device are
  /// moved to their parameter's device at the next step). Throws InvalidArgument for a name
  /// this optimizer does not keep or a missing/invalid "step".
  void load_state(const State& state);
  /// The slot names this optimizer keeps per parameter (e.g. {"adam_m", "adam_v"}); a
  /// checkpoint is complete only with every one of them for every parameter.
  virtual std::vector<std::string> slot_names() const = 0;

 protected:
  /// Updates `value` (one parameter, or a flat group of them) from `grad` at 1-based step
  /// `step`; `slots` holds slot_names() in order, shaped like `value`.
  virtual void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& slots, double lr,
                      std::int64_t step) = 0;

 private:
  /// One group's flat buffers (Note [Fused update]).
  struct Flat {
    std::vector<const nn::Parameter*> params;
    std::vector<std::int64_t> offsets;
    Tensor value, grad;         // value: owned here; grad: the caller's buffer, [numel]
    std::vector<Tensor> slots;  // slot_names() order, [numel]
  };

  void check_grad(const nn::Parameter* p) const;
  std::vector<Tensor>& slots_for(const nn::Parameter& p);
  bool same_groups(const std::vector<FlatGroup>& groups) const;
  void make_flat(const std::vector<FlatGroup>& groups);
  void bind_flat(Flat& flat, const FlatGroup& group);

  std::int64_t steps_ = 0;
  std::unordered_map<std::string, std::vector<Tensor>> slots_;  // parameter name -> slots
  std::vector<Flat> flats_;                                     // step_groups' groups
};

/// torch.optim.SGD: g = grad + wd*p; b = momentum*b + g (b = g at the first step);
/// g = nesterov ? g + momentum*b : b; p -= lr*g. Slot "momentum" when momentum > 0.
class SGD : public Optimizer {
 public:
  explicit SGD(double momentum = 0.0, bool nesterov = false, double weight_decay = 0.0);
  std::string name() const override { return "sgd"; }
  nlohmann::json config() const override;

 protected:
  std::vector<std::string> slot_names() const override;
  void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& slots, double lr,
              std::int64_t step) override;

 private:
  double momentum_, weight_decay_;
  bool nesterov_;
};

/// torch.optim.Adam (weight_decay is L2: added to the gradient) or, with decoupled = true,
/// torch.optim.AdamW (p *= 1 - lr*wd before the Adam step). Slots "adam_m", "adam_v".
class Adam : public Optimizer {
 public:
  explicit Adam(double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
                double weight_decay = 0.0, bool decoupled = false);
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  nlohmann::json config() const override;

 protected:
  std::vector<std::string> slot_names() const override { return {"adam_m", "adam_v"}; }
  void update(Tensor& value, const Tensor& grad, std::vector<Tensor>& slots, double lr,
              std::int64_t step) override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
};

/// AdamW with PyTorch's default weight decay 0.01.
class AdamW : public Adam {
 public:
  explicit AdamW(double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
                 double weight_decay = 0.01)
      : Adam(beta1, beta2, eps, weight_decay, true) {}
};

/// Hyper-parameters for make_optimizer; fields an optimizer does not use are ignored.
/// weight_decay < 0 means "the optimizer's default" (0 for sgd/adam, 0.01 for adamw).
struct OptimizerOptions {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = -1.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};
/// "sgd", "adam" or "adamw"; throws InvalidArgument naming the choices otherwise.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name,
                                          const OptimizerOptions& options = {});
/// The same from {"name": ..., <options>} (the shape config() + name produce).
std::unique_ptr<Optimizer> make_optimizer_from_json(const nlohmann::json& config);

}  // namespace mirror::optim
