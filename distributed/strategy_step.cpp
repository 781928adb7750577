// MirroredStrategy steps: micro-batches, the gradient-ready hook that launches buckets in order,
// compression, the wait for what backward did not hide, the non-finite check, the optimizer step,
// the out-of-memory split, and the metrics all-reduce.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "distributed/strategy_replica.h"
#include "mirror/distributed/preemption.h"
#include "mirror/distributed/strategy.h"
#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::dist {

using Clock = std::chrono::steady_clock;

namespace detail {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

data::Batch slice_batch(const data::Batch& batch, std::int64_t begin, std::int64_t end) {
  auto rows = [&](const Tensor& t) {
    if (!t.defined()) return t;
    Shape shape = t.shape();
    const std::int64_t row = shape[0] > 0 ? t.numel() / shape[0] : 0;
    shape[0] = end - begin;
    return t.view(begin * row, shape);
  };
  data::Batch out;
  out.inputs = rows(batch.inputs);
  out.labels = rows(batch.labels);
  out.weights = rows(batch.weights);
  out.sample_ids = rows(batch.sample_ids);
  if (!batch.lengths.empty()) {
    out.lengths.assign(batch.lengths.begin() + begin, batch.lengths.begin() + end);
  }
  if (!batch.label_counts.empty()) {
    out.label_counts.assign(batch.label_counts.begin() + begin, batch.label_counts.begin() + end);
  }
  out.global_count = batch.global_count;
  out.global_label_count = batch.global_label_count;
  out.step = batch.step;
  out.epoch = batch.epoch;
  return out;
}

data::Batch to_device(const data::Batch& batch, Device device) {
  data::Batch out = batch;
  auto move = [&](Tensor& t) {
    if (t.defined()) t = t.to(device);
  };
  move(out.inputs);
  move(out.labels);
  move(out.weights);
  move(out.sample_ids);
  return out;
}

std::int64_t real_count(const data::Batch& batch) {
  if (batch.size() == 0) return 0;
  const auto w = batch.weights.to(Device::cpu()).to_vector<float>();
  return std::count_if(w.begin(), w.end(), [](float x) { return x > 0.0f; });
}

}  // namespace detail

