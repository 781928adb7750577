// The fit loop: per epoch, per step: next batches -> train step -> record metrics -> tell the
// observers; at the end of an epoch: evaluate and tell the observers. Telemetry (progress, JSON
// log, trace, checkpoints) lives in the observers (trainer_observers.cpp), not here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "mirror/distributed/preemption.h"
#include "mirror/error.h"
#include "train/trainer_impl.h"

namespace mirror::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double max_wait(const std::vector<std::unique_ptr<data::Loader>>& loaders) {
  double w = 0;
  for (const auto& l : loaders) w = std::max(w, l->wait_seconds());
  return w;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

/// Keras's names for the fit callbacks and the history: loss and metrics, then val_ ones.
Logs logs_of(const MetricSums& train, const MetricSums* test) {
  Logs logs = {{"loss", train.loss()}};
  for (auto [name, value] : train.named()) logs.emplace_back(name, value);
  if (!test) return logs;
  logs.emplace_back("val_loss", test->loss());
  for (auto [name, value] : test->named()) logs.emplace_back(std::string("val_") + name, value);
  return logs;
}

}  // namespace

// Note [Fit callbacks] (trainer.h): the answers are gathered as one short string per rank:
// "" to go on, "s" to stop, "e" and the message of what the hook threw.
bool Trainer::Impl::agree_on_callback(const std::function<bool()>& hook, const std::string& where) {
  std::string mine;
  try {
    if (hook()) mine = "s";
  } catch (const std::exception& e) {
    mine = "e" + message_for(e);
  }
  const std::vector<std::string> all = runtime.all_gather_string(mine);
  bool stop = false;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty() && all[r][0] == 'e') {
      throw JobStopped("training stopped at " + where + ": a callback failed on rank " +
                           std::to_string(r) + ": " + all[r].substr(1),
                       1, static_cast<std::size_t>(runtime.world_rank()) == r);
    }
    stop = stop || all[r] == "s";
  }
  if (stop && is_root()) {
    progress.message("[mirror] a callback asked to stop at " + where + "; every rank stops" +
                     (config.checkpoint_dir.empty()
                          ? std::string()
                          : " (checkpoint in " + config.checkpoint_dir + ")"));
  }
  return stop;
}

// Note [Failed runs]: a run whose loss is no longer finite, or whose steps keep being skipped
// (non-finite gradients: no update anywhere, MirroredStrategy::train_step), learns nothing and
// must not end with exit code 0 and a summary that looks like a result. The step result is the
// same on every rank (it comes through the step's all-reduce), so every rank stops at the same
// step with the same JobStopped (Note [Agreed errors], trainer.h), before the observers see the
// step: no checkpoint holds it, and the newest checkpoint stays resumable. One skipped step is
// tolerated (a rare spike); --max-skipped-steps in a row are not.
void Trainer::Impl::check_step_health(const StepEvent& e, int& skipped_in_a_row) const {
  const dist::StepResult& r = *e.result;
  const std::string where = "training stopped at step " + std::to_string(e.global_step) +
                            " (epoch " + std::to_string(e.epoch + 1) + "): ";
  const std::string advice =
      "; lower --lr (now " + number(e.lr) + "), check the data for huge or non-finite values" +
      (config.checkpoint_dir.empty()
           ? std::string()
           : ", and resume from the newest checkpoint in " + config.checkpoint_dir);
  if (r.skipped) {
    ++skipped_in_a_row;
    if (config.max_skipped_steps > 0 && skipped_in_a_row >= config.max_skipped_steps) {
      throw JobStopped(where + std::to_string(skipped_in_a_row) +
                           " steps in a row were skipped because their gradients were not "
                           "finite (loss " +
                           number(r.loss) + "), so the model no longer learns" + advice +
                           " (--max-skipped-steps sets how many skips in a row stop a run)",
                       1, is_root());
    }
    return;
  }
  skipped_in_a_row = 0;
  if (!std::isfinite(r.loss)) {
    throw JobStopped(where + "the loss is " + number(r.loss) + advice, 1, is_root());
  }
}

/// One epoch in progress: where it started, its clock and its metric sums so far.
struct Trainer::Impl::EpochRun {
  int epoch = 0;
  std::int64_t first_step = 0;
  std::int64_t steps = 0;
  Clock::time_point start;
  double wait_at_start = 0;
  MetricSums metrics;
  dist::StepResult last;  // the StepEvent of the current step points at it
};

