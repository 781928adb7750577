// Trainer: sets up devices, the task's data, the strategy and the outputs; the fit loop is in
// trainer_fit.cpp, its telemetry in trainer_observers.cpp.
#include "mirror/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <thread>

#include "mirror/error.h"
#include "mirror/memory.h"
#include "mirror/optim/optimizer.h"
#include "train/output_paths.h"
#include "train/step_memory.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

dist::StrategyOptions strategy_options(const TrainConfig& c) {
  dist::StrategyOptions o;
  o.buckets.bytes = static_cast<std::size_t>(c.bucket_mb * (1 << 20));
  o.buckets.first_bytes = static_cast<std::size_t>(c.first_bucket_mb * (1 << 20));
  o.compression = dist::parse_compression(c.compression);
  o.device_comm = dist::parse_device_comm(c.comm);
  o.precision = parse_precision(c.precision);
  o.collective_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(c.comm_timeout_s * 1000));
  o.divergence_check_every = c.divergence_check_every;
  o.accumulation_steps = c.accumulation;
  o.split_on_oom = c.on_oom_split;
  o.seed = c.seed;
  return o;
}

int default_threads(const dist::Runtime& rt, std::size_t local_replicas) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, rt.local_size() * static_cast<int>(local_replicas)));
}

LogMode log_mode(const TrainConfig& c) {
  if (!c.resume.empty()) return LogMode::kAppend;  // the resumed run continues its log
  return c.overwrite ? LogMode::kOverwrite : LogMode::kNew;
}

/// A C++ Task in the start-up line: its model_description (the first line, cut to 120
/// characters), so the log says which model this is.
std::string task_label(const std::string& description) {
  if (description.empty()) return "custom (a C++ Task; Task.model_description is empty)";
  std::string text = description.substr(0, description.find('\n'));
  if (text.size() > 120) text = text.substr(0, 117) + "...";
  return "\"" + text + "\" (a C++ Task)";
}

/// The rank's decoding threads (Note [Sample pool]): --data-workers, or the cores this rank can
/// have on its host, shared by its local replicas; results never depend on it.
int data_workers(const TrainConfig& c, const dist::Runtime& rt) {
  if (c.data_workers > 0) return c.data_workers;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cores / std::max(1, rt.local_size()), 1, 64);
}

/// Threads per loader that take whole batches and wait for the pool to decode their samples:
/// two, so one batch's upload or epoch order overlaps the next one's decoding.
constexpr int kBatchAssemblers = 2;
constexpr int kPrefetchDepth = 4;

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

/// Note [Agreed errors] (trainer.h): runs a set-up phase that needs no collective on every rank,
/// then agrees on its outcome in one all-gather. When it failed anywhere, every rank throws the
/// first failing rank's message as a JobStopped with kExitSetupFailed; that rank prints it.
void agree_on_setup(dist::Runtime& rt, const std::function<void()>& phase) {
  if (rt.world_size() == 1) return phase();  // alone: the error keeps its own type
  std::string mine;
  try {
    phase();
  } catch (const std::exception& e) {
    mine = message_for(e);
    if (mine.empty()) mine = "unknown error";
  }
  const std::vector<std::string> all = rt.all_gather_string(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    throw JobStopped(all[r], kExitSetupFailed, static_cast<std::size_t>(rt.world_rank()) == r);
  }
}

/// A set-up check whose outcome is the same on every rank by construction (a collective that
/// compares ranks, a check of agreed values): its error becomes a JobStopped that rank 0 prints.
void uniform_setup(const dist::Runtime& rt, const std::function<void()>& check) {
  if (rt.world_size() == 1) return check();
  try {
    check();
  } catch (const JobStopped&) {
    throw;
  } catch (const Error& e) {
    throw JobStopped(message_for(e), kExitSetupFailed, rt.world_rank() == 0);
  }
}

MetricSums MetricSums::of(dist::LossKind kind, const dist::StepResult& r) {
  MetricSums m;
  m.kind = kind;
  m.add(r);
  return m;
}