namespace {

constexpr std::int64_t kMetricValues = 7;  // loss, correct, count, ... (launch_metrics)

DType wire_dtype(Compression c) {
  return c == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16;
}

/// Whether a bucket travels in 16 bits (Options::compression applies to float32 buckets).
bool compressed(Compression c, const Tensor& buffer) {
  return c != Compression::kNone && buffer.dtype() == DType::kFloat32;
}

void check_batches(const std::vector<data::Batch>& batches, int local_replicas, const char* what) {
  MIRROR_CHECK(static_cast<int>(batches.size()) == local_replicas, InvalidArgument,
               std::string(what) + ": expected one batch per local replica (" +
                   std::to_string(local_replicas) + "), got " + std::to_string(batches.size()));
  for (const auto& b : batches) {
    MIRROR_CHECK(b.global_count > 0, InvalidArgument,
                 std::string(what) +
                     ": batch.global_count must be the number of real samples "
                     "in the global batch (> 0), got " +
                     std::to_string(b.global_count));
    MIRROR_CHECK(b.step == batches[0].step, InvalidArgument,
                 std::string(what) + ": local batches disagree on the step index (" +
                     std::to_string(b.step) + " vs " + std::to_string(batches[0].step) + ")");
    MIRROR_CHECK(b.labels.defined() && b.weights.defined(), InvalidArgument,
                 std::string(what) + ": a batch needs labels and weights");
  }
}

std::string loss_mismatch(LossKind loss, const char* what, const Shape& output,
                          const Tensor& labels, const std::string& expected) {
  return std::string(what) + ": loss " + loss_name(loss) + " " + expected +
         ", but the model's output is " + shape_str(output) + " per sample and the targets are " +
         dtype_name(labels.dtype()) + " " + shape_str(labels.shape());
}

/// Class labels need softmax cross-entropy and float targets BCE or MSE, with as many elements
/// per sample as the model outputs. Checked on the host before any replica starts, so every
/// replica (and every rank, which sees the same kind of data) fails the same step together.
void check_loss_inputs(const std::vector<data::Batch>& batches, LossKind loss, const Shape& output,
                       const char* what) {
  for (const auto& b : batches) {
    const Tensor& y = b.labels;
    const bool classes = y.dtype() == DType::kInt32;
    if (loss == LossKind::kSoftmaxCrossEntropy) {
      // Note [Dense labels]: per-step labels [n, T] for an output [T, K], per-pixel [n, H, W]
      // for [K, H, W], with the labelled positions of each sample.
      const bool steps = y.rank() == 2 && output.size() == 2;
      const bool pixels =
          y.rank() == 3 && output.size() == 3 && y.dim(1) == output[1] && y.dim(2) == output[2];
      MIRROR_CHECK(
          !(steps || pixels) || static_cast<std::int64_t>(b.label_counts.size()) == y.dim(0),
          InvalidArgument,
          std::string(what) + ": per-step or per-pixel labels need the batch's label counts");
      MIRROR_CHECK(
          classes && ((y.rank() == 1 && output.size() == 1) || steps || pixels), InvalidArgument,
          loss_mismatch(loss, what, output, y,
                        "needs int32 class labels [n] and an output [classes]") +
              (classes ? std::string() : "; for float targets choose binary-cross-entropy or mse"));
      continue;
    }
    const std::int64_t width = shape_numel(output);
    const std::int64_t per_sample = y.rank() >= 1 && y.dim(0) > 0 ? y.numel() / y.dim(0) : -1;
    const Shape sample(y.shape().begin() + (y.rank() >= 1 ? 1 : 0), y.shape().end());
    MIRROR_CHECK(!classes && (y.dtype() == DType::kFloat32 || y.dtype() == DType::kFloat64),
                 InvalidArgument,
                 loss_mismatch(loss, what, output, y, "needs float targets") +
                     "; for class labels choose softmax-cross-entropy");
    MIRROR_CHECK(
        y.rank() >= 1 && (y.dim(0) == 0 ? shape_numel(sample) == width : per_sample == width),
        InvalidArgument,
        loss_mismatch(loss, what, output, y,
                      "needs one output per target element (" +
                          std::to_string(shape_numel(sample)) + " per sample here)") +
            "; make the model's last layer that wide");
  }
}

/// The buckets as the optimizer's flat groups (Note [Fused update]): one fused update per bucket.
std::vector<optim::FlatGroup> optimizer_groups(const BucketPlan& plan,
                                               const std::vector<nn::Parameter*>& params,
                                               const std::vector<Tensor>& buffers) {
  std::vector<optim::FlatGroup> groups(plan.buckets.size());
  for (const Bucket& b : plan.buckets) {
    optim::FlatGroup& g = groups[static_cast<std::size_t>(b.index)];
    for (const int p : b.params) g.params.push_back(params[static_cast<std::size_t>(p)]);
    g.offsets = b.offsets;
    g.grad = buffers[static_cast<std::size_t>(b.index)];
  }
  return groups;
}

}  // namespace

// ================================================================ buckets

// Note [Metrics first]: the step's metrics all-reduce (loss, correct, count and the float-target
// sums) is issued just before bucket 0, by the same code path whether bucket 0 launches during
// backward or after it, so every replica issues metrics, bucket 0, bucket 1, ... in that order. It
// then travels with the gradients instead of costing a round trip of its own after them. Every
// forward of the step has run by then: the gradient-ready hook is only armed for the last
// micro-batch's backward.
void MirroredStrategy::launch_train_metrics(Replica& r) {
  if (r.now->metrics_launched) return;
  // Every forward of the step has run, so the moving statistics are final for it.
  r.now->metrics_work =
      launch_metrics(r, r.now->metrics, r.now->count, "train", r.local_buffers);
  r.now->metrics_launched = true;
}

