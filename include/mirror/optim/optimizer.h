// defines: Optimizer (per-parameter state created lazily on the parameter's device, named state
// for checkpoints, step count), SGD, Adam, AdamW, and make_optimizer (a factory by name).
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
  /// Updates one parameter at 1-based step `step`; `slots` holds slot_names() in order.
  virtual void update(nn::Parameter& p, std::vector<Tensor>& slots, double lr,
                      std::int64_t step) = 0;

 private:
  std::vector<Tensor>& slots_for(const nn::Parameter& p);

  std::int64_t steps_ = 0;
  std::unordered_map<std::string, std::vector<Tensor>> slots_;  // parameter name -> slots
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
  void update(nn::Parameter& p, std::vector<Tensor>& slots, double lr, std::int64_t step) override;

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
  void update(nn::Parameter& p, std::vector<Tensor>& slots, double lr, std::int64_t step) override;

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
