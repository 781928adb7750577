// Checkpoints of a training run: rank 0 writes weights + optimizer state + position; on resume
// rank 0 reads the newest valid checkpoint and broadcasts its bytes, so every replica on every
// node restores the same state (no shared file system needed).
#include <cstdio>
#include <filesystem>

#include "mirror/error.h"
#include "mirror/optim/optimizer.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

constexpr const char* kOptimizerPrefix = "optimizer/";

std::string meta(const Metadata& m, const std::string& key) {
  auto it = m.find(key);
  MIRROR_CHECK(it != m.end(), DataError, "checkpoint metadata lacks '" + key + "'");
  return it->second;
}

}  // namespace

bool Trainer::Impl::same_model(const std::string& stored) const {
  if (stored == task.model_description) return true;
  if (!from_config) return false;
  // mirror-train's descriptions are model specs: an older spelling (such as the legacy
  // {"name": "cnn", ...}) of the same architecture reads back to the same canonical form.
  try {
    return nn::ModelSpec::from_json(nlohmann::json::parse(stored), "checkpoint model")
               .to_json()
               .dump() == task.model_description;
  } catch (const std::exception&) {
    return false;
  }
}

void Trainer::Impl::save_checkpoint(const StartPoint& next) {
  if (!is_root() || !checkpoints) return;
  auto span = trace.span("checkpoint", "io");
  NamedTensors tensors;
  for (nn::Parameter* p : strategy->model(0).parameters()) tensors[p->name] = p->value;
  for (auto& [name, t] : strategy->optimizer(0).state()) tensors[kOptimizerPrefix + name] = t;
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
  checkpoints->save(next.global_step, tensors, m);
}

StartPoint Trainer::Impl::restore() {
  if (config.resume.empty()) return {};
  // Rank 0 finds and validates the newest valid checkpoint, then broadcasts its bytes.
  std::string bytes;
  std::string found;
  if (is_root()) {
    // A mistyped path must not silently start a fresh run (the manager would create it).
    MIRROR_CHECK(std::filesystem::is_directory(config.resume), InvalidArgument,
                 "--resume " + config.resume + ": no such folder");
    CheckpointManager reader(config.resume, config.keep);
    if (auto ck = reader.latest_valid()) {
      Metadata metadata = ck->file.metadata;
      metadata.erase(kChecksumKey);  // the encoder computes it afresh
      bytes = encode_safetensors(ck->file.tensors, metadata);
      found = ck->path.string();
    }
  }
  std::int64_t size = static_cast<std::int64_t>(bytes.size());
  runtime.broadcast_bytes(std::as_writable_bytes(std::span<std::int64_t, 1>(&size, 1)), 0);
  if (size == 0) {
    if (is_root())
      progress.message("[mirror] --resume " + config.resume +
                       ": no valid checkpoint there; starting fresh");
    return {};
  }
  bytes.resize(static_cast<std::size_t>(size));
  runtime.broadcast_bytes(std::as_writable_bytes(std::span<char>(bytes.data(), bytes.size())), 0);
  const SafetensorsFile file = decode_safetensors(bytes, "checkpoint from " + config.resume);

  const Metadata& m = file.metadata;
  MIRROR_CHECK(same_model(meta(m, "mirror.model")), InvalidArgument,
               "checkpoint in " + config.resume + " holds model " + meta(m, "mirror.model") +
                   ", this run builds " + task.model_description +
                   "; resume with the same model (or start a fresh --checkpoint-dir)");
  MIRROR_CHECK(meta(m, "mirror.data_checksum") == checksum, InvalidArgument,
               "checkpoint was trained on other data (checksum " + meta(m, "mirror.data_checksum") +
                   ", now " + checksum +
                   "); resume with the same --data, --train-limit and --test-limit");
  MIRROR_CHECK(std::stoll(meta(m, "mirror.global_batch")) == global_batch, InvalidArgument,
               "checkpoint used global batch " + meta(m, "mirror.global_batch") + ", this run " +
                   std::to_string(global_batch) +
                   ": keep the global batch when resuming (other world sizes are fine)");

  optim::State opt_state;
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind(kOptimizerPrefix, 0) == 0)
      opt_state[name.substr(std::string(kOptimizerPrefix).size())] = t;
  }
  for (int r = 0; r < strategy->local_replicas(); ++r) {
    for (nn::Parameter* p : strategy->model(r).parameters()) {
      auto it = file.tensors.find(p->name);
      MIRROR_CHECK(it != file.tensors.end(), DataError,
                   "checkpoint lacks parameter '" + p->name + "'");
      check_shape(it->second, p->value.shape(), p->name.c_str());
      p->value.copy_from(it->second);
    }
    strategy->optimizer(r).load_state(opt_state);
  }
  StartPoint s;
  s.epoch = std::stoi(meta(m, "mirror.epoch"));
  s.step_in_epoch = std::stoll(meta(m, "mirror.step_in_epoch"));
  s.global_step = std::stoll(meta(m, "mirror.step"));
  strategy->check_replicas_identical();
  if (is_root()) {
    progress.message("[mirror] resumed from " + found + " at epoch " + std::to_string(s.epoch + 1) +
                     ", step " + std::to_string(s.step_in_epoch) + " (global step " +
                     std::to_string(s.global_step) + ")");
  }
  return s;
}

}  // namespace mirror::train