void MirroredStrategy::launch_bucket(Replica& r, int b) {
  if (b == 0) launch_train_metrics(r);
  const std::string tag = "step " + std::to_string(r.now->step) + " bucket " + std::to_string(b);
  Tensor& buffer = r.buffers[static_cast<std::size_t>(b)];
  if (compressed(options_.compression, buffer)) {
    // The 16-bit copy is kept from step to step: a new one per step was a new allocation.
    Tensor& wire = r.wire[static_cast<std::size_t>(b)];
    if (!wire.defined())
      wire = Tensor::empty(buffer.shape(), wire_dtype(options_.compression), buffer.device());
    ops::cast_into(buffer, wire);
    r.now->works[static_cast<std::size_t>(b)] = r.comm->all_reduce(wire, wire, ReduceOp::kSum, tag);
  } else {
    r.now->works[static_cast<std::size_t>(b)] =
        r.comm->all_reduce(buffer, buffer, ReduceOp::kSum, tag);
  }
  r.now->launched_ms[static_cast<std::size_t>(b)] = detail::ms_since(r.now->start);
  r.now->next_launch = b + 1;
}

void MirroredStrategy::on_grads_ready(Replica& r, const std::vector<nn::Parameter*>& ready) {
  for (const nn::Parameter* p : ready) {
    const auto it = r.index_of.find(p);
    if (it == r.index_of.end()) continue;
    --r.now->pending[static_cast<std::size_t>(
        plan_.bucket_of[static_cast<std::size_t>(it->second)])];
  }
  // Strictly in index order on every replica: a ready bucket waits for its predecessors.
  const int n = static_cast<int>(plan_.buckets.size());
  while (r.now->next_launch < n &&
         r.now->pending[static_cast<std::size_t>(r.now->next_launch)] == 0) {
    launch_bucket(r, r.now->next_launch);
  }
  // Non-blocking collectives progress when tested; a test per layer keeps them moving.
  for (int b = 0; b < r.now->next_launch; ++b) {
    auto& w = r.now->works[static_cast<std::size_t>(b)];
    if (w && w->done() && r.now->done_ms[static_cast<std::size_t>(b)] < 0) {
      r.now->done_ms[static_cast<std::size_t>(b)] = detail::ms_since(r.now->start);
    }
  }
}

void MirroredStrategy::finish_buckets(Replica& r) {
  const int n = static_cast<int>(plan_.buckets.size());
  while (r.now->next_launch < n) launch_bucket(r, r.now->next_launch);
  for (int b = 0; b < n; ++b) {
    auto& w = r.now->works[static_cast<std::size_t>(b)];
    w->wait();
    w.reset();
    double& done = r.now->done_ms[static_cast<std::size_t>(b)];
    if (done < 0) done = detail::ms_since(r.now->start);
    r.now->timing.buckets.push_back({b, r.now->launched_ms[static_cast<std::size_t>(b)], done});
  }
  // Widened only once every sum has arrived: the communication thread polls at full speed only
  // while somebody waits, so widening one bucket between the waits left the next one crawling.
  for (int b = 0; b < n; ++b) {
    Tensor& buffer = r.buffers[static_cast<std::size_t>(b)];
    if (compressed(options_.compression, buffer))
      ops::cast_into(r.wire[static_cast<std::size_t>(b)], buffer);
  }
}

ReplicaStep::ReplicaStep(std::int64_t step_, Clock::time_point start_, std::int64_t count_,
                         const BucketPlan& plan)
    : step(step_),
      start(start_),
      count(count_),
      pending(plan.buckets.size(), 0),
      works(plan.buckets.size()),
      launched_ms(plan.buckets.size(), -1.0),
      done_ms(plan.buckets.size(), -1.0) {
  for (const Bucket& b : plan.buckets) {
    pending[static_cast<std::size_t>(b.index)] = static_cast<int>(b.params.size());
  }
}