void MetricSums::add(const dist::StepResult& r) {
  loss_sum += r.loss_sum;
  correct += r.correct;
  count += r.count;
  target_values += r.target_values;
  squared_error_sum += r.squared_error_sum;
  abs_error_sum += r.abs_error_sum;
}

double MetricSums::accuracy() const {
  // Binary cross-entropy counts elements; softmax over per-step / per-pixel labels counts the
  // labelled positions (Note [Dense labels]), which it reports as target_values.
  const std::int64_t n =
      kind == dist::LossKind::kBinaryCrossEntropy || target_values > 0 ? target_values : count;
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

std::vector<std::pair<const char*, double>> MetricSums::named() const {
  if (kind == dist::LossKind::kMeanSquaredError) return {{"mse", mse()}, {"mae", mae()}};
  return {{"accuracy", accuracy()}};
}

std::string MetricSums::text(const char* prefix) const {
  std::string out;
  for (auto [name, value] : named()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.4f", prefix, name, value);
    out += (out.empty() ? "" : " ") + std::string(buf);
  }
  return out;
}

dist::LossKind resolve_loss(const std::string& name, const data::Dataset& train) {
  const bool classes = train.target_kind() == data::TargetKind::kClass;
  if (name == "auto")
    return classes ? dist::LossKind::kSoftmaxCrossEntropy : dist::LossKind::kMeanSquaredError;
  const dist::LossKind kind = dist::parse_loss(name);
  const bool wants_classes = kind == dist::LossKind::kSoftmaxCrossEntropy;
  MIRROR_CHECK(wants_classes == classes, InvalidArgument,
               std::string("--loss ") + dist::loss_name(kind) + " needs " +
                   (wants_classes ? "class labels" : "float targets") + ", but the data has " +
                   (classes ? "class labels (" + std::to_string(train.num_classes()) + " classes)"
                            : "float targets " + shape_text(train.target_shape())) +
                   "; choose " +
                   (classes ? "softmax-cross-entropy (or auto)"
                            : "binary-cross-entropy or mse (auto: mse)"));
  return kind;
}

Trainer::Impl::Impl(dist::Runtime& rt, TrainConfig cfg, std::optional<Task> given, Sources sources)
    : runtime(rt),
      config(std::move(cfg)),
      trace(rt.world_rank(), !config.trace.empty()),
      progress(rt.world_rank() == 0,
               config.progress && rt.world_rank() == 0 && stdout_shows_a_terminal()) {
  config.validate();
  // Note [Saving where it resumed] (train_resume.cpp).
  if (config.checkpoint_dir.empty() && !config.resume.empty()) {
    config.checkpoint_dir = config.resume;
    checkpoint_dir_from_resume = true;
  }
  // Refused at once, not after loading the data (rank 0 writes the log).
  agree_on_setup(runtime, [&] {
    if (is_root() && !config.log_jsonl.empty()) {
      MetricsLog::check_mode(config.log_jsonl, log_mode(config));
    }
  });
  runtime.set_default_timeout(
      std::chrono::milliseconds(static_cast<std::int64_t>(config.comm_timeout_s * 1000)));
  // Every rank must run the same job: compare the whole config (minus per-rank-free fields).
  uniform_setup(runtime, [&] {
    runtime.check_same_across_ranks("training configuration", config.to_json().dump());
  });

  dist::DeviceRequest request;
  request.devices = config.devices;
  request.memory_policy = config.memory;
  request.require_gpu = config.require_gpu;
  request.allow_sharing = config.allow_gpu_sharing;
  selection = runtime.setup_devices(request);
  omp_set_num_threads(config.threads > 0 ? config.threads
                                         : default_threads(runtime, selection.devices.size()));

  agree_on_setup(runtime, [&] {
    std::string loss_name = config.loss;
    if (given) {
      task = std::move(*given);
      model_name = "custom";
      model_label = task_label(task.model_description);
    } else {
      ConfigTask built = task_from_config(config, sources);
      task = std::move(built.task);
      model_name = std::move(built.name);
      model_label = std::move(built.label);
      from_config = true;
      loss_name = built.loss;
      for (const std::string& w : built.warnings) {
        if (is_root()) progress.message("[mirror] warning: " + w);
      }
    }
    check_task();
    loss = resolve_loss(loss_name, *task.train);
    checksum = data_checksum(*task.train, task.test.get());
  });
  uniform_setup(runtime, [&] {
    runtime.check_same_across_ranks("training data", checksum);
    runtime.check_same_across_ranks("model description", task.model_description);
  });

  set_tf32(config.tf32 == "on");  // Note [TF32]: read by the CUDA kernels, from the first step
  agree_on_setup(runtime, [&] {  // before any replica is built
    check_parameter_memory();
    precision_notes =
        dist::check_precision_support(parse_precision(config.precision), selection.devices);
  });
  make_strategy();
  uniform_setup(runtime, [&] { check_model_output(); });
  agree_on_setup(runtime, [&] { check_step_memory(); });  // before the loaders allocate batches
  make_loaders();
  const std::int64_t steps_per_epoch = train_loaders.front()->steps_per_epoch();
  schedule = optim::make_schedule(config.schedule, config.lr, config.warmup_steps,
                                  steps_per_epoch * config.epochs);

  // Every output path is tried now, before any training (Note [Telemetry failures]).
  agree_on_setup(runtime, [&] { open_outputs(); });
  start = restore();  // a checkpoint that cannot be resumed is a set-up error too
  if (is_root() && log.enabled() && log_mode(config) == LogMode::kAppend) {
    try {  // Note [Resumed logs] (metrics_log.cpp)
      if (const std::int64_t cut = log.cut_after_step(start.global_step); cut > 0) {
        progress.message("[mirror] --log-jsonl " + config.log_jsonl + ": removed " +
                         std::to_string(cut) + " record(s) past step " +
                         std::to_string(start.global_step) +
                         ", written before this run's checkpoint was resumed; they are logged "
                         "again as the steps run again");
      }
    } catch (const std::exception& e) {  // Note [Telemetry failures]: never costs the run
      std::cerr << "[mirror] warning: " << message_for(e) << "; its records past step "
                << start.global_step << " stay, and this run logs those steps again\n";
    }
  }
  if (is_root()) {
    const data::ImageAugment augment = train_loaders.front()->options().augment;
    const std::string augment_note =
        augment.enabled() ? "; training images augmented: " + data::to_string(augment) : "";
    const data::LoaderOptions& lo = train_loaders.front()->options();
    const int local = strategy->local_replicas();
    progress.message("[mirror] data: " + std::to_string(sample_pool->threads()) +
                     " decoding thread(s) per rank" +
                     (local > 1 ? ", shared by its " + std::to_string(local) + " replicas" : "") +
                     "; " + std::to_string(lo.prefetch_depth) + " batches prefetched per replica" +
                     (config.skip_bad_samples ? "; bad samples replaced (--skip-bad-samples)" : ""));
    if (const auto classes = task.train->class_names(); !classes.empty()) {
      std::string list;
      for (const auto& name : classes) list += (list.empty() ? "" : ", ") + name;
      progress.message("[mirror] classes (label order): " + list);
    }
    progress.message("[mirror] model " + model_label + ": " +
                     std::to_string(strategy->model().parameter_count()) + " parameters; " +
                     std::to_string(strategy->world_replicas()) + " replica(s); global batch " +
                     std::to_string(global_batch) + "; loss " + dist::loss_name(loss) + "; " +
                     task.train->describe() + augment_note);
    // The test split's line says, among other things, when --test-limit evaluates a subset.
    if (task.test) progress.message("[mirror] evaluated on " + task.test->describe());
    log_precision();
  }
}

void Trainer::Impl::log_precision() {
  const Precision p = parse_precision(config.precision);
  if (p == Precision::kFloat32) {
    const auto& devices = strategy->devices();
    if (std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); }))
      progress.message(config.tf32 == "on"
                           ? "[mirror] precision float32: convolutions and matrix products on "
                             "the GPU's TF32 tensor cores where it has them (Ampere and newer, as "
                             "TensorFlow does); --tf32 off for exact float32"
                           : "[mirror] precision float32: exact float32 on the GPU (--tf32 off)");
    return;
  }
  std::string line = std::string("[mirror] precision ") + precision_name(p) + ": convolution, " +
                     "dense and RNN products in " + math_mode_name(math_mode_of(p)) +
                     " with float32 accumulation; float32 master weights, loss, softmax, "
                     "normalization and optimizer";
  if (p == Precision::kMixedFloat16) {
    char scale[64];
    std::snprintf(scale, sizeof scale, "%g", strategy->loss_scale().scale);
    line += std::string("; dynamic loss scale ") + scale;
  }
  progress.message(line);
  for (const std::string& note : precision_notes) progress.message("[mirror] WARNING: " + note);
}

