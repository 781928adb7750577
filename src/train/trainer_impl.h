// defines: Trainer::Impl and the pieces it shares across files: the task built from a config,
// metric sums, the step/epoch events of the fit loop and the observers that turn them into
// telemetry (progress, JSON log, trace, checkpoints).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/data/loader.h"
#include "mirror/distributed/device_selection.h"
#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mirror/nn/models.h"
#include "mirror/optim/schedule.h"
#include "mirror/train/checkpoint.h"
#include "mirror/train/checkpoint_lock.h"
#include "mirror/train/metrics_log.h"
#include "mirror/train/trace.h"
#include "mirror/train/trainer.h"
#include "train/step_memory.h"

namespace mirror::train {

// ---- data --------------------------------------------------------------------------------

/// A task mirror-train builds from its config, with the short name its messages use.
struct ConfigTask {
  Task task;
  std::string name;
  std::string label;  // for the log: the name, and the spec file and its description when given
  std::vector<std::string> warnings;  // about the data (Note [Data magnitude]); rank 0 prints
  std::string loss;  // the run's --loss, or what the model decides (Note [Binary heads])
};
/// The model (a --model-spec file or a built-in spec) bound to the data (the user's files or
/// the built-in sets, cut by --train-limit / --test-limit); DataError when files are missing,
/// InvalidArgument naming both values when the spec does not fit the data. `sources` replace
/// files of the config (Note [In-memory sources], trainer.h).
ConfigTask task_from_config(const TrainConfig& config, const Sources& sources = {});

struct DataSplits {
  std::shared_ptr<const data::Dataset> train, test;  // test null when no test files are named
  std::vector<std::string> warnings;                 // Note [Data magnitude] (train_own_data.cpp)
};
/// The user's data files named by the config (arrays, CSV, token text or image folders), or the
/// arrays of `sources` in their place. `raw_values`: uint8 arrays and images as stored, not
/// scaled to [0, 1] (Note [Raw values], models.h).
DataSplits load_own_data(const TrainConfig& config, const Sources& sources = {},
                         bool raw_values = false);

/// Note [Data limits]
/// --train-limit N keeps N samples chosen by a permutation seeded from --seed (not the first N:
/// files are often sorted by class, and the first N words of the word lists are all English).
/// The kept indices are served in ascending order; the loader shuffles them per epoch anyway.
/// `salt` makes the train and test draws independent. n <= 0 or n >= size: `dataset` itself.
std::shared_ptr<const data::Dataset> random_subset(std::shared_ptr<const data::Dataset> dataset,
                                                   std::int64_t n, std::uint64_t seed,
                                                   std::uint64_t salt);

/// Hash of sizes, shapes and targets: a checkpoint remembers which data it was trained on, and
/// ranks check that they load the same data. `test` may be null.
std::string data_checksum(const data::Dataset& train, const data::Dataset* test);

// ---- metrics -----------------------------------------------------------------------------

/// Sums of global step results over a step, an epoch or an evaluation pass, and the metrics
/// they give for the loss kind: accuracy for softmax cross-entropy (per sample) and binary
/// cross-entropy (per target element), mse and mae for mean squared error.
struct MetricSums {
  dist::LossKind kind = dist::LossKind::kSoftmaxCrossEntropy;
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t count = 0;
  std::int64_t target_values = 0;
  double squared_error_sum = 0;
  double abs_error_sum = 0;

  static MetricSums of(dist::LossKind kind, const dist::StepResult& r);
  void add(const dist::StepResult& r);
  double loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const;
  double mse() const { return per_value(squared_error_sum); }
  double mae() const { return per_value(abs_error_sum); }
  /// This kind's metrics by name, in print order: {accuracy} or {mse, mae}.
  std::vector<std::pair<const char*, double>> named() const;
  /// " accuracy 0.9123" or " mse 0.0123 mae 0.0456" (prefix before each name).
  std::string text(const char* prefix = "") const;

