// Checkpoints of a training run: rank 0 writes weights + optimizer state + position; on resume
// rank 0 reads the newest valid checkpoint and broadcasts its bytes, so every replica on every
// node restores the same state (no shared file system needed). Every rank then checks that the
// checkpoint is complete for this run (docs/checkpoint.md, "Resuming") before loading it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "mirror/error.h"
#include "mirror/optim/optimizer.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOptimizerPrefix = "optimizer/";
constexpr std::size_t kMaxProblemsListed = 8;

std::string meta(const Metadata& m, const std::string& key) {
  auto it = m.find(key);
  MIRROR_CHECK(it != m.end(), DataError, "checkpoint metadata lacks '" + key + "'");
  return it->second;
}

/// A metadata value that must be an integer >= `min`: DataError naming the key and the value
/// (never a bare "stoll").
template <class Int>
Int meta_int(const Metadata& m, const std::string& key, Int min) {
  const std::string text = meta(m, key);
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MIRROR_CHECK(
      !text.empty() && ec == std::errc() && end == text.data() + text.size() && value >= min,
      DataError,
      "checkpoint metadata '" + key + "' is '" + text + "': expected an integer >= " +
          std::to_string(min) + " (the checkpoint was edited or written by another tool)");
  return value;
}

/// The run configuration stored in "mirror.config" (an object; empty when absent).
nlohmann::json meta_config(const Metadata& m) {
  const auto it = m.find("mirror.config");
  if (it == m.end()) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  MIRROR_CHECK(j.is_object(), DataError,
               "checkpoint metadata 'mirror.config' is not a JSON object: '" +
                   it->second.substr(0, 80) + "'");
  return j;
}

std::string describe(const Tensor& t) {
  std::string out = std::string(safetensors_dtype_name(t.dtype())) + " [";
  for (std::size_t i = 0; i < t.shape().size(); ++i)
    out += (i ? ", " : "") + std::to_string(t.shape()[i]);
  return out + "]";
}

/// What this run needs from a checkpoint: every parameter, "optimizer/step", and (once the
/// optimizer has stepped) every slot of every parameter, each with the parameter's dtype/shape.
struct Layout {
  std::map<std::string, const Tensor*> required;  // name -> a tensor of the expected type
  std::set<std::string> optional;                 // slots, when the optimizer has not stepped
};

Layout expected_layout(nn::Sequential& model, const optim::Optimizer& opt, bool slots_required,
                       bool with_optimizer) {
  Layout l;
  for (nn::Parameter* p : model.parameters()) {
    l.required[p->name] = &p->value;
    if (!with_optimizer) continue;
    for (const std::string& slot : opt.slot_names()) {
      const std::string name = kOptimizerPrefix + p->name + "/" + slot;
      if (slots_required)
        l.required[name] = &p->value;
      else
        l.optional.insert(name);
    }
  }
  // Non-trained state (BatchNorm moving statistics) under its layer's name.
  for (nn::Buffer* b : model.buffers()) l.required[b->name] = &b->value;
  return l;
}

/// Every way `tensors` falls short of `layout`: missing, unknown, mistyped or non-finite
/// tensors, each naming the tensor.
std::vector<std::string> layout_problems(const NamedTensors& tensors, const Layout& layout,
                                         bool with_optimizer) {
  std::vector<std::string> problems;
  for (const auto& [name, want] : layout.required) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      problems.push_back("missing tensor '" + name + "' (" + describe(*want) + ")");
    } else if (it->second.dtype() != want->dtype() || it->second.shape() != want->shape()) {
      problems.push_back("tensor '" + name + "' is " + describe(it->second) + ", this run needs " +
                         describe(*want));
    } else if (const std::int64_t i = first_non_finite(it->second); i >= 0) {
      problems.push_back(
          "tensor '" + name + "' holds a non-finite value (NaN or infinity) at element " +
          std::to_string(i) + "; the run had diverged: resume from an earlier checkpoint");
    }
  }
  const std::string step_key = std::string(kOptimizerPrefix) + "step";
  for (const auto& [name, t] : tensors) {
    if (layout.required.count(name) || name == step_key) continue;
    const bool optimizer_tensor = name.rfind(kOptimizerPrefix, 0) == 0;
    if (optimizer_tensor && (!with_optimizer || layout.optional.count(name))) continue;
    problems.push_back("unknown tensor '" + name + "' (" + describe(t) +
                       "): not a parameter or optimizer slot of this run");
  }
  return problems;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kMaxProblemsListed; ++i) out += "\n  " + items[i];
  if (items.size() > kMaxProblemsListed)
    out += "\n  ... and " + std::to_string(items.size() - kMaxProblemsListed) + " more";
  return out;
}