FitSummary Trainer::Impl::fit() {
  // `start` comes from the constructor's restore() (a second fit() starts there again).
  runtime.barrier();  // line the ranks' trace clocks up
  trace.set_epoch_now();
  const auto observers = make_observers(*this);
  const auto t0 = Clock::now();
  FitSummary summary;
  summary.loss = dist::loss_name(loss);
  std::int64_t global_step = start.global_step;
  std::int64_t samples = 0;
  // --max-steps is a global step, like --epochs: a resumed run stops where the whole run would.
  const auto reached = [&](std::int64_t step) {
    return config.max_steps > 0 && step >= config.max_steps;
  };
  bool stop = reached(global_step);
  int skipped_in_a_row = 0;
  if (stop && is_root())
    progress.message("[mirror] global step " + std::to_string(global_step) +
                     " already reaches --max-steps; nothing to train");
  summary.first_epoch = start.epoch;
  for (int epoch = start.epoch; epoch < config.epochs && !stop; ++epoch) {
    EpochRun run = begin_epoch(epoch, epoch == start.epoch ? start.step_in_epoch : 0);
    for (std::int64_t step = run.first_step; step < run.steps && !stop; ++step) {
      const auto step_start = Clock::now();
      double wait = 0;
      std::vector<data::Batch> batches = next_batches(wait);
      StepEvent event = train_step(run, batches, step, global_step++);
      event.data_wait_seconds = wait;
      event.step_seconds = seconds_since(step_start);
      record_step(run, event);
      check_step_health(event, skipped_in_a_row);
      // Note [Preemption]: the flag came through the step's all-reduce, so every rank stops
      // here; the checkpoint observer saves at the last step.
      summary.preempted = event.result->stop_requested;
      if (!summary.preempted && callbacks.on_step_end) {
        const Logs logs = logs_of(*event.epoch_metrics, nullptr);
        const std::int64_t at = event.global_step;
        summary.stopped_by_callback = agree_on_callback(
            [&] { return callbacks.on_step_end(at, logs); }, "step " + std::to_string(at));
      }
      stop = event.last = summary.preempted || summary.stopped_by_callback || reached(global_step);
      for (auto& o : observers) o->on_step(event);
    }
    if (summary.preempted) {
      // The summary tells the part of the epoch that ran, not zeros.
      samples += run.metrics.count;
      summary.train_loss = run.metrics.loss();
      summary.train_accuracy = run.metrics.accuracy();
      summary.train_mse = run.metrics.mse();
      summary.train_mae = run.metrics.mae();
      report_preemption(global_step);
      break;  // no evaluation of a partial epoch: the grace period is short
    }
    const EpochEvent done = end_epoch(run, global_step);
    samples += done.samples;
    summary.train_loss = done.train.loss();
    summary.train_accuracy = done.train.accuracy();
    summary.train_mse = done.train.mse();
    summary.train_mae = done.train.mae();
    summary.evaluated = done.test.has_value();
    if (done.test) {
      summary.test_loss = done.test->loss();
      summary.test_accuracy = done.test->accuracy();
      summary.test_mse = done.test->mse();
      summary.test_mae = done.test->mae();
    }
    summary.data_wait_seconds += done.data_wait_seconds;
    for (auto& o : observers) o->on_epoch(done);
    summary.history.push_back(logs_of(done.train, done.test ? &*done.test : nullptr));
    if (callbacks.on_epoch_end) {
      const Logs& logs = summary.history.back();
      if (agree_on_callback([&] { return callbacks.on_epoch_end(epoch, logs); },
                            "the end of epoch " + std::to_string(epoch + 1))) {
        summary.stopped_by_callback = stop = true;
      }
    }
  }
  summary.steps = global_step - start.global_step;
  summary.final_step = global_step;
  summary.wall_seconds = seconds_since(t0);
  summary.samples_per_second = static_cast<double>(samples) / std::max(summary.wall_seconds, 1e-9);
  summary = finish(summary);
  for (auto& o : observers) o->on_end(summary);
  return summary;
}

Trainer::Impl::EpochRun Trainer::Impl::begin_epoch(int epoch, std::int64_t first_step) {
  for (auto& l : train_loaders) l->start(epoch, 1, first_step);
  EpochRun run;
  run.epoch = epoch;
  run.first_step = first_step;
  run.steps = train_loaders.front()->steps_per_epoch();
  run.start = Clock::now();
  run.wait_at_start = max_wait(train_loaders);
  run.metrics.kind = loss;
  return run;
}

std::vector<data::Batch> Trainer::Impl::next_batches(double& wait_seconds) {
  auto span = trace.span("data wait", "data");
  std::vector<data::Batch> batches(train_loaders.size());
  double before = 0, after = 0;
  for (std::size_t i = 0; i < train_loaders.size(); ++i) {
    before = std::max(before, train_loaders[i]->wait_seconds());
    auto b = train_loaders[i]->next();
    MIRROR_CHECK(b.has_value(), Error, "loader ended before the epoch did");
    batches[i] = std::move(*b);
    after = std::max(after, train_loaders[i]->wait_seconds());
  }
  wait_seconds = after - before;
  return batches;
}

