// Optimizer state handling (lazy slots, named state, checkpoint restore) and SGD/Adam/AdamW.
#include "mirror/optim/optimizer.h"

#include <algorithm>

#include "mirror/ops.h"

namespace mirror::optim {

// ---------------------------------------------------------------- Optimizer

void Optimizer::check_grad(const nn::Parameter* p) const {
  MIRROR_CHECK(p != nullptr && p->value.defined() && p->grad.defined(), InvalidArgument,
               name() + " step: parameter '" + (p ? p->name : std::string("null")) +
                   "' has no value or gradient; build the model before stepping");
}

void Optimizer::step(const std::vector<nn::Parameter*>& params, double lr) {
  const std::int64_t next = steps_ + 1;
  for (nn::Parameter* p : params) {
    check_grad(p);
    update(p->value, p->grad, slots_for(*p), lr, next);
  }
  steps_ = next;
}

// Note [Fused update]: the strategy's gradients already live back to back in one flat buffer per
// bucket. step_groups keeps the parameters' values and the optimizer's slots (Adam's m and v,
// SGD's momentum) in flat buffers of the same layout, so one update call per bucket covers every
// parameter in it: one vectorised loop over value, gradient and slots instead of one dispatch
// per parameter. Each parameter's value and each named slot becomes a view of its flat buffer,
// so the model, state() and checkpoints see the same tensors, names and bytes as before. The
// update is element-wise, so the same elements see the same operations in the same order:
// bitwise what step() computes. Whoever replaces a view (load_state, a Tensor assigned to
// p.value) is noticed by pointer at the next step and copied back in.
void Optimizer::step_groups(const std::vector<FlatGroup>& groups, double lr) {
  const std::int64_t next = steps_ + 1;
  for (const FlatGroup& g : groups) {
    for (const nn::Parameter* p : g.params) check_grad(p);
  }
  if (!same_groups(groups)) make_flat(groups);
  for (std::size_t k = 0; k < groups.size(); ++k) {
    Flat& flat = flats_[k];
    if (flat.params.empty()) continue;
    bind_flat(flat, groups[k]);
    update(flat.value, flat.grad, flat.slots, lr, next);
  }
  steps_ = next;
}

bool Optimizer::same_groups(const std::vector<FlatGroup>& groups) const {
  if (flats_.size() != groups.size()) return false;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const Flat& f = flats_[k];
    const FlatGroup& g = groups[k];
    if (f.offsets != g.offsets || f.params.size() != g.params.size() ||
        (!f.params.empty() && f.grad.raw_data() != g.grad.raw_data())) {
      return false;
    }
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      if (f.params[i] != g.params[i]) return false;
    }
  }
  return true;
}

namespace {

const void* element(const Tensor& flat, std::int64_t offset) {
  return static_cast<const char*>(flat.raw_data()) +
         static_cast<std::size_t>(offset) * dtype_size(flat.dtype());
}

}  // namespace

void Optimizer::make_flat(const std::vector<FlatGroup>& groups) {
  flats_.clear();
  const std::vector<std::string> names = slot_names();
  for (const FlatGroup& g : groups) {
    Flat f;
    MIRROR_CHECK(g.offsets.size() == g.params.size(), InvalidArgument,
                 name() + " step_groups: " + std::to_string(g.params.size()) + " parameters but " +
                     std::to_string(g.offsets.size()) + " offsets");
    std::int64_t numel = 0;
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const nn::Parameter& p = *g.params[i];
      MIRROR_CHECK(g.offsets[i] == numel && g.grad.defined() && p.value.dtype() == g.grad.dtype() &&
                       p.value.device() == g.grad.device() &&
                       p.grad.raw_data() == element(g.grad, numel),
                   InvalidArgument,
                   name() + " step_groups: parameter '" + p.name +
                       "' is not the next gradient view in its group's flat buffer (offset " +
                       std::to_string(g.offsets[i]) + ", expected " + std::to_string(numel) +
                       "); the groups must follow the gradient buckets' layout");
      numel += p.value.numel();
      f.params.push_back(&p);
    }
    f.offsets = g.offsets;
    if (!f.params.empty()) {
      MIRROR_CHECK(g.grad.numel() >= numel, InvalidArgument,
                   name() + " step_groups: flat gradient " + g.grad.str() +
                       " is shorter than its " + std::to_string(numel) + " parameter elements");
      f.grad = g.grad.view(0, {numel});
      f.value = Tensor::empty({numel}, g.grad.dtype(), g.grad.device());
      for (std::size_t s = 0; s < names.size(); ++s) {
        f.slots.push_back(Tensor::zeros({numel}, g.grad.dtype(), g.grad.device()));
      }
    }
    flats_.push_back(std::move(f));
  }
}