/// The optimizer's completed steps from "optimizer/step" (int64 [1], >= 0).
std::int64_t optimizer_steps(const NamedTensors& tensors) {
  const auto it = tensors.find(std::string(kOptimizerPrefix) + "step");
  MIRROR_CHECK(
      it != tensors.end() && it->second.dtype() == DType::kInt64 && it->second.numel() == 1,
      DataError,
      std::string("missing or mistyped tensor 'optimizer/step' (expected I64 [1], found ") +
          (it == tensors.end() ? std::string("none") : describe(it->second)) + ")");
  const std::int64_t steps = it->second.to_vector<std::int64_t>()[0];
  MIRROR_CHECK(steps >= 0, DataError,
               "tensor 'optimizer/step' is " + std::to_string(steps) + ", expected >= 0");
  return steps;
}

/// Where the run goes on: the checkpoint's position, moved to the same number of samples into
/// the epoch when the global batch changed (--allow-config-change).
StartPoint position_of(const Metadata& m, std::int64_t global_batch, std::int64_t steps_per_epoch) {
  StartPoint s;
  s.epoch = meta_int<int>(m, "mirror.epoch", 0);
  s.step_in_epoch = meta_int<std::int64_t>(m, "mirror.step_in_epoch", 0);
  s.global_step = meta_int<std::int64_t>(m, "mirror.step", 0);
  const std::int64_t old_batch = meta_int<std::int64_t>(m, "mirror.global_batch", 1);
  if (old_batch != global_batch) {
    s.step_in_epoch = s.step_in_epoch * old_batch / global_batch;
    if (s.step_in_epoch >= steps_per_epoch) s = {s.epoch + 1, 0, s.global_step};
  }
  MIRROR_CHECK(s.step_in_epoch < steps_per_epoch, DataError,
               "checkpoint metadata 'mirror.step_in_epoch' is " + std::to_string(s.step_in_epoch) +
                   " but an epoch has " + std::to_string(steps_per_epoch) + " steps");
  return s;
}

/// Copies the (validated) weights into every local replica, and the optimizer state unless the
/// optimizer changed (then it starts fresh).
void load_tensors(dist::MirroredStrategy& strategy, const NamedTensors& tensors,
                  bool with_optimizer) {
  optim::State opt_state;
  for (const auto& [name, t] : tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0)
      opt_state[name.substr(std::string(kOptimizerPrefix).size())] = t;
  }
  for (int r = 0; r < strategy.local_replicas(); ++r) {
    for (nn::Parameter* p : strategy.model(r).parameters()) p->value.copy_from(tensors.at(p->name));
    for (nn::Buffer* b : strategy.model(r).buffers()) b->value.copy_from(tensors.at(b->name));
    if (with_optimizer) strategy.optimizer(r).load_state(opt_state);
  }
}

}  // namespace