void Trainer::Impl::open_outputs() {
  if (!is_root()) return;
  if (!config.resume.empty()) check_resume_folder();  // before the folder is created below
  if (!config.checkpoint_dir.empty()) {
    checkpoints.emplace(config.checkpoint_dir, config.keep);
    check_writable_dir(config.checkpoint_dir,
                       checkpoint_dir_from_resume
                           ? "--resume (saving into its folder; --checkpoint-dir saves elsewhere)"
                           : "--checkpoint-dir");
    checkpoint_lock.emplace(config.checkpoint_dir);  // before anything looks at its contents
    if (!checkpoint_lock->recovered().empty()) {
      progress.message("[mirror] --checkpoint-dir " + config.checkpoint_dir +
                       ": took over the lock left by a run that is no longer running (" +
                       checkpoint_lock->recovered() + ")");
    }
  }
  if (!config.log_jsonl.empty()) log = MetricsLog(config.log_jsonl, log_mode(config));
  if (!config.trace.empty()) check_trace_file();
  if (!config.tensorboard.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config.tensorboard, ec);
    MIRROR_CHECK(
        !ec, InvalidArgument,
        "--tensorboard " + config.tensorboard + ": cannot create the folder: " + ec.message());
    check_writable_dir(config.tensorboard, "--tensorboard");
  }
}