StepEvent Trainer::Impl::train_step(EpochRun& run, std::vector<data::Batch>& batches,
                                    std::int64_t step, std::int64_t global_step) {
  StepEvent e;
  e.epoch = run.epoch;
  e.step = step;
  e.first_step = run.first_step;
  e.steps_per_epoch = run.steps;
  e.lr = schedule->lr_at(global_step) * lr_scale;
  e.compute_start_us = trace.now_us();
  run.last = strategy->train_step(batches, e.lr);
  e.result = &run.last;
  e.global_step = global_step + 1;
  const bool epoch_ends = step + 1 == run.steps;
  e.next = {epoch_ends ? run.epoch + 1 : run.epoch, epoch_ends ? 0 : step + 1, e.global_step};
  return e;
}

void Trainer::Impl::record_step(EpochRun& run, StepEvent& event) {
  run.metrics.add(*event.result);  // run.metrics.kind was set by begin_epoch
  event.epoch_metrics = &run.metrics;
  event.epoch_seconds = seconds_since(run.start);
}

EpochEvent Trainer::Impl::end_epoch(EpochRun& run, std::int64_t global_step) {
  EpochEvent e;
  e.epoch = run.epoch;
  e.global_step = global_step;
  e.train = run.metrics;
  e.samples = run.metrics.count;
  e.data_wait_seconds = max_wait(train_loaders) - run.wait_at_start;
  const auto eval_start = Clock::now();
  e.test = evaluate();
  e.eval_seconds = seconds_since(eval_start);
  e.seconds = seconds_since(run.start);
  return e;
}

std::optional<MetricSums> Trainer::Impl::evaluate() {
  if (test_loaders.empty()) return std::nullopt;
  auto span = trace.span("evaluate", "eval");
  for (auto& l : test_loaders) l->start(0, 1, 0);
  MetricSums total;
  total.kind = loss;
  std::vector<data::Batch> batches(test_loaders.size());
  for (;;) {
    for (std::size_t i = 0; i < test_loaders.size(); ++i) {
      auto b = test_loaders[i]->next();
      if (!b) return total;
      batches[i] = std::move(*b);
    }
    total.add(strategy->evaluate_step(batches));
  }
}

void Trainer::Impl::report_preemption(std::int64_t global_step) {
  if (!is_root()) return;
  std::string where = "no --checkpoint-dir, so nothing was saved";
  if (!config.checkpoint_dir.empty())
    where = "checkpoint written to " + config.checkpoint_dir + "; resume with --resume " +
            config.checkpoint_dir;
  progress.message("[mirror] stop signal received: every rank stopped after step " +
                   std::to_string(global_step) + "; " + where + " (exit code " +
                   std::to_string(dist::kExitPreempted) + ")");
}

/// Note [Bad samples] (loader.h): rank 0 says how many samples every rank replaced, and which.
void Trainer::Impl::report_bad_samples() {
  if (!config.skip_bad_samples) return;
  std::int64_t replaced = 0;
  std::map<std::string, std::string> bad;  // "split index" -> the first error
  for (const auto* loaders : {&train_loaders, &test_loaders}) {
    for (const auto& l : *loaders) {
      replaced += l->bad_samples_replaced();
      const char* split = loaders == &train_loaders ? "train " : "test ";
      for (const auto& [index, error] : l->bad_samples()) bad.emplace(split + std::to_string(index), error);
    }
  }
  nlohmann::json mine = {{"replaced", replaced}, {"bad", bad}};
  const auto all = runtime.all_gather_string(mine.dump());
  if (!is_root()) return;
  replaced = 0;
  bad.clear();
  for (const std::string& text : all) {
    const auto j = nlohmann::json::parse(text);
    replaced += j.at("replaced").get<std::int64_t>();
    for (const auto& [key, error] : j.at("bad").items()) bad.emplace(key, error.get<std::string>());
  }
  std::string line = "[mirror] --skip-bad-samples: " + std::to_string(replaced) +
                     " bad sample(s) replaced by the next good one (" +
                     std::to_string(bad.size()) + " distinct)";
  if (!bad.empty()) line += "; the first: " + bad.begin()->second;
  progress.message(line);
}

FitSummary Trainer::Impl::finish(const FitSummary& partial) {
  report_bad_samples();
  FitSummary summary = partial;
  summary.world_replicas = strategy->world_replicas();
  summary.devices = selection.devices_str();
  strategy->check_replicas_identical();
  summary.weights_fingerprint = strategy->weights_fingerprint();
  write_trace();
  return summary;
}

}  // namespace mirror::train