void Trainer::Impl::restore_loss_scale(const Metadata& m) {
  // A checkpoint of another precision (--allow-config-change), or from before mixed precision,
  // keeps the initial scale.
  const auto precision = m.find("mirror.precision");
  if (precision == m.end() || precision->second != config.precision) return;
  LossScale s;
  const std::string text = meta(m, "mirror.loss_scale");
  char* end = nullptr;
  s.scale = std::strtod(text.c_str(), &end);
  MIRROR_CHECK(!text.empty() && end == text.c_str() + text.size(), DataError,
               "checkpoint metadata 'mirror.loss_scale' is '" + text + "': expected a number");
  s.good_steps = meta_int<std::int64_t>(m, "mirror.loss_scale_good_steps", 0);
  try {
    strategy->set_loss_scale(s);
  } catch (const InvalidArgument& e) {
    throw DataError(std::string("checkpoint metadata: ") + e.what());
  }
}

bool Trainer::Impl::same_model(const std::string& stored) const {
  if (stored == task.model_description) return true;
  if (!from_config) return false;
  // mirror-train's descriptions are model specs: an older spelling (such as the legacy
  // {"name": "cnn", ...}) of the same architecture reads back to the same canonical form. The
  // name is not the architecture (a spec file's checkpoints of older builds carry its stem).
  try {
    auto canonical = [](const std::string& text) {
      nlohmann::json j =
          nn::ModelSpec::from_json(nlohmann::json::parse(text), "checkpoint model").to_json();
      j.erase("name");
      j.erase("input_layout");  // how samples are read (Note [Keras's image layout]), not weights
      return j;
    };
    return canonical(stored) == canonical(task.model_description);
  } catch (const std::exception&) {
    return false;
  }
}

void Trainer::Impl::save_checkpoint(const StartPoint& next) {
  if (config.checkpoint_dir.empty()) return;
  // Every replica holds the same BatchNorm moving statistics after every step (Note [Buffers
  // across replicas], distributed/strategy_sync_bn.cpp), so replica 0's are everyone's.
  NamedTensors tensors;
  for (nn::Parameter* p : strategy->model(0).parameters()) tensors[p->name] = p->value;
  for (nn::Buffer* b : strategy->model(0).buffers()) tensors[b->name] = b->value;
  for (auto& [name, t] : strategy->optimizer(0).state()) tensors[kOptimizerPrefix + name] = t;
  // Note [Failed runs] (trainer_fit.cpp): every rank checks its identical replica, so all stop
  // together, and the newest checkpoint on disk stays one that --resume accepts.
  for (const auto& [name, t] : tensors) {
    if (const std::int64_t i = first_non_finite(t); i >= 0) {
      throw JobStopped("training stopped at step " + std::to_string(next.global_step) +
                           ": the checkpoint would hold a non-finite value in '" + name +
                           "' (element " + std::to_string(i) +
                           "), so it was not written; the values overflowed float32: lower --lr "
                           "or scale the data (inputs and targets of order 1 train best)",
                       1, is_root());
    }
  }
  if (!is_root() || !checkpoints) return;
  auto span = trace.span("checkpoint", "io");
  Metadata m;
  m["mirror.version"] = MIRROR_VERSION;
  m["mirror.epoch"] = std::to_string(next.epoch);
  m["mirror.step_in_epoch"] = std::to_string(next.step_in_epoch);
  m["mirror.step"] = std::to_string(next.global_step);
  m["mirror.seed"] = std::to_string(config.seed);
  m["mirror.model"] = task.model_description;
  m["mirror.optimizer"] = strategy->optimizer(0).name();
  m["mirror.global_batch"] = std::to_string(global_batch);
  m["mirror.world_size"] = std::to_string(runtime.world_size());
  m["mirror.world_replicas"] = std::to_string(strategy->world_replicas());
  m["mirror.data_checksum"] = checksum;
  m["mirror.config"] = config.to_json().dump();
  // mirror-predict names the classes of an image folder's model (tools/predict.h).
  if (const auto classes = task.train->class_names(); !classes.empty())
    m["mirror.classes"] = nlohmann::json(classes).dump();
  m["mirror.precision"] = config.precision;
  // Note [Loss scaling]: the scale is a power of two, so %.17g round-trips it exactly.
  char scale[40];
  std::snprintf(scale, sizeof scale, "%.17g", strategy->loss_scale().scale);
  m["mirror.loss_scale"] = scale;
  m["mirror.loss_scale_good_steps"] = std::to_string(strategy->loss_scale().good_steps);
  checkpoints->save(next.global_step, tensors, m);
}