namespace {
/// A regular file with something in it: a trace that a new one would replace or continue.
bool holds_data(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0;
}
}  // namespace

// Note [Appended traces] (trace.cpp): --trace follows --log-jsonl's rules.
void Trainer::Impl::check_trace_file() const {
  check_writable_file(config.trace, "--trace");
  std::error_code ec;
  const LogMode mode = log_mode(config);
  MIRROR_CHECK(mode != LogMode::kNew || !std::filesystem::is_regular_file(config.trace, ec),
               InvalidArgument,
               "the trace '" + config.trace +
                   "' already exists; pass --overwrite to replace it, --resume to append this "
                   "run to it, or name another file with --trace");
  if (mode != LogMode::kAppend || !holds_data(config.trace)) return;
  try {
    read_trace_file(config.trace);
  } catch (const DataError& e) {
    throw InvalidArgument(std::string(e.what()) +
                          "; a resumed run appends to its --trace: name another file");
  }
}

void Trainer::Impl::check_task() const {
  MIRROR_CHECK(static_cast<bool>(task.model), InvalidArgument,
               "Task.model is empty: give a function that builds the model on a device");
  MIRROR_CHECK(task.train != nullptr, InvalidArgument,
               "Task.train is null: a task needs a training dataset (Task.test may be null)");
  MIRROR_CHECK(task.train->size() > 0, InvalidArgument,
               "the training dataset is empty: " + task.train->describe());
  if (!task.test) return;
  const data::Dataset& a = *task.train;
  const data::Dataset& b = *task.test;
  MIRROR_CHECK(a.sample_shape() == b.sample_shape() && a.input_dtype() == b.input_dtype(),
               InvalidArgument,
               "train and test samples differ: train " + shape_text(a.sample_shape()) + " " +
                   dtype_name(a.input_dtype()) + ", test " + shape_text(b.sample_shape()) + " " +
                   dtype_name(b.input_dtype()));
  MIRROR_CHECK(a.target_kind() == b.target_kind() && a.target_shape() == b.target_shape() &&
                   a.num_classes() == b.num_classes(),
               InvalidArgument,
               "train and test targets differ: train " + std::to_string(a.num_classes()) +
                   " classes / target " + shape_text(a.target_shape()) + ", test " +
                   std::to_string(b.num_classes()) + " classes / target " +
                   shape_text(b.target_shape()));
}

