// Trainer: sets up devices, data, strategy and outputs, then runs fit/evaluate.
#include "mirror/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "mirror/error.h"
#include "mirror/optim/optimizer.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

dist::StrategyOptions strategy_options(const TrainConfig& c) {
  dist::StrategyOptions o;
  o.buckets.bytes = static_cast<std::size_t>(c.bucket_mb * (1 << 20));
  o.buckets.first_bytes = static_cast<std::size_t>(c.first_bucket_mb * (1 << 20));
  o.compression = dist::parse_compression(c.compression);
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

}  // namespace

Trainer::Impl::Impl(dist::Runtime& rt, TrainConfig cfg)
    : runtime(rt),
      config(std::move(cfg)),
      trace(rt.world_rank(), !config.trace.empty()),
      progress(rt.world_rank() == 0, config.progress && isatty(STDOUT_FILENO) != 0) {
  config.validate();
  runtime.set_default_timeout(
      std::chrono::milliseconds(static_cast<std::int64_t>(config.comm_timeout_s * 1000)));
  // Every rank must run the same job: compare the whole config (minus per-rank-free fields).
  runtime.check_same_across_ranks("training configuration", config.to_json().dump());

  dist::DeviceRequest request;
  request.devices = config.devices;
  request.memory_policy = config.memory;
  request.require_gpu = config.require_gpu;
  request.allow_sharing = config.allow_gpu_sharing;
  selection = runtime.setup_devices(request);
  omp_set_num_threads(config.threads > 0 ? config.threads
                                         : default_threads(runtime, selection.devices.size()));

  datasets = load_datasets(config);
  runtime.check_same_across_ranks("training data", datasets.checksum);

  const int local = static_cast<int>(selection.devices.size());
  const auto per_rank = runtime.all_gather_value<int>(local);
  int world_replicas = 0;
  for (int n : per_rank) world_replicas += n;
  global_batch = config.batch_size > 0          ? config.batch_size
                 : config.batch_per_replica > 0 ? config.batch_per_replica * world_replicas
                                                : 64;
  MIRROR_CHECK(global_batch % world_replicas == 0, InvalidArgument,
               "--batch-size " + std::to_string(global_batch) + " must be a multiple of the " +
                   std::to_string(world_replicas) + " replicas");
  lr_scale = config.lr_scale_by_replicas ? world_replicas : 1.0;

  const nn::ModelSpec spec = datasets.model;
  const std::uint64_t seed = config.seed;
  optim::OptimizerOptions opt;
  opt.momentum = config.optimizer == "sgd" ? config.momentum : 0.0;
  opt.weight_decay = config.weight_decay;
  const std::string opt_name = config.optimizer;
  optim::make_optimizer(opt_name, opt);  // validates the name before any replica is built
  strategy = std::make_unique<dist::MirroredStrategy>(
      runtime, selection.devices,
      [spec, seed](Device d) { return nn::make_model(spec, DType::kFloat32, d, seed); },
      [opt_name, opt] { return optim::make_optimizer(opt_name, opt); }, strategy_options(config));
  make_loaders();

  const std::int64_t steps_per_epoch = train_loaders.front()->steps_per_epoch();
  schedule = optim::make_schedule(config.schedule, config.lr, config.warmup_steps,
                                  steps_per_epoch * config.epochs);

  if (is_root()) {
    if (!config.checkpoint_dir.empty()) checkpoints.emplace(config.checkpoint_dir, config.keep);
    if (!config.log_jsonl.empty()) log = MetricsLog(config.log_jsonl, !config.resume.empty());
    progress.message("[mirror] model " + spec.name() + ": " +
                     std::to_string(strategy->model().parameter_count()) + " parameters; " +
                     std::to_string(world_replicas) + " replica(s); global batch " +
                     std::to_string(global_batch) + "; " + datasets.train->describe());
  }
}

void Trainer::Impl::make_loaders() {
  const int local = strategy->local_replicas();
  for (int i = 0; i < local; ++i) {
    data::ShardSpec shard{strategy->first_replica() + i, strategy->world_replicas()};
    data::LoaderOptions train_opts;
    train_opts.global_batch = global_batch;
    train_opts.seed = config.seed;
    train_opts.last_batch = data::LastBatch::kPad;
    train_opts.bucket_by_length = datasets.train->variable_length();
    const Device device = strategy->devices()[static_cast<std::size_t>(i)];
    if (device.is_cuda()) {
      // Stage the batch on the replica's GPU from the loader's thread: the upload goes through
      // pinned buffers onto the device's stream ahead of the step that uses it.
      train_opts.on_ready = [device](data::Batch& b) {
        for (Tensor* t : {&b.inputs, &b.labels, &b.weights, &b.sample_ids}) *t = t->to(device);
      };
    }
    train_loaders.push_back(std::make_unique<data::Loader>(datasets.train, shard, train_opts));
    data::LoaderOptions test_opts = train_opts;
    test_opts.shuffle = false;
    test_opts.bucket_by_length = false;
    test_loaders.push_back(std::make_unique<data::Loader>(datasets.test, shard, test_opts));
  }
}