void Optimizer::bind_flat(Flat& flat, const FlatGroup& group) {
  for (std::size_t i = 0; i < group.params.size(); ++i) {
    nn::Parameter& p = *group.params[i];
    const std::int64_t off = flat.offsets[i];
    MIRROR_CHECK(p.grad.raw_data() == element(flat.grad, off), InvalidArgument,
                 name() + " step_groups: the gradient of '" + p.name +
                     "' is no longer a view of its group's flat buffer");
    if (p.value.raw_data() != element(flat.value, off)) {
      Tensor view = flat.value.view(off, p.value.shape());
      view.copy_from(p.value);
      p.value = view;
    }
    std::vector<Tensor>& slots = slots_[p.name];
    slots.resize(flat.slots.size());
    for (std::size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].defined() && slots[s].raw_data() == element(flat.slots[s], off)) continue;
      Tensor view = flat.slots[s].view(off, p.value.shape());
      if (slots[s].defined()) {
        view.copy_from(slots_for(p)[s]);  // restored: validated and moved like step()'s
      } else {
        ops::fill(view, 0.0);  // a new slot starts at zero, as in slots_for
      }
      slots[s] = view;
    }
  }
}

std::vector<Tensor>& Optimizer::slots_for(const nn::Parameter& p) {
  std::vector<Tensor>& slots = slots_[p.name];
  const std::vector<std::string> names = slot_names();
  if (slots.size() != names.size()) slots.resize(names.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    Tensor& s = slots[i];
    if (!s.defined()) {
      // Lazily, on the parameter's device: state is born where it is used.
      s = Tensor::zeros(p.value.shape(), p.value.dtype(), p.value.device());
      continue;
    }
    if (s.device() == p.value.device() && s.dtype() == p.value.dtype() &&
        s.shape() == p.value.shape()) {
      continue;  // the steady state: no work, no allocation
    }
    // Restored from a checkpoint: validate, then move/cast onto the parameter's device.
    MIRROR_CHECK(s.numel() == p.value.numel(), InvalidArgument,
                 name() + " state '" + p.name + "/" + names[i] + "' is " + s.str() +
                     " but the parameter is " + p.value.str() +
                     "; the checkpoint belongs to a different model");
    Tensor moved = s.to(p.value.device()).reshape(p.value.shape());
    if (moved.dtype() != p.value.dtype()) moved = ops::cast(moved, p.value.dtype());
    s = moved;
  }
  return slots;
}

State Optimizer::state() const {
  State out;
  const std::vector<std::string> names = slot_names();
  for (const auto& [param, slots] : slots_) {
    for (std::size_t i = 0; i < slots.size() && i < names.size(); ++i) {
      if (slots[i].defined()) out[param + "/" + names[i]] = slots[i];
    }
  }
  out["step"] = Tensor::from_vector(std::vector<std::int64_t>{steps_}, {1});
  return out;
}

void Optimizer::load_state(const State& state) {
  const auto it = state.find("step");
  MIRROR_CHECK(it != state.end() && it->second.defined() && it->second.dtype() == DType::kInt64 &&
                   it->second.numel() == 1,
               InvalidArgument, name() + " load_state: expected an int64 [1] entry 'step'");
  const std::int64_t steps = it->second.to_vector<std::int64_t>()[0];
  MIRROR_CHECK(steps >= 0, InvalidArgument,
               name() + " load_state: negative step " + std::to_string(steps));
  const std::vector<std::string> names = slot_names();
  std::unordered_map<std::string, std::vector<Tensor>> slots;
  for (const auto& [key, tensor] : state) {
    if (key == "step") continue;
    const auto slash = key.rfind('/');
    const std::string slot = slash == std::string::npos ? key : key.substr(slash + 1);
    const auto pos = std::find(names.begin(), names.end(), slot);
    MIRROR_CHECK(slash != std::string::npos && pos != names.end() && tensor.defined(),
                 InvalidArgument,
                 name() + " load_state: unexpected entry '" + key +
                     "'; was the state saved by a different optimizer?");
    auto& s = slots[key.substr(0, slash)];
    s.resize(names.size());
    s[static_cast<std::size_t>(pos - names.begin())] = tensor.clone();  // never alias the caller
  }
  slots_ = std::move(slots);
  steps_ = steps;
}