void Trainer::Impl::make_strategy() {
  const int local = static_cast<int>(selection.devices.size());
  const auto per_rank = runtime.all_gather_value<int>(local);
  int world_replicas = 0;
  for (int n : per_rank) world_replicas += n;
  global_batch = config.batch_size > 0          ? config.batch_size
                 : config.batch_per_replica > 0 ? config.batch_per_replica * world_replicas
                                                : 64;
  uniform_setup(runtime, [&] { check_global_batch(world_replicas); });
  lr_scale = config.lr_scale_by_replicas ? world_replicas : 1.0;

  optim::OptimizerOptions opt;
  opt.momentum = config.optimizer == "sgd" ? config.momentum : 0.0;
  opt.weight_decay = config.weight_decay;
  const std::string opt_name = config.optimizer;
  // Validates the name before any replica is built.
  uniform_setup(runtime, [&] { optim::make_optimizer(opt_name, opt); });
  dist::StrategyOptions options = strategy_options(config);
  options.loss = loss;
  strategy = std::make_unique<dist::MirroredStrategy>(
      runtime, selection.devices, task.model,
      [opt_name, opt] { return optim::make_optimizer(opt_name, opt); }, options);
}

void Trainer::Impl::check_global_batch(int world_replicas) const {
  if (global_batch % world_replicas != 0) {
    const std::int64_t below = global_batch / world_replicas * world_replicas;
    const std::int64_t above = below + world_replicas;
    const std::int64_t per = (below > 0 ? below : above) / world_replicas;
    throw InvalidArgument(
        "--batch-size " + std::to_string(global_batch) + " must be a multiple of the " +
        std::to_string(world_replicas) + " replicas: use --batch-size " +
        (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) +
        ", or --batch-per-replica " + std::to_string(per) + " (a global batch of " +
        std::to_string(per * world_replicas) + ")");
  }
  // Never pad a step with more empty samples than real ones: a batch larger than the data is
  // a mistake (and, at 10^6 samples, a machine's worth of memory).
  const std::int64_t samples = task.train->size();
  MIRROR_CHECK(global_batch <= samples, InvalidArgument,
               "the global batch (" + std::to_string(global_batch) +
                   " samples) is larger than the training set (" + std::to_string(samples) +
                   " samples): use --batch-size <= " + std::to_string(samples) +
                   " (or --batch-per-replica <= " + std::to_string(samples / world_replicas) +
                   " with " + std::to_string(world_replicas) + " replicas)");
  const std::int64_t per_replica = global_batch / world_replicas;
  MIRROR_CHECK(config.accumulation <= per_replica, InvalidArgument,
               "--accumulation " + std::to_string(config.accumulation) +
                   " splits each replica's batch of " + std::to_string(per_replica) +
                   " samples into more micro-batches than it has samples: use --accumulation <= " +
                   std::to_string(per_replica));
}