Tensor MirroredStrategy::add_loss(Replica& r, const Tensor& logits, const data::Batch& micro,
                                  const std::vector<std::int32_t>& output_lengths) {
  const auto count = static_cast<double>(micro.global_count);
  if (options_.loss == LossKind::kSoftmaxCrossEntropy && micro.labels.rank() > 1) {
    // Note [Dense labels]: the model's output mask (its lengths) must be the one the loader
    // counted for the global divisor; a difference would bias the mean silently.
    const std::int64_t steps = micro.labels.rank() == 2 ? micro.labels.dim(1) : 0;
    for (std::size_t i = 0; steps > 0 && i < micro.label_counts.size(); ++i) {
      const std::int32_t c = micro.label_counts[i];
      const std::int64_t valid = output_lengths.size() == micro.label_counts.size()
                                     ? std::min<std::int64_t>(output_lengths[i], steps)
                                     : steps;
      MIRROR_CHECK(c == 0 || c == valid, Error,
                   "sample " + std::to_string(i) + " of the batch has " + std::to_string(c) +
                       " labelled steps but the model's output has " + std::to_string(valid) +
                       " valid steps (its mask); the labels' padding must be the input's "
                       "(trailing zeros) and masked in the model (mask_zero / Masking)");
    }
    ops::DenseLossResult loss =
        ops::dense_softmax_cross_entropy(logits, micro.labels, micro.weights, micro.label_counts,
                                         static_cast<double>(micro.global_label_count));
    r.now->loss += loss.loss;
    r.now->correct += loss.correct;
    r.now->target_values += loss.counted;
    return loss.dlogits;
  }
  if (options_.loss == LossKind::kSoftmaxCrossEntropy) {
    ops::LossResult loss = ops::softmax_cross_entropy(logits, micro.labels, micro.weights, count);
    r.now->loss += loss.loss;
    r.now->correct += ops::correct_count(logits, micro.labels, micro.weights);
    return loss.dlogits;
  }
  // check_loss_inputs made the targets' elements per sample equal the output's; an output of
  // several axes (an autoencoder's image) is one row of elements per sample.
  const Tensor rows =
      logits.reshape({logits.dim(0), logits.numel() / std::max<std::int64_t>(logits.dim(0), 1)});
  Tensor targets = micro.labels.reshape(rows.shape());
  if (targets.dtype() != logits.dtype()) targets = ops::cast(targets, logits.dtype());
  const auto kind = options_.loss == LossKind::kBinaryCrossEntropy
                        ? ops::TargetLoss::kBinaryCrossEntropy
                        : ops::TargetLoss::kMeanSquaredError;
  ops::TargetLossResult loss = ops::target_loss(kind, rows, targets, micro.weights, count);
  r.now->loss += loss.loss;
  r.now->correct += loss.correct;
  r.now->target_values += loss.target_values;
  r.now->squared_error += loss.squared_error_sum;
  r.now->abs_error += loss.abs_error_sum;
  return loss.dlogits.reshape(logits.shape());
}

// ================================================================ micro-batches

void MirroredStrategy::run_micro_batches(Replica& r, const data::Batch& batch, bool training,
                                         bool overlap) {
  const std::int64_t n = batch.size();
  const int parts = (training ? options_.accumulation_steps : 1) * r.oom.split;
  MIRROR_CHECK(parts <= std::max<std::int64_t>(n, 1), OutOfMemory,
               "out of memory on " + r.device.str() + " even with micro-batches of one sample (" +
                   std::to_string(n) + " samples in " + std::to_string(parts) +
                   " parts); lower the batch size or raise the memory limit");
  r.now->micro_batches = parts;
  const nn::Sequential::GradReadyHook hook = [&](const std::vector<nn::Parameter*>& ready) {
    on_grads_ready(r, ready);
  };
  for (int i = 0; i < parts; ++i) {
    const std::int64_t begin = n * i / parts, end = n * (i + 1) / parts;
    if (begin == end) continue;
    const data::Batch micro = parts == 1 ? batch : detail::slice_batch(batch, begin, end);
    auto t0 = Clock::now();
    nn::ForwardContext ctx;
    ctx.training = training;
    ctx.seed = step_seed(options_.seed, batch.step);
    ctx.sample_ids = micro.sample_ids;
    ctx.lengths = micro.lengths;
    ctx.sample_weights = micro.weights;
    ctx.replica_sum = r.replica_sum.get();  // synchronized BatchNorm (strategy_sync_bn.cpp)
    const Tensor logits = r.model.forward(micro.inputs, ctx);
    Tensor dlogits = add_loss(r, logits, micro, ctx.lengths);  // the output's lengths
    r.now->timing.forward_ms += detail::ms_since(t0);
    if (!training) continue;
    scale_loss_gradient(r, dlogits);
    t0 = Clock::now();
    const bool last = i == parts - 1;
    r.model.backward(dlogits, overlap && last ? hook : nn::Sequential::GradReadyHook{});
    r.now->timing.backward_ms += detail::ms_since(t0);
  }
}

