// defines: TrainConfig (everything mirror-train's flags and --config JSON set), Task (any model
// and any data) and Trainer, the Keras-like fit/evaluate loop over a MirroredStrategy: data per
// replica, metrics reduced across ranks, progress on rank 0, checkpoints and resume, JSON-lines
// log and Chrome trace.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/data/dataset.h"
#include "mirror/data/numeric_array.h"
#include "mirror/data/photo_transforms.h"
#include "mirror/distributed/strategy.h"
#include "mirror/error.h"
#include "mirror/train/checkpoint.h"

namespace mirror::dist {
class Runtime;
}

namespace mirror::train {

struct TrainConfig {
  // model
  std::string model = "cnn";  // built-in spec: cnn | gru-rows | gru-words
  std::string model_spec;     // a model spec JSON file (replaces --model)
  std::string init_weights;   // start from these weights: a Keras .weights.h5 (fine-tuning)
  std::string loss = "auto";  // auto (softmax CE for class labels, MSE for float targets) | ...
  // --sync-batchnorm: every BatchNormalization synchronized across replicas
  bool sync_batchnorm = false;
  // --augment: random crops and flips of training images, e.g. "crop=4,flip"
  // (mirror/data/augment.h)
  std::string augment = "none";
  // built-in data (when no data files are given)
  std::string data = "real";  // real | synthetic
  std::string data_dir;       // Fashion-MNIST IDX files (default: the Debian package's folder)
  std::string dict_dir;       // word lists (default /usr/share/dict)
  // the user's data files (one kind per split: arrays, CSV or token text)
  std::string train_x, train_y, test_x, test_y;  // .npy or IDX (.gz accepted)
  std::string train_csv, test_csv;
  std::string label_column;               // CSV label column: name or 0-based index (default: last)
  std::string csv_header = "auto";        // auto | yes | no
  std::string train_tokens, test_tokens;  // "label id id ..." per line
  int num_classes = 0;                    // 0: from the labels (max + 1)
  std::string input_shape;                // reshape array samples, e.g. "1,28,28"
  // image folders, one subfolder per class (docs/data-formats.md#image-folders)
  std::string train_images, test_images;
  std::string image_size;      // "H,W" (default: the first image's size)
  std::string color = "auto";  // auto | grayscale | rgb
  std::string decode = "cpu";  // cpu | gpu (JPEG through nvJPEG)
  int data_workers = 0;        // the rank's decoding threads (0: its cores on the host, <= 64)
  // The photograph recipe (mirror/data/photo_transforms.h): training crops and flips, the
  // normalisation of both splits, and the evaluation resize + centre crop.
  std::string crop = "none";       // none | random-resized[=MIN,MAX]
  bool flip = false;               // horizontal flip, p = 0.5
  std::string normalize = "none";  // none | imagenet | MEAN,STD lists
  int eval_resize = 0;             // the test split's short side before the centre crop
  int eval_crop = 0;               // the centre crop: must be --image-size (0: --image-size)
  // Replace a sample that cannot be decoded by the next good one (Note [Bad samples], loader.h)
  bool skip_bad_samples = false;
  // Use N samples drawn by a permutation seeded from `seed` (0 = all); see Note [Data limits].
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;
  // schedule
  int epochs = 1;
  std::int64_t max_steps = 0;   // stop at this global step, resumes included (0 = no limit)
  std::int64_t batch_size = 0;  // global batch (0: batch_per_replica x replicas, else 64)
  std::int64_t batch_per_replica = 0;
  std::string optimizer = "adam";  // sgd | adam | adamw
  double lr = 1e-3;
  bool force_lr = false;  // accept --lr above 10 (otherwise an error: almost always a typo)
  bool lr_scale_by_replicas = false;  // linear scaling rule: lr x world replicas
  std::string schedule = "constant";  // constant | warmup | cosine
  std::int64_t warmup_steps = 0;
  double momentum = 0.9;     // sgd only
  double weight_decay = -1;  // -1: the optimizer's default
  std::uint64_t seed = 0;
  // devices and memory
  std::string devices = "auto";
  std::string memory = "growth";
  bool require_gpu = false;
  bool allow_gpu_sharing = false;
  int threads = 0;  // OpenMP threads per rank (0: cores on the node / ranks on the node)
  // distribution
  double comm_timeout_s = 600;
  double startup_timeout_s = 120;  // MPI start-up watchdog (Note [Start-up watchdog], runtime.h)
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  std::string compression = "none";  // none | fp16 | bf16
  std::string comm = "auto";         // GPU transport: auto | nccl | mpi (dist::DeviceComm)
  // float32 | mixed_bfloat16 | mixed_float16 (Note [Mixed precision], mirror/precision.h)
  std::string precision = "float32";
  /// on | off: float32 convolutions and matrix products on a GPU's TF32 tensor cores (Note
  /// [TF32], mirror/precision.h); off keeps exact float32.
  std::string tf32 = "on";
  /// auto | channels_last | channels_first: how image arrays are laid out (nn::DataFormat,
  /// mirror/nn/image_layout.h); recorded, so mirror-predict reads arrays as training did.
  std::string data_format = "auto";
  int accumulation = 1;
  bool on_oom_split = true;
  int divergence_check_every = 100;
  // Stop the run (exit code 1) after this many skipped steps in a row (non-finite gradients);
  // 0 = never (Note [Failed runs], trainer_fit.cpp).
  int max_skipped_steps = 10;
  // output
  std::string checkpoint_dir;  // empty: no checkpoints, unless resuming: then resume's folder
  std::int64_t checkpoint_every = 0;  // steps; 0 = at the end of each epoch only
  int keep = 3;
  std::string resume;  // checkpoint folder to resume from (no valid checkpoint there: an error)
  bool resume_or_start = false;        // ... unless this is set: then start fresh, loudly
  bool allow_config_change = false;    // resume with another seed/optimizer/lr/global batch
  bool overwrite_checkpoints = false;  // a fresh run deletes the checkpoints in checkpoint_dir
  std::string log_jsonl;
  bool overwrite = false;  // --log-jsonl may replace an existing file (docs/metrics.md)
  std::string trace;
  std::string tensorboard;  // folder for TensorBoard event files (docs/metrics.md)
  bool progress = true;     // progress bar on rank 0 when stdout is a terminal