void Trainer::Impl::check_model_output() {
  const Shape& out = strategy->model().output_shape();
  const data::Dataset& d = *task.train;
  const bool classes = loss == dist::LossKind::kSoftmaxCrossEntropy;
  const std::int64_t want = classes ? d.num_classes() : shape_numel(d.target_shape());
  // Note [Dense labels]: [T, K] for per-step labels [T] (token batches may run longer), [K, H, W]
  // for per-pixel labels [H, W]; float targets of several axes: their own shape.
  const Shape labels = classes ? d.label_shape() : Shape{};
  Shape dense = classes ? Shape{} : d.target_shape();
  if (dense.size() == 1) dense.clear();
  if (labels.size() == 1) {
    dense.push_back(out.empty() ? 0 : out[0]);
    dense.push_back(want);
  } else if (labels.size() == 2) {
    dense.push_back(want);
    dense.insert(dense.end(), labels.begin(), labels.end());
  }
  if (!dense.empty()) {
    const bool steps_ok = labels.size() != 1 || (out.size() == 2 && out[0] >= labels[0]);
    MIRROR_CHECK(out == dense && steps_ok, InvalidArgument,
                 "the model outputs " + shape_text(out) + " per sample, but the data needs " +
                     shape_text(dense) + " (" +
                     (classes ? std::to_string(want) + " classes, labels " + shape_text(labels)
                              : "float targets " + shape_text(d.target_shape())) +
                     " per sample)");
    return;
  }
  MIRROR_CHECK(out.size() == 1 && out[0] == want, InvalidArgument,
               "the model outputs " + shape_text(out) + " per sample, but the data has " +
                   (classes ? std::to_string(want) + " classes"
                            : "float targets " + shape_text(d.target_shape())) +
                   ": make the model's last layer " + std::to_string(want) + " wide");
}

int Trainer::Impl::optimizer_slots() const {
  return config.optimizer == "sgd" ? (config.momentum != 0 ? 1 : 0) : 2;
}

void Trainer::Impl::check_step_memory() const {
  const Device first = selection.devices.front();
  const std::int64_t per_replica = global_batch / strategy->world_replicas();
  const std::int64_t micro = (per_replica + config.accumulation - 1) / config.accumulation;
  check_host_memory(
      estimate_step_memory(strategy->model(0), *task.train, micro, strategy->local_replicas(),
                           optimizer_slots(), first.is_cpu()),
      "");
}

// Note [Parameter floor] (step_memory.h): before the replicas are built.
void Trainer::Impl::check_parameter_memory() const {
  if (!from_config || !selection.devices.front().is_cpu()) return;
  const auto spec = nlohmann::json::parse(task.model_description, nullptr, false);
  const std::uint64_t floor = parameter_floor(spec);
  const int local = static_cast<int>(selection.devices.size());
  check_host_memory(parameter_memory(floor, local, optimizer_slots()),
                    "The model '" + model_name + "' has at least " + std::to_string(floor) +
                        " parameters (its dense, embedding, convolution and recurrent layers alone): "
                        "make those layers smaller (dense and recurrent units, convolution "
                        "filters; an embedding's input_dim, which is the largest token id + 1 "
                        "unless stated)");
}

void Trainer::Impl::check_host_memory(const StepMemory& need, const std::string& advice) const {
  const MemoryPolicy& policy = selection.memory_policy;
  if (selection.devices.front().is_cpu() && policy.kind == MemoryPolicy::Kind::kLimit) {
    StepMemory one = need;  // the limit is per replica (each CPU replica has its allocator)
    one.replicas = 1;
    train::check_step_memory(one, policy.limit_bytes, "--memory " + policy.str() + " per replica",
                             advice);
  }
  // Every rank on this host runs the same step at the same time.
  StepMemory host = need;
  host.replicas = need.replicas * runtime.local_size();
  const std::size_t available = host_available_bytes();
  const auto budget =
      static_cast<std::uint64_t>(static_cast<double>(available) * kCpuGrowthCapFraction);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%d%%", static_cast<int>(kCpuGrowthCapFraction * 100));
  train::check_step_memory(host, budget,
                           std::string(pct) + " of this host's available memory (MemAvailable " +
                               std::to_string(available >> 20) + " MiB, " +
                               std::to_string(runtime.local_size()) + " rank(s) on it)",
                           advice);
}