void Trainer::Impl::check_checkpoint_dir() {
  // Note [Foreign checkpoints]: a fresh run saving into a folder that holds another run's
  // checkpoints would prune them (keep-last-K) or, worse, leave newer-numbered ones that a later
  // --resume would pick up. So it is refused unless the run resumes from that very folder or
  // the user asked to overwrite.
  if (!checkpoints) return;
  const auto files = checkpoints->list();
  if (files.empty()) return;
  std::error_code ec;
  const bool resuming_here =
      !config.resume.empty() && fs::equivalent(config.resume, config.checkpoint_dir, ec);
  if (resuming_here) return;
  if (config.overwrite_checkpoints) {
    const std::size_t n = checkpoints->remove_all();
    progress.message("[mirror] --overwrite-checkpoints: deleted " + std::to_string(n) +
                     " checkpoint(s) of an earlier run in " + config.checkpoint_dir);
    return;
  }
  throw InvalidArgument(
      "--checkpoint-dir " + config.checkpoint_dir + " already holds " +
      std::to_string(files.size()) + " checkpoint(s) of another run (newest " +
      files.back().second.filename().string() +
      "); this run would prune or mix with them. Pass --resume " + config.checkpoint_dir +
      " to continue that run, --overwrite-checkpoints to delete them, or use another folder");
}

// Note [Saving where it resumed]: a run resumed with --resume DIR (or --resume-or-start DIR)
// and no --checkpoint-dir saves its checkpoints into DIR, as a preempted user who adds --resume
// to the same command expects (with --checkpoint-every, which alone would need a folder); the
// folder's lock (Note [Checkpoint folder lock]) and Note [Foreign checkpoints] apply to it as
// to a --checkpoint-dir, and --checkpoint-dir still names another folder. Since saving creates
// the folder, whether --resume names one is decided before: check_resume_folder, first in
// open_outputs.
void Trainer::Impl::check_resume_folder() {
  // A mistyped path must not silently start a fresh run (the manager would create it).
  resume_folder_missing = !fs::is_directory(config.resume);
  if (!resume_folder_missing) return;
  std::error_code ec;
  MIRROR_CHECK(!fs::exists(config.resume, ec), InvalidArgument,
               "--resume " + config.resume +
                   ": not a folder; give the checkpoint folder (--checkpoint-dir of the run), "
                   "not a checkpoint file");
  MIRROR_CHECK(config.resume_or_start, InvalidArgument,
               "--resume " + config.resume +
                   ": no such folder (--resume-or-start starts fresh when there is none)");
}

std::string Trainer::Impl::find_checkpoint(std::string& found) {
  if (resume_folder_missing) {  // only --resume-or-start gets here (check_resume_folder)
    progress.message("[mirror] --resume-or-start " + config.resume +
                     ": no such folder; STARTING FRESH from step 0");
    return {};
  }
  const CheckpointScan scan = CheckpointManager(config.resume, 0).scan();
  std::vector<std::string> why;
  for (const auto& [path, reason] : scan.rejected) why.push_back(reason);
  if (scan.found) {
    for (const auto& reason : why)
      std::fprintf(stderr, "mirror: warning: skipping corrupt checkpoint: %s\n", reason.c_str());
    found = scan.found->path.string();
    Metadata metadata = scan.found->file.metadata;
    metadata.erase(kChecksumKey);  // the encoder computes it afresh
    return encode_safetensors(scan.found->file.tensors, metadata);
  }
  const std::string none = scan.files == 0 ? "holds no checkpoint (ckpt-<step>.safetensors)"
                                           : "holds no valid checkpoint: every one of its " +
                                                 std::to_string(scan.files) +
                                                 " checkpoint(s) is unusable:" + joined(why);
  if (config.resume_or_start) {
    progress.message("[mirror] --resume-or-start " + config.resume + " " + none +
                     "\n[mirror] STARTING FRESH from step 0");
    return {};
  }
  throw DataError("--resume " + config.resume + " " + none +
                  "\n(--resume-or-start starts fresh when there is no valid checkpoint)");
}