  /// True when the data comes from the user's files rather than the built-in sets.
  bool own_data() const;
  /// --input-shape as dimensions (empty when not given); InvalidArgument for bad text.
  std::vector<std::int64_t> parsed_input_shape() const;
  /// --image-size as {height, width} ({0, 0} when not given); InvalidArgument for bad text.
  std::pair<int, int> parsed_image_size() const;
  /// --crop, --flip, --normalize and --eval-resize as a recipe; InvalidArgument for bad text.
  data::PhotoRecipe parsed_photo_recipe() const;

  nlohmann::json to_json() const;
  /// Unknown keys and wrong types are InvalidArgument naming the key.
  static TrainConfig from_json(const nlohmann::json& json);
  /// Range checks with messages naming the flag (e.g. "--epochs must be >= 1, got 0").
  void validate() const;
};

/// Checks of explicitly given values whose TrainConfig defaults (0, -1) mean "not given":
/// InvalidArgument for a batch <= 0 or a negative / non-finite weight decay.
void check_batch_flag(const char* flag, std::int64_t value);
void check_weight_decay_flag(double value);
/// --seed text as 0 .. 2^64-1: InvalidArgument for a sign ("-1" would wrap around), a fraction
/// or anything else that is not a whole number in range.
std::uint64_t parse_seed(const std::string& text);

/// Metrics by Keras's names, in order: "loss", then "accuracy" (or "mse", "mae"), and after an
/// epoch with test data "val_loss", "val_accuracy" (or "val_mse", "val_mae").
using Logs = std::vector<std::pair<std::string, double>>;

/// Metrics of the last epoch. Accuracy is per sample for softmax cross-entropy and per target
/// element for binary cross-entropy; mse/mae are set for mean squared error (0 otherwise).
struct FitSummary {
  std::string loss;        // the loss trained, e.g. "softmax-cross-entropy" or "mse"
  bool evaluated = false;  // false when the task has no test split (test_* stay 0)
  double test_loss = 0;
  double test_accuracy = 0;
  double test_mse = 0, test_mae = 0;
  double train_loss = 0;  // last epoch's mean
  double train_accuracy = 0;
  double train_mse = 0, train_mae = 0;
  std::int64_t steps = 0;       // steps run by this fit (resumed steps not counted)
  std::int64_t final_step = 0;  // global step index reached
  double wall_seconds = 0;
  double samples_per_second = 0;
  double data_wait_seconds = 0;
  int world_replicas = 1;
  std::string devices;  // this rank's devices, e.g. "cpu:0"
  std::uint64_t weights_fingerprint = 0;
  // Stopped early by SIGTERM/SIGINT/SIGUSR1 on some rank (Note [Preemption], preemption.h):
  // every rank stopped after the same step and rank 0 checkpointed it (with --checkpoint-dir).
  bool preempted = false;
  // Stopped early because a fit callback asked to (Note [Fit callbacks]).
  bool stopped_by_callback = false;
  // Each epoch's logs (as FitCallbacks::on_epoch_end gets them), for this fit's epochs; the
  // first is epoch first_epoch (0-based: past 0 after --resume).
  std::vector<Logs> history;
  int first_epoch = 0;
};

/// Note [Fit callbacks]: hooks a front end (the Python module's callbacks) runs on every rank,
/// on the thread that called fit(): on_step_end after each training step with the global step
/// (steps done, this one included) and the epoch's metrics so far; on_epoch_end after each
/// epoch (0-based) and its evaluation. Returning true asks to stop; a hook that throws fails the
/// run. The metrics are the same on every rank, but what a hook decides need not be, so the
/// ranks' answers are agreed in one all-gather after every call (one small collective per step
/// when on_step_end is set): every rank stops after the same step, when any rank asked, with a
/// checkpoint of that step as at the end of a run; a hook that throws on any rank stops every
/// rank with a JobStopped (exit code 1) whose message names the rank, the step and the error.
/// A stop asked at a step still ends that epoch with its evaluation and on_epoch_end (Keras's
/// stop_training does the same); a stop signal (Note [Preemption]) skips the hooks.
struct FitCallbacks {
  std::function<bool(std::int64_t global_step, const Logs& logs)> on_step_end;
  std::function<bool(int epoch, const Logs& logs)> on_epoch_end;
};

/// Note [In-memory sources]: what a front end holds in memory instead of the files the config
/// names: the Python module's NumPy arrays and Keras model objects. Each source given replaces
/// the file of its config field, which must then be set to a name for it (messages, the log
/// and checkpoints' 'mirror.config' show that name); the source is read, checked and bound
/// exactly as that file would be, so a run on arrays equals the run on the same arrays saved as
/// .npy files. InvalidArgument when a source has no name in the config.
struct Sources {
  std::optional<data::NumericArray> train_x, train_y, test_x, test_y;  // config.train_x, ...
  std::optional<nlohmann::json> model_spec;  // a model spec's JSON; config.model_spec
  // A .weights.h5 file read for config.init_weights, which names it (mirror.fit saves a Keras
  // model's current weights to a file of each rank's own; every rank's config shows one name).
  std::optional<std::string> init_weights_file;
};

/// Exit code of mirror-train when its set-up fails after start-up (a bad model spec, data file,
/// output path or a model/data/memory mismatch): a restart would fail the same way, so
/// launch/mirrorrun does not restart it. 2 is a rejected command line, 1 a run-time failure.
inline constexpr int kExitSetupFailed = 3;

/// Note [Agreed errors]: an error that every rank of the job raised together, after agreeing on
/// it (a set-up check, a diverged loss). No rank is left waiting in a collective, so the program
/// prints it once (on the rank whose speaker() is true) and exits with exit_code() on every
/// rank, instead of aborting the job (MPI_Abort: exit code 1 and Open MPI's noise). In a job of
/// one rank the Trainer's set-up errors keep their own type (InvalidArgument, DataError, ...).
class JobStopped : public Error {
 public:
  JobStopped(const std::string& message, int exit_code, bool speaker)
      : Error(message), exit_code_(exit_code), speaker_(speaker) {}
  int exit_code() const { return exit_code_; }
  bool speaker() const { return speaker_; }