// Note [OOM split]: a replica whose step throws OutOfMemory retries it with its batch split into
// twice as many micro-batches, accumulated locally; the all-reduce still happens once per step.
// A collective already issued must never be issued twice, so a retry is only possible while no
// bucket of the step has been launched: until a replica has completed a step with its current
// split, it runs without overlap (every bucket launched after backward). An OutOfMemory after a
// launch is passed on.
void MirroredStrategy::compute_gradients(Replica& r, const data::Batch& batch,
                                         Clock::time_point start) {
  const bool communicate = world_replicas_ > 1;
  const std::int64_t count = detail::real_count(batch);
  for (;;) {
    for (nn::Parameter* p : r.params) p->clear_grad();  // Note [First gradient write] (layer.h)
    r.now.emplace(steps_, start, count, plan_);  // a retry starts from nothing, timing included
    const bool overlap =
        communicate && options_.overlap && (!options_.split_on_oom || r.oom.settled);
    try {
      run_micro_batches(r, batch, true, overlap);
      for (const nn::Parameter* p : r.params) {
        MIRROR_CHECK(!p->grad_unwritten, Error,
                     "backward never wrote the gradient of " + p->name +
                         " (its layer did not run backward); this is a bug in that layer");
      }
      r.now->overlapped = r.now->next_launch;
      break;
    } catch (const OutOfMemory& e) {
      if (!options_.split_on_oom) throw;
      // Synchronized BatchNorm issues collectives in forward: a replica that retried alone with
      // more micro-batches would issue more of them than the others.
      MIRROR_CHECK(!communicate || !has_synchronized_batchnorm(r.model), OutOfMemory,
                   std::string(e.what()) +
                       " (a model with synchronized BatchNorm cannot retry a step in smaller "
                       "micro-batches on one replica; lower the batch size)");
      MIRROR_CHECK(r.now->next_launch == 0, OutOfMemory,
                   std::string(e.what()) +
                       " (this step's first all-reduces were already launched, so it cannot be "
                       "retried with smaller micro-batches; lower the batch size)");
      MIRROR_CHECK(options_.accumulation_steps * r.oom.split * 2 <= batch.size(), OutOfMemory,
                   std::string(e.what()) + " (already at micro-batches of one sample)");
      r.oom.split *= 2;
      r.oom.settled = false;
    }
  }
  if (r.oom.split != r.oom.logged_split) {
    const std::int64_t micro = (batch.size() + r.now->micro_batches - 1) / r.now->micro_batches;
    std::fprintf(stderr,
                 "[mirror] out of memory at batch %lld on %s; continuing with micro-batches of "
                 "%lld\n",
                 static_cast<long long>(batch.size()), r.device.str().c_str(),
                 static_cast<long long>(micro));
    r.oom.logged_split = r.oom.split;
  }
  r.oom.settled = true;
}

// ================================================================ steps

StepResult MirroredStrategy::reduce_metrics(std::vector<Tensor>& metrics) {
  // Every replica's metrics tensor holds the same reduced values; read local replica 0's.
  const auto m = metrics[0].view(0, {kMetricValues}).to(Device::cpu()).to_vector<double>();
  StepResult result;
  result.loss = m[0];
  result.correct = static_cast<std::int64_t>(m[1]);
  result.count = static_cast<std::int64_t>(m[2]);
  result.target_values = static_cast<std::int64_t>(m[3]);
  result.squared_error_sum = m[4];
  result.abs_error_sum = m[5];
  result.stop_requested = m[6] > 0;  // some replica's rank was signalled: all stop here
  result.loss_sum = result.loss * static_cast<double>(result.count);
  result.buckets = world_replicas_ > 1 ? static_cast<int>(plan_.buckets.size()) : 0;
  result.overlapped_buckets = result.buckets;
  for (auto& r : replicas_) {
    result.overlapped_buckets = std::min(result.overlapped_buckets, r->now->overlapped);
    result.micro_batches = std::max(result.micro_batches, r->now->micro_batches);
    result.skipped = result.skipped || r->now->skipped;
    StepTiming& t = result.timing;
    t.forward_ms = std::max(t.forward_ms, r->now->timing.forward_ms);
    t.backward_ms = std::max(t.backward_ms, r->now->timing.backward_ms);
    t.exposed_comm_ms = std::max(t.exposed_comm_ms, r->now->timing.exposed_comm_ms);
    t.optimizer_ms = std::max(t.optimizer_ms, r->now->timing.optimizer_ms);
    t.total_ms = std::max(t.total_ms, r->now->timing.total_ms);
    if (r->local_index == 0) t.buckets = r->now->timing.buckets;
  }
  return result;
}

