// The fit loop's observers: the trace spans of each step's phases, the console (progress bar,
// epoch lines, summary), the JSON-lines log, the TensorBoard scalars and the checkpoints.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "mirror/train/tensorboard.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

double per_second(double n, double seconds) { return n / std::max(seconds, 1e-9); }

/// The strategy reports phase durations; they are laid out as spans inside a "step N" span on
/// the main thread's track. Each bucket's all-reduce overlaps backward, so it goes on a track
/// of its own (Note [Trace tracks]): the first "all-reduce" track free at its launch, a new one
/// ("all-reduce 2", ...) when all are busy (buckets in flight at once).
class TraceSteps final : public FitObserver {
 public:
  explicit TraceSteps(TraceRecorder& trace) : trace_(trace) {}
  void on_step(const StepEvent& e) override {
    if (!trace_.enabled()) return;
    const dist::StepTiming& timing = e.result->timing;
    // Note [Step numbering]: the trace, the JSON log and the console count epochs and steps
    // from 1; "step" is the global step (steps done, this one included).
    const nlohmann::json where = {{"epoch", e.epoch + 1}, {"step", e.global_step}};
    const std::pair<const char*, double> phases[] = {{"forward", timing.forward_ms},
                                                     {"backward", timing.backward_ms},
                                                     {"all-reduce wait", timing.exposed_comm_ms},
                                                     {"optimizer", timing.optimizer_ms}};
    // With several local replicas each phase is the slowest replica's, so the phases can add up
    // to more than the step took; then they are shrunk alike to fit before the next step
    // (whose spans start after this call), and "ms" keeps each measured value.
    double sum_us = 0;
    for (const auto& [name, ms] : phases) sum_us += ms * 1000;
    const double room_us = trace_.now_us() - e.compute_start_us;
    const double scale = sum_us > room_us && sum_us > 0 ? std::max(0.0, room_us) / sum_us : 1.0;
    double ts = e.compute_start_us;
    for (const auto& [name, ms] : phases) {
      nlohmann::json args = where;
      args["ms"] = ms;
      trace_.record(name, "step", ts, ms * 1000 * scale, std::move(args));
      ts += ms * 1000 * scale;
    }
    trace_.record("step " + std::to_string(e.global_step), "step", e.compute_start_us,
                  ts - e.compute_start_us, where);
    auto buckets = timing.buckets;
    std::sort(buckets.begin(), buckets.end(),
              [](const auto& a, const auto& b) { return a.launch_ms < b.launch_ms; });
    for (const auto& b : buckets) {
      const double begin = e.compute_start_us + b.launch_ms * 1000;
      const double dur = std::max(0.0, (b.done_ms - b.launch_ms) * 1000);
      nlohmann::json args = where;
      args["bucket"] = b.index;
      trace_.record("all-reduce bucket " + std::to_string(b.index), "comm", begin, dur,
                    std::move(args), comm_track(begin, begin + dur));
    }
  }

 private:
  /// The tid of the first all-reduce track whose last span ended by `begin`.
  int comm_track(double begin, double end) {
    std::size_t lane = 0;
    while (lane < lane_end_.size() && lane_end_[lane] > begin) ++lane;
    if (lane == lane_end_.size()) {
      lane_end_.push_back(0);
      lane_tid_.push_back(trace_.track(lane == 0 ? std::string("all-reduce")
                                                 : "all-reduce " + std::to_string(lane + 1)));
    }
    lane_end_[lane] = end;
    return lane_tid_[lane];
  }

  TraceRecorder& trace_;
  std::vector<double> lane_end_;  // per all-reduce track: where its last span ended (us)
  std::vector<int> lane_tid_;
};

class Console final : public FitObserver {
 public:
  Console(Progress& progress, int epochs) : progress_(progress), epochs_(epochs) {}

  void on_step(const StepEvent& e) override {
    const MetricSums& m = *e.epoch_metrics;
    const double done = static_cast<double>(e.step + 1 - e.first_step);
    const double left = static_cast<double>(e.steps_per_epoch - e.step - 1);
    progress_.step(e.epoch, epochs_, e.step + 1, e.steps_per_epoch,
                   per_second(static_cast<double>(m.count), e.epoch_seconds),
                   e.epoch_seconds / done * left, m);
  }