void Trainer::Impl::make_loaders() {
  const int local = strategy->local_replicas();
  sample_pool = std::make_shared<data::SamplePool>(data_workers(config, runtime));
  for (int i = 0; i < local; ++i) {
    data::ShardSpec shard{strategy->first_replica() + i, strategy->world_replicas()};
    data::LoaderOptions train_opts;
    train_opts.global_batch = global_batch;
    train_opts.seed = config.seed;
    train_opts.last_batch = data::LastBatch::kPad;
    train_opts.bucket_by_length = task.train->variable_length();
    train_opts.augment = data::parse_image_augment(config.augment);
    train_opts.num_workers = kBatchAssemblers;
    train_opts.prefetch_depth = kPrefetchDepth;
    train_opts.sample_pool = sample_pool;
    train_opts.skip_bad_samples = config.skip_bad_samples;
    const Device device = strategy->devices()[static_cast<std::size_t>(i)];
    if (device.is_cuda()) {
      // Stage the batch on the replica's GPU from the loader's thread: the upload goes through
      // pinned buffers onto the device's stream ahead of the step that uses it.
      train_opts.on_ready = [device](data::Batch& b) {
        for (Tensor* t : {&b.inputs, &b.labels, &b.weights, &b.sample_ids}) *t = t->to(device);
      };
    }
    train_loaders.push_back(std::make_unique<data::Loader>(task.train, shard, train_opts));
    if (!task.test) continue;
    data::LoaderOptions test_opts = train_opts;
    test_opts.shuffle = false;
    test_opts.bucket_by_length = false;
    test_opts.augment = {};  // evaluation sees the images as they are
    test_loaders.push_back(std::make_unique<data::Loader>(task.test, shard, test_opts));
  }
}

void Trainer::Impl::write_trace() {
  if (config.trace.empty()) return;
  const auto all = runtime.all_gather_string(trace.serialise());
  if (!is_root()) return;
  try {
    nlohmann::json merged = merge_traces(all);
    if (log_mode(config) != LogMode::kAppend || !holds_data(config.trace)) {
      write_trace_file(config.trace, merged);
      return;
    }
    // Note [Appended traces]: the earlier runs' events stay in the file until the whole new
    // content is written beside it.
    const std::string marker = start.global_step > 0
                                   ? "resumed after step " + std::to_string(start.global_step)
                                   : "new run (--resume-or-start found no checkpoint)";
    merged = append_trace(read_trace_file(config.trace), merged, marker,
                          {{"step", start.global_step}, {"resume", config.resume}});
    const std::string partial = config.trace + ".partial";
    try {
      write_trace_file(partial, merged);
      std::filesystem::rename(partial, config.trace);
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(partial, ec);
      throw;
    }
  } catch (const std::exception& e) {  // Note [Telemetry failures]
    warn_telemetry_failure(e, "the trace");
  }
}

Trainer::Trainer(dist::Runtime& runtime, TrainConfig config, Task task)
    : impl_(std::make_unique<Impl>(runtime, std::move(config), std::move(task))) {}
Trainer::Trainer(dist::Runtime& runtime, TrainConfig config)
    : impl_(std::make_unique<Impl>(runtime, std::move(config), std::nullopt)) {}
Trainer::Trainer(dist::Runtime& runtime, TrainConfig config, Sources sources)
    : impl_(std::make_unique<Impl>(runtime, std::move(config), std::nullopt, std::move(sources))) {}
Trainer::~Trainer() = default;
FitSummary Trainer::fit() { return impl_->fit(); }
nn::Sequential& Trainer::model() { return impl_->strategy->model(0); }
void Trainer::set_callbacks(FitCallbacks callbacks) { impl_->callbacks = std::move(callbacks); }
const std::string& Trainer::model_description() const { return impl_->task.model_description; }

NamedTensors Trainer::weights() {
  // Every replica holds the same moving statistics after every step (Note [Buffers across
  // replicas], distributed/strategy_sync_bn.cpp): replica 0's are everyone's.
  NamedTensors out;
  nn::Sequential& model = impl_->strategy->model(0);
  // clone(): a snapshot, not a view of weights that a later fit() changes.
  for (nn::Parameter* p : model.parameters()) out[p->name] = p->value.to(Device::cpu()).clone();
  for (nn::Buffer* b : model.buffers()) out[b->name] = b->value.to(Device::cpu()).clone();
  return out;
}

}  // namespace mirror::train