std::shared_ptr<Work> MirroredStrategy::launch_metrics(Replica& r, Tensor& metrics,
                                                       std::int64_t count, const char* what,
                                                       const std::vector<nn::Buffer*>& buffers) {
  // Counts travel as doubles: exact up to 2^53, far beyond any step.
  const Tensor values =
      Tensor::from_vector<double>(
          {r.now->loss, static_cast<double>(r.now->correct), static_cast<double>(count),
           static_cast<double>(r.now->target_values), r.now->squared_error, r.now->abs_error,
           stop_requested() ? 1.0 : 0.0},  // Note [Preemption] (preemption.h)
          {kMetricValues})
          .to(r.device);
  if (world_replicas_ == 1) {
    metrics = values;
    return nullptr;
  }
  // Note [Buffers across replicas] (strategy_sync_bn.cpp): the buffers ride along as float64.
  metrics = Tensor::empty({kMetricValues + total_numel(buffers)}, DType::kFloat64, r.device);
  metrics.view(0, {kMetricValues}).copy_from(values);
  std::int64_t offset = kMetricValues;
  for (const nn::Buffer* b : buffers) {
    metrics.view(offset, b->value.shape()).copy_from(ops::cast(b->value, DType::kFloat64));
    offset += b->value.numel();
  }
  return r.comm->all_reduce(metrics, metrics, ReduceOp::kSum,
                            std::string(what) + " metrics step " + std::to_string(r.now->step));
}

void MirroredStrategy::adopt_buffer_averages(Replica& r) {
  if (world_replicas_ == 1) return;
  std::int64_t offset = kMetricValues;
  for (nn::Buffer* b : r.local_buffers) {
    Tensor sum = r.now->metrics.view(offset, b->value.shape());
    ops::scale(sum, 1.0 / world_replicas_);  // the same bytes on every replica
    b->value.copy_from(ops::cast(sum, b->value.dtype()));
    offset += b->value.numel();
  }
}

void MirroredStrategy::scale_loss_gradient(Replica& r, Tensor& dlogits) {
  if (options_.precision != Precision::kMixedFloat16) return;
  ops::scale(dlogits, loss_scale_.scale);
  if (first_replica_ + r.local_index == overflow_replica_ && steps_ == overflow_step_) {
    ops::fill(dlogits, std::numeric_limits<double>::infinity());  // test hook (strategy.h)
  }
}