  void on_epoch(const EpochEvent& e) override {
    char test[128] = "";
    if (e.test) {
      std::snprintf(test, sizeof test, " | test loss %.4f %s", e.test->loss(),
                    e.test->text().c_str());
    }
    // Note [Two rates]: the rate is the training steps' (the progress bar's last figure);
    // the evaluation's time is shown beside it, and the summary's rate covers the whole run.
    char eval[64] = "";
    if (e.test) std::snprintf(eval, sizeof eval, " (evaluation %.1f s)", e.eval_seconds);
    char line[384];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d: loss %.4f %s%s | %.1f s%s, %.0f samples/s training, data wait "
                  "%.2f s",
                  e.epoch + 1, epochs_, e.train.loss(), e.train.text().c_str(), test, e.seconds,
                  eval, per_second(static_cast<double>(e.samples), e.seconds - e.eval_seconds),
                  e.data_wait_seconds);
    progress_.epoch_done(line);
  }

  void on_end(const FitSummary& s) override {
    const bool mse = s.loss == dist::loss_name(dist::LossKind::kMeanSquaredError);
    char head[320];
    // A run stopped by a signal ends inside an epoch: say what that part measured, and mark an
    // earlier evaluation as the last full epoch's.
    const char* when = s.preempted ? " (last full epoch)" : "";
    char test[160] = "";
    if (s.evaluated && mse) {
      std::snprintf(test, sizeof test, "test mse%s: %.4f\ntest mae%s: %.4f\ntest loss%s: %.4f",
                    when, s.test_mse, when, s.test_mae, when, s.test_loss);
    } else if (s.evaluated) {
      std::snprintf(test, sizeof test, "test accuracy%s: %.4f\ntest loss%s: %.4f", when,
                    s.test_accuracy, when, s.test_loss);
    }
    const char* train =
        s.preempted ? "stopped before evaluation; this epoch so far" : "no test data; last epoch";
    char partial[160] = "";
    if (s.steps == 0 && !s.preempted) {
      // A resume at or past --epochs / --max-steps: there are no metrics to report.
      std::snprintf(partial, sizeof partial, "nothing to train: the run resumed at step %lld",
                    static_cast<long long>(s.final_step));
    } else if (s.preempted || !s.evaluated) {
      if (mse) {
        std::snprintf(partial, sizeof partial, "%s: loss %.4f mse %.4f mae %.4f", train,
                      s.train_loss, s.train_mse, s.train_mae);
      } else {
        std::snprintf(partial, sizeof partial, "%s: loss %.4f accuracy %.4f", train, s.train_loss,
                      s.train_accuracy);
      }
    }
    std::snprintf(head, sizeof head, "%s%s%s", partial, *partial && *test ? "\n" : "", test);
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s\nwall time: %.1f s, %.0f samples/s overall (evaluation and checkpoints "
                  "included), %lld steps\n"
                  "replicas: %d (rank 0 devices: %s)\nweights fingerprint: %016llx",
                  head, s.wall_seconds, s.samples_per_second, static_cast<long long>(s.steps),
                  s.world_replicas, s.devices.c_str(),
                  static_cast<unsigned long long>(s.weights_fingerprint));
    progress_.message(line);
  }

 private:
  Progress& progress_;
  int epochs_;
};

// Note [Telemetry failures]: the JSON log, the TensorBoard events and the trace record a run; they
// are not the run. A write that fails (a full disk) prints one warning naming the file and the
// system's reason, that output stops, and training goes on to checkpoint and report. Their paths
// are tried before training (Trainer::Impl::open_outputs), so a wrong path still fails at once
// (exit code 3), and a failed log write leaves no half line behind (MetricsLog::write).

class JsonLog final : public FitObserver {
 public:
  explicit JsonLog(MetricsLog& log) : log_(log) {}

  void on_step(const StepEvent& e) override {
    if (!log_.enabled()) return;
    const dist::StepResult& r = *e.result;
    // Note [Step numbering]; every duration is in ms (docs/metrics.md).
    nlohmann::json j = {{"type", "step"},
                        {"epoch", e.epoch + 1},
                        {"step", e.global_step},
                        {"step_in_epoch", e.step + 1},
                        {"loss", r.loss}};
    for (auto [name, value] : MetricSums::of(e.epoch_metrics->kind, r).named()) j[name] = value;
    j["lr"] = e.lr;
    j["samples_per_s"] = per_second(static_cast<double>(r.count), e.step_seconds);
    j["step_ms"] = e.step_seconds * 1000;
    j["data_wait_ms"] = e.data_wait_seconds * 1000;
    j["compute_ms"] = r.timing.forward_ms + r.timing.backward_ms + r.timing.optimizer_ms;
    j["exposed_comm_ms"] = r.timing.exposed_comm_ms;
    j["skipped"] = r.skipped;
    if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale;  // mixed_float16 only
    write(j);
  }

  void on_epoch(const EpochEvent& e) override {
    if (!log_.enabled()) return;
    nlohmann::json j = {{"type", "epoch"},
                        {"epoch", e.epoch + 1},
                        {"step", e.global_step},
                        {"loss", e.train.loss()}};
    for (auto [name, value] : e.train.named()) j[name] = value;
    if (e.test) {
      j["test_loss"] = e.test->loss();
      for (auto [name, value] : e.test->named()) j[std::string("test_") + name] = value;
    }
    j["epoch_ms"] = e.seconds * 1000;
    j["samples_per_s"] = per_second(static_cast<double>(e.samples), e.seconds);
    j["data_wait_ms"] = e.data_wait_seconds * 1000;
    write(j);
  }