 private:
  double per_value(double sum) const {
    return target_values ? sum / static_cast<double>(target_values) : 0.0;
  }
};

/// --loss auto: softmax cross-entropy for class labels, mean squared error for float targets;
/// otherwise the named loss, which must suit the data (InvalidArgument naming both).
dist::LossKind resolve_loss(const std::string& name, const data::Dataset& train);

// ---- fit loop events ---------------------------------------------------------------------

/// Where a run starts: fresh, or the position saved in a checkpoint.
struct StartPoint {
  int epoch = 0;
  std::int64_t step_in_epoch = 0;
  std::int64_t global_step = 0;
};

/// One finished training step, as the observers see it.
struct StepEvent {
  int epoch = 0;
  std::int64_t step = 0;        // 0-based within the epoch
  std::int64_t first_step = 0;  // where this epoch's run started (resume mid-epoch)
  std::int64_t steps_per_epoch = 0;
  std::int64_t global_step = 0;  // steps done, this one included
  double lr = 0;
  const dist::StepResult* result = nullptr;
  double compute_start_us = 0;  // trace clock when train_step began
  double step_seconds = 0;
  double data_wait_seconds = 0;
  double epoch_seconds = 0;                   // since the epoch started
  const MetricSums* epoch_metrics = nullptr;  // the epoch so far, this step included
  StartPoint next;                            // where a run resuming after this step starts
  bool last = false;                          // --max-steps reached: the loop stops after this step
};

/// One finished epoch (train metrics, and the evaluation when the task has a test split).
struct EpochEvent {
  int epoch = 0;
  std::int64_t global_step = 0;
  MetricSums train;
  std::optional<MetricSums> test;
  double seconds = 0;       // training and evaluation
  double eval_seconds = 0;  // evaluation's part of `seconds`
  std::int64_t samples = 0;
  double data_wait_seconds = 0;
};

/// Telemetry hooked to the loop: every rank calls every observer; the rank-0-only ones do
/// nothing elsewhere.
class FitObserver {
 public:
  virtual ~FitObserver() = default;
  virtual void on_step(const StepEvent&) {}
  virtual void on_epoch(const EpochEvent&) {}
  virtual void on_end(const FitSummary&) {}
};

/// Whether the user watches this process's stdout on a terminal (Note [Progress bar under a
/// launcher], progress.cpp): isatty, and under mpirun the launcher's stdout.
bool stdout_shows_a_terminal();

/// Console output on rank 0: a progress bar on a terminal (unless --no-progress), plain lines
/// per epoch and the summary always.
class Progress {
 public:
  Progress(bool enabled, bool bar) : enabled_(enabled), bar_(bar) {}
  /// `step` is 1-based within the epoch; eta_s estimates the rest of the epoch.
  void step(int epoch, int epochs, std::int64_t step, std::int64_t steps, double samples_per_s,
            double eta_s, const MetricSums& metrics);
  void epoch_done(const std::string& line);
  void message(const std::string& line);

 private:
  bool enabled_, bar_;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

/// Note [Telemetry failures] (trainer_observers.cpp): prints one warning naming `e` (the path and
/// the system's reason) and that `what` is no longer written.
void warn_telemetry_failure(const std::exception& e, const std::string& what);

/// Note [Agreed errors] (trainer.h): runs `phase` (no collective inside) on every rank, then
/// agrees on its outcome in one all-gather; when it failed anywhere, every rank throws the first
/// failing rank's message as a JobStopped with kExitSetupFailed, which that rank prints. Alone,
/// the phase's own error is thrown as is.
void agree_on_setup(dist::Runtime& rt, const std::function<void()>& phase);
/// A set-up check whose outcome is the same on every rank by construction (a collective that
/// compares ranks, a check of agreed values): its error becomes a JobStopped that rank 0 prints.
void uniform_setup(const dist::Runtime& rt, const std::function<void()>& check);

/// The observers of a run, in the order they are told: trace, progress, JSON log, TensorBoard
/// scalars (rank 0, with --tensorboard), checkpoints.
std::vector<std::unique_ptr<FitObserver>> make_observers(Trainer::Impl& impl);

// ---- the trainer -------------------------------------------------------------------------

struct Trainer::Impl {
  Impl(dist::Runtime& runtime, TrainConfig config, std::optional<Task> task, Sources sources = {});