dist::StepResult Trainer::Impl::evaluate() {
  auto span = trace.span("evaluate", "eval");
  for (auto& l : test_loaders) l->start(0, 1, 0);
  dist::StepResult total;
  std::vector<data::Batch> batches(test_loaders.size());
  for (;;) {
    for (std::size_t i = 0; i < test_loaders.size(); ++i) {
      auto b = test_loaders[i]->next();
      if (!b) return total;
      batches[i] = std::move(*b);
    }
    const auto r = strategy->evaluate_step(batches);
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.count += r.count;
  }
}

Trainer::Trainer(dist::Runtime& runtime, TrainConfig config)
    : impl_(std::make_unique<Impl>(runtime, std::move(config))) {}
Trainer::~Trainer() = default;
FitSummary Trainer::fit() { return impl_->fit(); }

FitSummary Trainer::Impl::fit() {
  const StartPoint start = restore();
  runtime.barrier();  // line the ranks' trace clocks up
  trace.set_epoch_now();
  const std::int64_t steps_per_epoch = train_loaders.front()->steps_per_epoch();
  const auto t0 = Clock::now();
  FitSummary summary;
  summary.world_replicas = strategy->world_replicas();
  summary.devices = selection.devices_str();
  std::int64_t global_step = start.global_step, samples = 0;
  bool stop = false;
  std::vector<data::Batch> batches(train_loaders.size());

  for (int epoch = start.epoch; epoch < config.epochs && !stop; ++epoch) {
    const std::int64_t first = epoch == start.epoch ? start.step_in_epoch : 0;
    for (auto& l : train_loaders) l->start(epoch, 1, first);
    const auto epoch_t0 = Clock::now();
    double loss_sum = 0, wait0 = 0;
    std::int64_t correct = 0, count = 0, epoch_samples = 0;
    for (auto& l : train_loaders) wait0 = std::max(wait0, l->wait_seconds());
    for (std::int64_t step = first; step < steps_per_epoch; ++step) {
      const auto step_t0 = Clock::now();
      double wait_before = 0, wait_after = 0;
      {
        auto span = trace.span("data wait", "data");
        for (std::size_t i = 0; i < train_loaders.size(); ++i) {
          wait_before = std::max(wait_before, train_loaders[i]->wait_seconds());
          auto b = train_loaders[i]->next();
          MIRROR_CHECK(b.has_value(), Error, "loader ended before the epoch did");
          batches[i] = std::move(*b);
          wait_after = std::max(wait_after, train_loaders[i]->wait_seconds());
        }
      }
      const double lr = schedule->lr_at(global_step) * lr_scale;
      const double compute_t0 = trace.now_us();
      const dist::StepResult r = strategy->train_step(batches, lr);
      // The strategy reports phase durations; lay them out as spans of this step.
      double ts = compute_t0;
      for (auto [name, ms] : {std::pair{"forward", r.timing.forward_ms},
                              {"backward", r.timing.backward_ms},
                              {"all-reduce wait", r.timing.exposed_comm_ms},
                              {"optimizer", r.timing.optimizer_ms}}) {
        if (trace.enabled()) trace.record(name, "step", ts, ms * 1000, {{"step", global_step}});
        ts += ms * 1000;
      }
      if (trace.enabled()) {
        for (const auto& b : r.timing.buckets) {
          trace.record("all-reduce bucket " + std::to_string(b.index), "comm",
                       compute_t0 + b.launch_ms * 1000, (b.done_ms - b.launch_ms) * 1000,
                       {{"step", global_step}, {"bucket", b.index}});
        }
      }
      ++global_step;
      loss_sum += r.loss_sum;
      correct += r.correct;
      count += r.count;
      epoch_samples += r.count;
      const double step_s = seconds_since(step_t0);
      const double sps = static_cast<double>(r.count) / std::max(step_s, 1e-9);
      const double elapsed = seconds_since(epoch_t0);
      progress.step(epoch, config.epochs, step + 1, steps_per_epoch,
                    epoch_samples / std::max(elapsed, 1e-9),
                    elapsed / double(step + 1 - first) * double(steps_per_epoch - step - 1),
                    count ? loss_sum / count : 0, count ? double(correct) / count : 0);
      if (log.enabled()) {
        log.write(
            {{"type", "step"},
             {"step", global_step},
             {"epoch", epoch},
             {"loss", r.loss},
             {"accuracy", r.count ? double(r.correct) / r.count : 0.0},
             {"lr", lr},
             {"samples_per_s", sps},
             {"step_ms", step_s * 1000},
             {"data_wait_ms", (wait_after - wait_before) * 1000},
             {"compute_ms", r.timing.forward_ms + r.timing.backward_ms + r.timing.optimizer_ms},
             {"exposed_comm_ms", r.timing.exposed_comm_ms},
             {"skipped", r.skipped}});
      }
      const StartPoint next{step + 1 == steps_per_epoch ? epoch + 1 : epoch,
                            step + 1 == steps_per_epoch ? 0 : step + 1, global_step};
      const bool last = config.max_steps > 0 && global_step - start.global_step >= config.max_steps;
      if (config.checkpoint_every > 0 && global_step % config.checkpoint_every == 0)
        save_checkpoint(next);
      else if (!config.checkpoint_dir.empty() && (next.step_in_epoch == 0 || last))
        save_checkpoint(next);
      if (last) {
        stop = true;
        break;
      }
    }
    samples += epoch_samples;
    double wait1 = 0;
    for (auto& l : train_loaders) wait1 = std::max(wait1, l->wait_seconds());
    const dist::StepResult test = evaluate();
    summary.train_loss = count ? loss_sum / count : 0;
    summary.train_accuracy = count ? double(correct) / count : 0;
    summary.test_loss = test.count ? test.loss_sum / test.count : 0;
    summary.test_accuracy = test.count ? double(test.correct) / test.count : 0;
    summary.data_wait_seconds += wait1 - wait0;
    const double epoch_s = seconds_since(epoch_t0);
    char line[320];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d: loss %.4f accuracy %.4f | test loss %.4f accuracy %.4f | %.1f s, "
                  "%.0f samples/s, "
                  "data wait %.2f s",
                  epoch + 1, config.epochs, summary.train_loss, summary.train_accuracy,
                  summary.test_loss, summary.test_accuracy, epoch_s,
                  epoch_samples / std::max(epoch_s, 1e-9), wait1 - wait0);
    progress.epoch_done(line);
    if (log.enabled()) {
      log.write({{"type", "epoch"},
                 {"epoch", epoch},
                 {"step", global_step},
                 {"loss", summary.train_loss},
                 {"accuracy", summary.train_accuracy},
                 {"test_loss", summary.test_loss},
                 {"test_accuracy", summary.test_accuracy},
                 {"seconds", epoch_s},
                 {"samples_per_s", epoch_samples / std::max(epoch_s, 1e-9)},
                 {"data_wait_s", wait1 - wait0}});
    }
  }
  summary.steps = global_step - start.global_step;
  summary.final_step = global_step;
  summary.wall_seconds = seconds_since(t0);
  summary.samples_per_second = samples / std::max(summary.wall_seconds, 1e-9);
  strategy->check_replicas_identical();
  summary.weights_fingerprint = strategy->weights_fingerprint();
  write_trace();
  if (is_root()) {
    char line[512];
    std::snprintf(
        line, sizeof line,
        "test accuracy: %.4f\ntest loss: %.4f\nwall time: %.1f s, %.0f samples/s, %lld steps\n"
        "replicas: %d (rank 0 devices: %s)\nweights fingerprint: %016llx",
        summary.test_accuracy, summary.test_loss, summary.wall_seconds, summary.samples_per_second,
        static_cast<long long>(summary.steps), summary.world_replicas, summary.devices.c_str(),
        static_cast<unsigned long long>(summary.weights_fingerprint));
    progress.message(line);
    if (log.enabled()) {
      log.write({{"type", "summary"},
                 {"test_accuracy", summary.test_accuracy},
                 {"test_loss", summary.test_loss},
                 {"wall_seconds", summary.wall_seconds},
                 {"samples_per_s", summary.samples_per_second},
                 {"steps", summary.steps},
                 {"final_step", summary.final_step},
                 {"replicas", summary.world_replicas}});
    }
  }
  return summary;
}

void Trainer::Impl::write_trace() {
  if (config.trace.empty()) return;
  const auto all = runtime.all_gather_string(trace.serialise());
  if (is_root()) write_trace_file(config.trace, merge_traces(all));
}

}  // namespace mirror::train