StartPoint Trainer::Impl::restore() {
  // Rank 0 finds and validates the newest valid checkpoint, then broadcasts its bytes; what it
  // refuses, every rank stops for (Note [Agreed errors], trainer.h).
  std::string bytes;
  std::string found;
  agree_on_setup(runtime, [&] {
    if (is_root()) check_checkpoint_dir();
    if (is_root() && !config.resume.empty()) bytes = find_checkpoint(found);
  });
  if (config.resume.empty()) return {};
  std::int64_t size = static_cast<std::int64_t>(bytes.size());
  runtime.broadcast_bytes(std::as_writable_bytes(std::span<std::int64_t, 1>(&size, 1)), 0);
  if (size == 0) return {};  // --resume-or-start without a checkpoint (rank 0 said so)
  bytes.resize(static_cast<std::size_t>(size));
  runtime.broadcast_bytes(std::as_writable_bytes(std::span<char>(bytes.data(), bytes.size())), 0);
  StartPoint start_at;
  uniform_setup(runtime, [&] {  // every rank checks the same bytes against the same run
    const SafetensorsFile file = decode_safetensors(bytes, "checkpoint from " + config.resume);
    const std::string source = is_root() ? found : "the checkpoint from " + config.resume;
    try {
      start_at = load_checkpoint(file, found);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(source + " cannot be resumed: " + e.what());
    } catch (const DataError& e) {
      throw DataError(source + " cannot be resumed: " + e.what());
    }
  });
  return start_at;
}

std::vector<std::string> Trainer::Impl::config_changes(const Metadata& m) const {
  std::vector<std::string> changes;
  auto differs = [&](const char* what, const std::string& then, const std::string& now) {
    if (then != now) changes.push_back(std::string(what) + " " + then + " -> " + now);
  };
  differs("seed", std::to_string(meta_int<std::uint64_t>(m, "mirror.seed", 0)),
          std::to_string(config.seed));
  differs("optimizer", meta(m, "mirror.optimizer"), strategy->optimizer(0).name());
  differs("global batch", std::to_string(meta_int<std::int64_t>(m, "mirror.global_batch", 1)),
          std::to_string(global_batch));
  // Checkpoints from before mixed precision were float32 runs.
  const auto precision = m.find("mirror.precision");
  differs("precision", precision == m.end() ? "float32" : precision->second, config.precision);
  const nlohmann::json stored = meta_config(m);
  // Checkpoints from before --augment trained without it.
  differs("augment",
          stored.contains("augment") && stored["augment"].is_string()
              ? stored["augment"].get<std::string>()
              : "none",
          config.augment);
  // The photograph recipe changes what the weights were trained on (older checkpoints: none).
  auto recorded = [&](const char* key, const std::string& absent) {
    return stored.contains(key) && stored[key].is_string() ? stored[key].get<std::string>()
                                                           : absent;
  };
  differs("crop", recorded("crop", "none"), config.crop);
  differs("flip",
          stored.contains("flip") && stored["flip"].is_boolean() && stored["flip"].get<bool>()
              ? "on"
              : "off",
          config.flip ? "on" : "off");
  differs("normalize", recorded("normalize", "none"), config.normalize);
  if (stored.contains("lr")) {
    MIRROR_CHECK(
        stored["lr"].is_number(), DataError,
        "checkpoint metadata 'mirror.config' has a non-numeric lr: " + stored["lr"].dump());
    // The rate the steps use: with --lr-scale linear a resume on another replica count (a
    // lost-node restart) changes it although --lr is the same.
    const bool scaled = stored.value("lr_scale_by_replicas", false);
    const double then_scale =
        scaled ? static_cast<double>(meta_int<std::int64_t>(m, "mirror.world_replicas", 1)) : 1.0;
    const double then = stored["lr"].get<double>() * then_scale, now = config.lr * lr_scale;
    const auto rate = [](double lr, double scale, bool linear) {
      const auto replicas = static_cast<long long>(scale);
      return nlohmann::json(lr * scale).dump() +
             (linear ? " (--lr " + nlohmann::json(lr).dump() + " x " + std::to_string(replicas) +
                           (replicas == 1 ? " replica" : " replicas") + ", --lr-scale linear)"
                     : "");
    };
    if (then != now) {
      changes.push_back("lr " + rate(stored["lr"].get<double>(), then_scale, scaled) + " -> " +
                        rate(config.lr, lr_scale, config.lr_scale_by_replicas));
    }
  }
  // What else the update depends on (checkpoints from before these were stored skip them).
  const auto stored_text = [&](const char* key) {
    return stored.contains(key) ? stored[key].dump() : std::string();
  };
  const nlohmann::json now = config.to_json();
  for (const char* key : {"schedule", "warmup_steps", "momentum", "weight_decay"}) {
    if (!stored.contains(key)) continue;
    if (std::string(key) == "momentum" && config.optimizer != "sgd") continue;  // SGD's only
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', ' ');
    differs(name.c_str(), stored_text(key), now[key].dump());
  }
  return changes;
}