  dist::Runtime& runtime;
  TrainConfig config;
  dist::DeviceSelection selection;
  Task task;
  std::string model_name;    // for messages: the spec's name, or "custom"
  std::string model_label;   // for the start-up line: the name with its source or description
  bool from_config = false;  // the task was built from the config (a model spec)
  std::string checksum;      // data_checksum of the task's data
  std::vector<std::string> precision_notes;  // emulated math modes, logged (precision.h)
  dist::LossKind loss = dist::LossKind::kSoftmaxCrossEntropy;
  std::unique_ptr<dist::MirroredStrategy> strategy;
  std::shared_ptr<data::SamplePool> sample_pool;  // every loader's decoding threads
  std::vector<std::unique_ptr<data::Loader>> train_loaders, test_loaders;
  std::unique_ptr<optim::LrSchedule> schedule;
  std::int64_t global_batch = 0;
  double lr_scale = 1.0;
  std::optional<CheckpointManager> checkpoints;  // rank 0 only
  std::optional<CheckpointDirLock> checkpoint_lock;  // rank 0: Note [Checkpoint folder lock]
  MetricsLog log;                                // rank 0 only
  TraceRecorder trace;
  Progress progress;
  StartPoint start;        // where fit() begins: fresh, or the checkpoint restore() loaded
  FitCallbacks callbacks;  // Note [Fit callbacks] (trainer.h)

  // Note [Saving where it resumed]: no --checkpoint-dir given, so --resume DIR's folder is it.
  bool checkpoint_dir_from_resume = false;
  bool resume_folder_missing = false;  // rank 0, before open_outputs created it (--resume-or-start)

  bool is_root() const { return runtime.world_rank() == 0; }
  void check_task() const;
  void check_model_output();
  void check_step_memory() const;              // Note [Step memory] (step_memory.h)
  void check_parameter_memory() const;         // Note [Parameter floor] (step_memory.h)
  void log_precision();                        // rank 0: the precision policy and its fallbacks
  void restore_loss_scale(const Metadata& m);  // mixed_float16's scale from a checkpoint
  /// Throws OutOfMemory when `need` (per local replica) exceeds the --memory limit of a CPU
  /// replica or the host's share for every replica of every local rank; `advice` as in
  /// train::check_step_memory.
  void check_host_memory(const StepMemory& need, const std::string& advice) const;
  int optimizer_slots() const;  // per parameter: Adam 2, SGD with momentum 1
  void make_strategy();
  void check_global_batch(int world_replicas) const;
  /// Rank 0: creates the checkpoint folder, opens the JSON log, and tries the trace and
  /// TensorBoard paths, so that an unwritable path fails before training (Note [Telemetry
  /// failures], trainer_observers.cpp).
  void open_outputs();
  /// --trace: writable; an existing file is refused unless --overwrite or --resume, and with
  /// --resume it must be a trace this run can append to (Note [Appended traces], trace.cpp).
  void check_trace_file() const;
  void make_loaders();
  StartPoint restore();
  // restore's parts (train_resume.cpp)
  void check_resume_folder();                       // rank 0, in open_outputs: DIR is a folder
  void check_checkpoint_dir();                      // rank 0: Note [Foreign checkpoints]
  std::string find_checkpoint(std::string& found);  // rank 0: the bytes to broadcast, or ""
  std::vector<std::string> config_changes(const Metadata& m) const;
  StartPoint load_checkpoint(const SafetensorsFile& file, const std::string& found);
  /// Whether a checkpoint's model description is this task's.
  bool same_model(const std::string& stored) const;
  void save_checkpoint(const StartPoint& next);
  void write_trace();
  FitSummary fit();

  // fit's named steps (trainer_fit.cpp)
  struct EpochRun;
  EpochRun begin_epoch(int epoch, std::int64_t first_step);
  std::vector<data::Batch> next_batches(double& wait_seconds);
  StepEvent train_step(EpochRun& run, std::vector<data::Batch>& batches, std::int64_t step,
                       std::int64_t global_step);
  void record_step(EpochRun& run, StepEvent& event);
  void check_step_health(const StepEvent& event, int& skipped_in_a_row) const;
  EpochEvent end_epoch(EpochRun& run, std::int64_t global_step);
  std::optional<MetricSums> evaluate();
  FitSummary finish(const FitSummary& partial);
  void report_bad_samples();  // --skip-bad-samples: the count, on rank 0 (collective)
  /// Note [Fit callbacks]: runs `hook` (a callback) on every rank and agrees on the answers;
  /// true when some rank asked to stop, JobStopped when a hook threw on some rank.
  bool agree_on_callback(const std::function<bool()>& hook, const std::string& where);
  void report_preemption(std::int64_t global_step);
};

}  // namespace mirror::train