  void on_end(const FitSummary& s) override {
    if (!log_.enabled()) return;
    nlohmann::json j = {{"type", "summary"}, {"loss_kind", s.loss}};
    const bool mse = s.loss == dist::loss_name(dist::LossKind::kMeanSquaredError);
    if (s.evaluated && mse) {
      j["test_mse"] = s.test_mse;
      j["test_mae"] = s.test_mae;
    } else if (s.evaluated) {
      j["test_accuracy"] = s.test_accuracy;
    }
    if (s.evaluated) j["test_loss"] = s.test_loss;
    j["wall_ms"] = s.wall_seconds * 1000;
    j["samples_per_s"] = s.samples_per_second;
    j["steps"] = s.steps;
    j["final_step"] = s.final_step;
    j["replicas"] = s.world_replicas;
    write(j);
  }

 private:
  void write(const nlohmann::json& j) {
    try {
      log_.write(j);
    } catch (const Error& e) {
      warn_telemetry_failure(e, "the JSON log");
      log_ = MetricsLog();  // disabled
    }
  }

  MetricsLog& log_;
};

/// --tensorboard DIR on rank 0: the JSON log's main numbers as scalars, plotted against the
/// global step (Note [Step numbering]); the names are listed in docs/metrics.md.
class TensorBoardScalars final : public FitObserver {
 public:
  explicit TensorBoardScalars(const std::string& dir) {
    try {
      writer_.emplace(dir);
    } catch (const Error& e) {
      warn_telemetry_failure(e, "TensorBoard data");
    }
  }

  void on_step(const StepEvent& e) override {
    const dist::StepResult& r = *e.result;
    std::vector<std::pair<std::string, double>> v = {{"train/loss", r.loss}};
    for (auto [name, value] : MetricSums::of(e.epoch_metrics->kind, r).named()) {
      v.emplace_back(std::string("train/") + name, value);
    }
    v.emplace_back("train/lr", e.lr);
    v.emplace_back("train/samples_per_s", per_second(static_cast<double>(r.count), e.step_seconds));
    v.emplace_back("train/exposed_comm_ms", r.timing.exposed_comm_ms);
    v.emplace_back("train/data_wait_ms", e.data_wait_seconds * 1000);
    write(e.global_step, v);
  }

  void on_epoch(const EpochEvent& e) override {
    std::vector<std::pair<std::string, double>> v = {{"epoch/loss", e.train.loss()}};
    for (auto [name, value] : e.train.named()) v.emplace_back(std::string("epoch/") + name, value);
    if (e.test) {
      v.emplace_back("test/loss", e.test->loss());
      for (auto [name, value] : e.test->named()) v.emplace_back(std::string("test/") + name, value);
    }
    v.emplace_back("epoch/samples_per_s", per_second(static_cast<double>(e.samples), e.seconds));
    v.emplace_back("epoch/data_wait_ms", e.data_wait_seconds * 1000);
    write(e.global_step, v);
  }

 private:
  void write(std::int64_t step, const std::vector<std::pair<std::string, double>>& v) {
    if (!writer_) return;
    try {
      writer_->scalars(step, v);
    } catch (const Error& e) {
      warn_telemetry_failure(e, "TensorBoard data");
      writer_.reset();
    }
  }

  std::optional<TensorBoardWriter> writer_;
};

/// Saves every --checkpoint-every steps, at the end of each epoch and when --max-steps stops
/// the run (rank 0 writes; save_checkpoint does nothing elsewhere).
class Checkpoints final : public FitObserver {
 public:
  explicit Checkpoints(Trainer::Impl& impl) : impl_(impl) {}
  void on_step(const StepEvent& e) override {
    const TrainConfig& c = impl_.config;
    const bool every = c.checkpoint_every > 0 && e.global_step % c.checkpoint_every == 0;
    const bool boundary = !c.checkpoint_dir.empty() && (e.next.step_in_epoch == 0 || e.last);
    if (every || boundary) impl_.save_checkpoint(e.next);
  }

 private:
  Trainer::Impl& impl_;
};

}  // namespace

void warn_telemetry_failure(const std::exception& e, const std::string& what) {
  std::cerr << "[mirror] warning: " << message_for(e) << "; " << what
            << " is not written from here on, training goes on\n";
}

std::vector<std::unique_ptr<FitObserver>> make_observers(Trainer::Impl& impl) {
  std::vector<std::unique_ptr<FitObserver>> out;
  out.push_back(std::make_unique<TraceSteps>(impl.trace));
  out.push_back(std::make_unique<Console>(impl.progress, impl.config.epochs));
  out.push_back(std::make_unique<JsonLog>(impl.log));
  if (impl.is_root() && !impl.config.tensorboard.empty()) {
    out.push_back(std::make_unique<TensorBoardScalars>(impl.config.tensorboard));
  }
  out.push_back(std::make_unique<Checkpoints>(impl));
  return out;
}

}  // namespace mirror::train