 private:
  int exit_code_;
  bool speaker_;
};

/// What the generic fit loop trains: any model and any data. mirror-train's built-in models are
/// Tasks made from the config.
struct Task {
  /// Builds the same architecture on every device it is called with (one call per replica);
  /// the strategy broadcasts replica 0's initial weights. Parameter names (Sequential's) are the
  /// tensor names in checkpoints.
  dist::ModelFactory model;
  /// Identifies the architecture: stored in checkpoints and compared on resume (a different
  /// description is an error naming both).
  std::string model_description;
  std::shared_ptr<const data::Dataset> train;  // required
  std::shared_ptr<const data::Dataset> test;   // optional: no evaluation when null
};

/// Runs a whole training job on every rank (collective: every rank constructs one and calls
/// fit() with the same config and an equal task).
class Trainer {
 public:
  /// The generic path: trains `task` with the schedule, optimizer, devices, distribution and
  /// outputs of `config` (its model and data fields are not used).
  Trainer(dist::Runtime& runtime, TrainConfig config, Task task);
  /// mirror-train: the task (built-in model and data) comes from the config.
  Trainer(dist::Runtime& runtime, TrainConfig config);
  /// The same with some of the config's files given in memory (Note [In-memory sources]).
  Trainer(dist::Runtime& runtime, TrainConfig config, Sources sources);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Trains for the configured epochs (resuming first when asked), evaluating on the test split
  /// after each epoch; rank 0 prints progress and the final summary.
  FitSummary fit();

  /// Local replica 0's model (after fit(): the trained weights, identical on every replica).
  nn::Sequential& model();

  /// Hooks run during fit() (Note [Fit callbacks]); set them on every rank alike.
  void set_callbacks(FitCallbacks callbacks);
  /// The model's weights as a checkpoint holds them (parameters and BatchNorm moving statistics
  /// by name, no optimizer state) as CPU tensors; every replica holds the same ones after every
  /// step, so this needs no communication.
  NamedTensors weights();
  /// The task's model description: for a config's task the bound model spec's JSON (what a
  /// checkpoint stores as 'mirror.model').
  const std::string& model_description() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mirror::train