// ---------------------------------------------------------------- SGD

SGD::SGD(double momentum, bool nesterov, double weight_decay)
    : momentum_(momentum), weight_decay_(weight_decay), nesterov_(nesterov) {
  MIRROR_CHECK(momentum >= 0.0 && weight_decay >= 0.0, InvalidArgument,
               "sgd: momentum and weight_decay must be >= 0, got " + std::to_string(momentum) +
                   " and " + std::to_string(weight_decay));
  MIRROR_CHECK(!nesterov || momentum > 0.0, InvalidArgument,
               "sgd: Nesterov momentum requires momentum > 0");
}

std::vector<std::string> SGD::slot_names() const {
  if (momentum_ > 0.0) return {"momentum"};
  return {};
}

void SGD::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& slots, double lr,
                 std::int64_t) {
  Tensor none;
  ops::sgd_update(value, grad, slots.empty() ? none : slots[0], lr, momentum_, nesterov_,
                  weight_decay_);
}

nlohmann::json SGD::config() const {
  return {{"momentum", momentum_}, {"nesterov", nesterov_}, {"weight_decay", weight_decay_}};
}

// ---------------------------------------------------------------- Adam / AdamW

Adam::Adam(double beta1, double beta2, double eps, double weight_decay, bool decoupled)
    : beta1_(beta1), beta2_(beta2), eps_(eps), weight_decay_(weight_decay), decoupled_(decoupled) {
  MIRROR_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0 && eps >= 0.0 &&
                   weight_decay >= 0.0,
               InvalidArgument,
               name() + ": expected beta1, beta2 in [0, 1), eps >= 0, weight_decay >= 0; got " +
                   std::to_string(beta1) + ", " + std::to_string(beta2) + ", " +
                   std::to_string(eps) + ", " + std::to_string(weight_decay));
}

void Adam::update(Tensor& value, const Tensor& grad, std::vector<Tensor>& slots, double lr,
                  std::int64_t step) {
  ops::adam_update(value, grad, slots[0], slots[1], lr, beta1_, beta2_, eps_, weight_decay_,
                   decoupled_, step);
}

nlohmann::json Adam::config() const {
  return {{"beta1", beta1_}, {"beta2", beta2_}, {"eps", eps_}, {"weight_decay", weight_decay_}};
}

// ---------------------------------------------------------------- factory

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, const OptimizerOptions& o) {
  const auto wd = [&](double fallback) { return o.weight_decay < 0 ? fallback : o.weight_decay; };
  if (name == "sgd") return std::make_unique<SGD>(o.momentum, o.nesterov, wd(0.0));
  if (name == "adam") return std::make_unique<Adam>(o.beta1, o.beta2, o.eps, wd(0.0));
  if (name == "adamw") return std::make_unique<AdamW>(o.beta1, o.beta2, o.eps, wd(0.01));
  throw InvalidArgument("unknown optimizer '" + name + "': expected sgd, adam or adamw");
}

std::unique_ptr<Optimizer> make_optimizer_from_json(const nlohmann::json& config) {
  MIRROR_CHECK(config.is_object() && config.contains("name") && config["name"].is_string(),
               InvalidArgument,
               "optimizer config must be an object with a string \"name\", got " + config.dump());
  OptimizerOptions o;
  try {
    o.momentum = config.value("momentum", o.momentum);
    o.nesterov = config.value("nesterov", o.nesterov);
    o.weight_decay = config.value("weight_decay", o.weight_decay);
    o.beta1 = config.value("beta1", o.beta1);
    o.beta2 = config.value("beta2", o.beta2);
    o.eps = config.value("eps", o.eps);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("optimizer config " + config.dump() + ": " + e.what());
  }
  return make_optimizer(config["name"].get<std::string>(), o);
}

}  // namespace mirror::optim