StartPoint Trainer::Impl::load_checkpoint(const SafetensorsFile& file, const std::string& found) {
  const Metadata& m = file.metadata;
  MIRROR_CHECK(same_model(meta(m, "mirror.model")), InvalidArgument,
               "it holds model " + meta(m, "mirror.model") + ", this run builds " +
                   task.model_description +
                   "; resume with the same model (or start a fresh --checkpoint-dir)");
  MIRROR_CHECK(meta(m, "mirror.data_checksum") == checksum, InvalidArgument,
               "it was trained on other data (checksum " + meta(m, "mirror.data_checksum") +
                   ", now " + checksum +
                   "); resume with the same --data, --train-limit and --test-limit");
  const StartPoint s = position_of(m, global_batch, train_loaders.front()->steps_per_epoch());
  const std::vector<std::string> changes = config_changes(m);
  MIRROR_CHECK(changes.empty() || config.allow_config_change, InvalidArgument,
               "this run's configuration differs from the checkpoint's:" + joined(changes) +
                   "\nresume with the checkpoint's values, or pass --allow-config-change");
  const bool same_optimizer = meta(m, "mirror.optimizer") == strategy->optimizer(0).name();
  const std::int64_t opt_steps = optimizer_steps(file.tensors);
  const Layout layout =
      expected_layout(strategy->model(0), strategy->optimizer(0), opt_steps > 0, same_optimizer);
  const std::vector<std::string> problems = layout_problems(file.tensors, layout, same_optimizer);
  MIRROR_CHECK(problems.empty(), DataError,
               "it is incomplete or does not fit this run:" + joined(problems));
  if (!changes.empty() && is_root()) {
    progress.message(
        "[mirror] warning: --allow-config-change: resuming with a configuration "
        "that differs from the checkpoint's:" +
        joined(changes) + (same_optimizer ? "" : "\n  (the optimizer starts from fresh state)"));
  }
  load_tensors(*strategy, file.tensors, same_optimizer);
  restore_loss_scale(m);
  strategy->check_replicas_identical();
  if (is_root()) {
    progress.message("[mirror] resumed from " + found + " at epoch " + std::to_string(s.epoch + 1) +
                     ", step " + std::to_string(s.step_in_epoch) + " (global step " +
                     std::to_string(s.global_step) + ")");
  }
  return s;
}

}  // namespace mirror::train