StepResult MirroredStrategy::train_step(std::vector<data::Batch>& batches, double lr) {
  check_batches(batches, local_replicas(), "train_step");
  check_loss_inputs(batches, options_.loss, replicas_[0]->model.output_shape(), "train_step");
  const ScopedMathMode math(math_mode_of(options_.precision));
  const double scale_used = loss_scale_.scale;
  std::vector<Tensor> metrics(replicas_.size());
  run_on_replicas([&](Replica& r) {
    const auto start = Clock::now();
    // Loaders may produce batches anywhere; each replica computes on its own device.
    const data::Batch batch =
        detail::to_device(batches[static_cast<std::size_t>(r.local_index)], r.device);
    compute_gradients(r, batch, start);
    auto t0 = Clock::now();
    if (world_replicas_ > 1) finish_buckets(r);
    launch_train_metrics(r);  // no buckets (one replica, or no parameters)
    if (r.now->metrics_work) r.now->metrics_work->wait();
    r.now->metrics_work.reset();
    metrics[static_cast<std::size_t>(r.local_index)] = r.now->metrics;
    // Note [Failed step]: on a GPU, wait() only orders the streams, and a watchdog may abort a
    // collective after it returned, leaving partial sums; settle() waits for every collective of
    // the step and throws CommError if one failed, before anything reads the buffers.
    if (r.comm) r.comm->settle();
    adopt_buffer_averages(r);  // only from sums that arrived whole
    r.now->timing.exposed_comm_ms = detail::ms_since(t0);
    // Reduced gradients are the same bytes on every replica, so is this decision.
    for (const Tensor& b : r.buffers) {
      if (!ops::all_finite(b)) {
        r.now->skipped = true;
        break;
      }
    }
    if (options_.precision == Precision::kMixedFloat16 && !r.now->skipped) {
      // Note [Loss scaling]: 1/scale is a power of two, so unscaling is exact.
      for (Tensor& b : r.buffers) ops::scale(b, 1.0 / loss_scale_.scale);
    }
    t0 = Clock::now();
    if (!r.now->skipped) r.optimizer->step_groups(optimizer_groups(plan_, r.params, r.buffers), lr);
    r.now->timing.optimizer_ms = detail::ms_since(t0);
    r.now->timing.total_ms = detail::ms_since(start);
  });
  ++steps_;
  StepResult result = reduce_metrics(metrics);
  result.loss_scale = options_.precision == Precision::kMixedFloat16 ? scale_used : 0.0;
  if (options_.precision == Precision::kMixedFloat16 &&
      (!result.skipped || scale_used > LossScale::kMin)) {
    // An overflow of the scaled gradients: skip and halve (a non-finite step at the smallest
    // scale is a real divergence and meets the non-finite policy below).
    loss_scale_.update(!result.skipped);
    if (result.skipped) {
      if (first_replica_ == 0) {
        std::fprintf(stderr,
                     "[mirror] step %lld: fp16 overflow (inf/NaN in the reduced gradients); the "
                     "update was skipped on every replica, loss scale %g -> %g\n",
                     static_cast<long long>(steps_ - 1), scale_used, loss_scale_.scale);
      }
      maybe_check_divergence();
      return result;
    }
  }
  if (result.skipped) {
    MIRROR_CHECK(options_.non_finite == NonFinitePolicy::kSkip, Error,
                 "non-finite gradients (inf or NaN) after the all-reduce at step " +
                     std::to_string(steps_ - 1) +
                     "; stopping as configured (non-finite policy 'stop'). Lower the learning "
                     "rate, clip gradients, or check the input data");
    if (first_replica_ == 0) {
      std::fprintf(stderr,
                   "[mirror] step %lld: non-finite gradients; the update was skipped on every "
                   "replica\n",
                   static_cast<long long>(steps_ - 1));
    }
  }
  maybe_check_divergence();
  return result;
}

void MirroredStrategy::maybe_check_divergence() {
  if (options_.divergence_check_every > 0 && steps_ % options_.divergence_check_every == 0) {
    check_replicas_identical();
  }
}

StepResult MirroredStrategy::evaluate_step(std::vector<data::Batch>& batches) {
  check_batches(batches, local_replicas(), "evaluate_step");
  check_loss_inputs(batches, options_.loss, replicas_[0]->model.output_shape(), "evaluate_step");
  const ScopedMathMode math(math_mode_of(options_.precision));
  std::vector<Tensor> metrics(replicas_.size());
  run_on_replicas([&](Replica& r) {
    const auto start = Clock::now();
    const data::Batch batch =
        detail::to_device(batches[static_cast<std::size_t>(r.local_index)], r.device);
    const std::int64_t count = detail::real_count(batch);
    // No collective before the metrics: an OutOfMemory can always be retried with a split.
    for (;;) {
      r.now.emplace(steps_, start, count, plan_);
      try {
        run_micro_batches(r, batch, false, false);
        break;
      } catch (const OutOfMemory&) {
        if (!options_.split_on_oom || r.oom.split * 2 > batch.size()) throw;
        r.oom.split *= 2;
      }
    }
    auto t0 = Clock::now();
    auto work = launch_metrics(r, metrics[static_cast<std::size_t>(r.local_index)], count, "eval");
    if (work) work->wait();
    r.now->timing.exposed_comm_ms = detail::ms_since(t0);
    r.now->timing.total_ms = detail::ms_since(start);
  });
  StepResult result = reduce_metrics(metrics);
  result.buckets = result.overlapped_buckets = 0;
  return result;
}

}  // namespace mirror::dist
