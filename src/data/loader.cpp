// Loader: epoch order (Note [Exact sharding] in loader.h), batch assembly for one replica, and
// the prefetch workers.
#include "mirror/data/loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <random>

#include "data/hash.h"
#include "mirror/error.h"

namespace mirror::data {
namespace {

/// Stable sort of positions [s, e) of `order` by length, written to pos[s, e). Lengths are
/// small (words: <= 24), so a counting sort does it in linear time; long ones fall back to a
/// comparison sort on (length, position) keys.
void sort_window(const std::vector<std::uint32_t>& len, std::int64_t s, std::int64_t e,
                 std::vector<std::int64_t>& pos) {
  std::uint32_t longest = 0;
  for (std::int64_t i = s; i < e; ++i) longest = std::max(longest, len[i]);
  if (longest < 4096) {
    std::vector<std::int64_t> start(longest + 2, 0);
    for (std::int64_t i = s; i < e; ++i) ++start[len[i] + 1];
    for (std::uint32_t l = 1; l <= longest + 1; ++l) start[l] += start[l - 1];
    for (std::int64_t i = s; i < e; ++i) pos[s + start[len[i]]++] = i;
    return;
  }
  std::vector<std::pair<std::uint32_t, std::int64_t>> keys;
  for (std::int64_t i = s; i < e; ++i) keys.emplace_back(len[i], i);
  std::sort(keys.begin(), keys.end());
  for (std::int64_t i = s; i < e; ++i) pos[i] = keys[i - s].second;
}

/// Sorts each window of `window` global batches by length (ties keep their shuffled order),
/// then shuffles the order of the full global batches; a trailing partial batch stays last.
void bucket_by_length(std::vector<std::int64_t>& order, const Dataset& dataset, std::int64_t batch,
                      std::int64_t window, bool shuffle, std::mt19937_64& rng) {
  const auto n = static_cast<std::int64_t>(order.size());
  // Lengths are read in index order first: sequential access is faster than following the
  // shuffled order into the dataset.
  std::vector<std::uint32_t> by_index(order.size()), len(order.size());
  for (std::int64_t i = 0; i < n; ++i) {
    by_index[i] = static_cast<std::uint32_t>(std::max(0, dataset.length(i)));
  }
  for (std::int64_t i = 0; i < n; ++i) len[i] = by_index[order[i]];
  std::vector<std::int64_t> pos(order.size());
  for (std::int64_t s = 0; s < n; s += window * batch) {
    sort_window(len, s, std::min(n, s + window * batch), pos);
  }
  std::vector<std::int64_t> batches(static_cast<std::size_t>(n / batch));
  std::iota(batches.begin(), batches.end(), 0);
  if (shuffle) detail::shuffle(batches, rng);
  std::vector<std::int64_t> out;
  out.reserve(order.size());
  for (auto g : batches) {
    for (std::int64_t k = 0; k < batch; ++k) out.push_back(order[pos[g * batch + k]]);
  }
  for (std::int64_t k = n / batch * batch; k < n; ++k) out.push_back(order[pos[k]]);
  order = std::move(out);
}

}  // namespace

namespace {

void check_order_options(const LoaderOptions& options, int epoch) {
  MIRROR_CHECK(options.global_batch > 0, InvalidArgument,
               "global batch must be positive, got " + std::to_string(options.global_batch));
  MIRROR_CHECK(options.bucket_window > 0, InvalidArgument,
               "bucket_window must be positive, got " + std::to_string(options.bucket_window));
  MIRROR_CHECK(epoch >= 0, InvalidArgument, "epoch must be >= 0, got " + std::to_string(epoch));
}

std::mt19937_64 order_rng(const LoaderOptions& options, int epoch) {
  return std::mt19937_64(
      detail::splitmix64(options.seed ^ detail::splitmix64(static_cast<std::uint64_t>(epoch))));
}

}  // namespace

std::vector<std::int64_t> epoch_order(const Dataset& dataset, const LoaderOptions& options,
                                      int epoch) {
  check_order_options(options, epoch);
  std::vector<std::int64_t> order(static_cast<std::size_t>(dataset.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng = order_rng(options, epoch);
  if (options.shuffle) detail::shuffle(order, rng);
  if (options.bucket_by_length) {
    bucket_by_length(order, dataset, options.global_batch, options.bucket_window, options.shuffle,
                     rng);
  }
  return order;
}

EpochOrder::EpochOrder(const Dataset& dataset, const LoaderOptions& options, int epoch)
    : size_(dataset.size()) {
  if (options.bucket_by_length || size_ > static_cast<std::int64_t>(UINT32_MAX)) {
    wide_ = epoch_order(dataset, options, epoch);
    return;
  }
  check_order_options(options, epoch);
  compact_.resize(static_cast<std::size_t>(size_));
  std::iota(compact_.begin(), compact_.end(), 0u);
  std::mt19937_64 rng = order_rng(options, epoch);
  if (options.shuffle) detail::shuffle(compact_, rng);
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, ShardSpec shard, LoaderOptions options)
    : dataset_(std::move(dataset)), shard_(shard), options_(std::move(options)) {
  MIRROR_CHECK(dataset_ != nullptr, InvalidArgument, "Loader needs a dataset");
  MIRROR_CHECK(
      shard_.num_replicas >= 1 && shard_.replica >= 0 && shard_.replica < shard_.num_replicas,
      InvalidArgument,
      "bad shard: replica " + std::to_string(shard_.replica) + " of " +
          std::to_string(shard_.num_replicas));
  const std::int64_t B = options_.global_batch;
  const std::int64_t R = shard_.num_replicas;
  MIRROR_CHECK(B > 0 && B % R == 0, InvalidArgument,
               "global batch " + std::to_string(B) + " is not a positive multiple of the " +
                   std::to_string(R) + " replicas; every replica needs an equal share (use " +
                   std::to_string(std::max<std::int64_t>(1, B / R) * R) + " or " +
                   std::to_string((B / R + 1) * R) + ")");
  MIRROR_CHECK(options_.bucket_window > 0, InvalidArgument, "bucket_window must be positive");
  MIRROR_CHECK(options_.prefetch_depth >= 0 && options_.num_workers >= 1, InvalidArgument,
               "prefetch_depth must be >= 0 and num_workers >= 1");
  if (options_.augment.enabled()) {
    const Shape chw = dataset_->sample_shape();
    const int p = options_.augment.crop_padding;
    MIRROR_CHECK(dataset_->input_dtype() == DType::kFloat32 && !dataset_->is_sequence() &&
                     chw.size() == 3,
                 InvalidArgument,
                 "--augment " + to_string(options_.augment) +
                     " crops and flips images [channels, height, width]; this data is " +
                     dataset_->describe());
    MIRROR_CHECK(chw[1] > p && chw[2] > p, InvalidArgument,
                 "--augment " + to_string(options_.augment) + ": a crop padding of " +
                     std::to_string(p) + " pixels needs images larger than that; this data is " +
                     dataset_->describe());
  }
  local_batch_ = B / R;
  const std::int64_t n = dataset_->size();
  steps_per_epoch_ = options_.last_batch == LastBatch::kDrop ? n / B : (n + B - 1) / B;
  MIRROR_CHECK(steps_per_epoch_ > 0, InvalidArgument,
               "global batch " + std::to_string(B) + " is larger than the dataset (" +
                   std::to_string(n) +
                   " samples) and the last batch is dropped: no step left; "
                   "use a smaller batch or pad the last batch");
}

Loader::~Loader() { stop_workers(); }

/// Each epoch's order is computed once, outside the lock, by whichever thread asks first; the
/// others wait on its future. (Computing under the lock would stall every worker's batch of
/// the current epoch while one precomputes the next.)
std::shared_ptr<const EpochOrder> Loader::order_for(int epoch) const {
  std::promise<std::shared_ptr<const EpochOrder>> promise;
  std::shared_future<std::shared_ptr<const EpochOrder>> order;
  bool compute = false;
  {
    std::lock_guard lock(order_mutex_);
    if (auto it = orders_.find(epoch); it != orders_.end()) {
      order = it->second;
    } else {
      order = promise.get_future().share();
      orders_.emplace(epoch, order);
      compute = true;
      // Workers run at most a few steps ahead: the previous, current and next epoch are all
      // that can be in use (a dropped entry is only recomputed, never wrong).
      while (orders_.size() > 3) orders_.erase(orders_.begin());
    }
  }
  if (compute) {
    try {
      // A file that changed since the last epoch is an error naming it (shards, mapped arrays).
      dataset_->check_unchanged();
      promise.set_value(std::make_shared<const EpochOrder>(*dataset_, options_, epoch));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
  }
  return order.get();
}

namespace {

/// Per-step labels [b, T] cut or zero-padded to the batch's `steps` (token batches are as long as
/// their longest sequence): steps past a sequence's length carry no label that counts.
Tensor steps_wide(const Tensor& labels, std::int32_t steps) {
  const std::int64_t b = labels.dim(0), t = labels.dim(1);
  if (t == steps) return labels;
  Tensor out = Tensor::zeros({b, steps}, DType::kInt32);
  const std::int64_t keep = std::min<std::int64_t>(t, steps);
  for (std::int64_t j = 0; j < b; ++j) {
    std::memcpy(out.data<std::int32_t>() + j * steps, labels.data<std::int32_t>() + j * t,
                sizeof(std::int32_t) * static_cast<std::size_t>(keep));
  }
  return out;
}

}  // namespace

Batch Loader::make_batch(int epoch, std::int64_t step) const {
  MIRROR_CHECK(step >= 0 && step < steps_per_epoch_, InvalidArgument,
               "step " + std::to_string(step) + " outside the epoch's [0, " +
                   std::to_string(steps_per_epoch_) + ")");
  const auto order = order_for(epoch);
  Batch batch;
  batch.epoch = epoch;
  batch.step = static_cast<std::int64_t>(epoch) * steps_per_epoch_ + step;
  fill_samples(batch, *order, step);
  return batch;
}

void Loader::fill_samples(Batch& batch, const EpochOrder& order, std::int64_t step) const {
  const Dataset& ds = *dataset_;
  const std::int64_t B = options_.global_batch, b = local_batch_;
  const std::int64_t first = step * B;  // position of the global batch in the order
  const std::int64_t real =
      std::min<std::int64_t>(B, order.size() - first);
  const std::int64_t offset = shard_.replica * b;  // this replica's slice in the global batch
  batch.global_count = real;
  // Class labels are int32 [b]; float targets float32 [b, target...] (zeros for padding).
  const bool float_targets = ds.target_kind() == TargetKind::kFloat;
  Shape target_shape{b};
  for (auto d : ds.target_shape()) target_shape.push_back(d);
  const std::int64_t target_numel = shape_numel(ds.target_shape());
  // Note [Dense labels]: class labels [b, T] or [b, H, W] when a sample has several.
  Shape label_shape{b};
  for (auto d : ds.label_shape()) label_shape.push_back(d);
  const std::int64_t label_numel = float_targets ? 1 : shape_numel(ds.label_shape());
  batch.labels = float_targets ? Tensor::zeros(target_shape, DType::kFloat32)
                               : Tensor::zeros(label_shape, DType::kInt32);
  if (!float_targets && label_numel != 1) {
    for (std::int64_t k = 0; k < real; ++k)
      batch.global_label_count += ds.label_count(order[first + k]);
  }
  batch.weights = Tensor::empty({b}, DType::kFloat32);
  batch.sample_ids = Tensor::empty({b}, DType::kInt64);
  auto* labels = float_targets ? nullptr : batch.labels.data<std::int32_t>();
  auto* targets = float_targets ? batch.labels.data<float>() : nullptr;
  auto* weights = batch.weights.data<float>();
  auto* ids = batch.sample_ids.data<std::int64_t>();
  const bool sequence = ds.is_sequence(), variable = ds.variable_length();
  for (std::int64_t j = 0; j < b; ++j) {
    const std::int64_t k = offset + j;
    ids[j] = k < real ? order[first + k] : -1 - k;
  }
  // Float inputs are decoded first: a bad sample may be replaced (Note [Bad samples]), and the
  // label, length and augmentation then follow the sample that was used.
  const bool tokens = ds.input_dtype() == DType::kInt32;
  if (!tokens) {
    const Shape sample = ds.sample_shape();
    const std::int64_t per = shape_numel(sample);
    Shape shape = sample;
    shape.insert(shape.begin(), b);
    batch.inputs = Tensor::empty(shape, DType::kFloat32);
    auto* dst = batch.inputs.data<float>();
    auto decode = [&](std::int64_t j) {
      if (ids[j] >= 0) {
        decode_or_replace(ids[j], batch.epoch, dst + j * per);
        augment_image(options_.augment, options_.seed, batch.epoch, ids[j], sample, dst + j * per);
      } else {
        std::memset(dst + j * per, 0, sizeof(float) * per);
      }
    };
    if (options_.sample_pool) {
      // Chunks of samples, about four per decoding thread: cheap samples (arrays) do not pay a
      // claim each, and uneven ones (photographs of different sizes) still balance.
      const std::int64_t threads = std::max(1, options_.sample_pool->threads());
      const std::int64_t chunk = std::max<std::int64_t>(1, b / (4 * threads));
      options_.sample_pool->run((b + chunk - 1) / chunk, [&](std::int64_t c) {
        for (std::int64_t j = c * chunk; j < std::min(b, (c + 1) * chunk); ++j) decode(j);
      });
    } else {
      for (std::int64_t j = 0; j < b; ++j) decode(j);
    }
  }
  std::int32_t steps = 1;
  for (std::int64_t j = 0; j < b; ++j) {
    const bool is_real = ids[j] >= 0;
    if (float_targets) {
      if (is_real) ds.decode_target(ids[j], targets + j * target_numel);
    } else if (label_numel == 1) {
      labels[j] = is_real ? ds.label(ids[j]) : 0;
    } else {  // Note [Dense labels]: zeros (counted nowhere) for a padding sample
      if (is_real) ds.decode_labels(ids[j], labels + j * label_numel);
      batch.label_counts.push_back(is_real ? static_cast<std::int32_t>(ds.label_count(ids[j])) : 0);
    }
    weights[j] = is_real ? 1.0f : 0.0f;
    if (sequence) {
      // Padding samples get one step (variable) or the full length: a valid, all-zero input.
      batch.lengths.push_back(is_real ? ds.length(ids[j]) : (variable ? 1 : ds.length(0)));
      steps = std::max(steps, batch.lengths.back());
    }
  }
  if (!tokens) return;
  if (!float_targets && label_shape.size() == 2) batch.labels = steps_wide(batch.labels, steps);
  batch.inputs = Tensor::empty({b, steps}, DType::kInt32);
  auto* dst = batch.inputs.data<std::int32_t>();
  for (std::int64_t j = 0; j < b; ++j) {
    if (ids[j] >= 0)
      ds.decode_tokens(ids[j], dst + j * steps, steps);
    else
      std::memset(dst + j * steps, 0, sizeof(std::int32_t) * steps);
  }
}

void Loader::decode_or_replace(std::int64_t& id, int epoch, float* dst) const {
  const Dataset& ds = *dataset_;
  const std::int64_t n = ds.size();
  for (std::int64_t tries = 0;; ++tries) {
    try {
      ds.decode_float_drawn(id, options_.seed, epoch, dst);
      return;
    } catch (const BadSample& e) {
      if (!options_.skip_bad_samples) throw;
      {
        std::lock_guard lock(bad_mutex_);
        if (bad_.size() < 1000) bad_.emplace(id, e.what());
      }
      MIRROR_CHECK(tries + 1 < n, DataError,
                   std::string("--skip-bad-samples: no sample of the dataset can be decoded; "
                               "the last error: ") +
                       e.what());
      if (tries == 0) ++replaced_;
      id = (id + 1) % n;
    }
  }
}

std::map<std::int64_t, std::string> Loader::bad_samples() const {
  std::lock_guard lock(bad_mutex_);
  return bad_;
}

// ---------------------------------------------------------------- prefetch

void Loader::start(int first_epoch, int num_epochs, std::int64_t first_step) {
  MIRROR_CHECK(first_epoch >= 0 && num_epochs >= 1, InvalidArgument,
               "start: need first_epoch >= 0 and num_epochs >= 1, got " +
                   std::to_string(first_epoch) + ", " + std::to_string(num_epochs));
  MIRROR_CHECK(first_step >= 0 && first_step <= steps_per_epoch_, InvalidArgument,
               "start: first_step " + std::to_string(first_step) + " outside [0, " +
                   std::to_string(steps_per_epoch_) + "]");
  stop_workers();
  std::lock_guard lock(mutex_);
  ready_.clear();
  failed_ = nullptr;
  stop_ = false;
  started_ = true;
  prepared_epoch_ = first_epoch;  // the first batch computes it
  next_claim_ = next_serve_ =
      static_cast<std::int64_t>(first_epoch) * steps_per_epoch_ + first_step;
  end_ = static_cast<std::int64_t>(first_epoch + num_epochs) * steps_per_epoch_;
  if (options_.prefetch_depth == 0) return;
  const int threads = std::min(options_.num_workers, options_.prefetch_depth);
  for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { worker_loop(); });
}

void Loader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

/// Takes the next step within the prefetch window and assembles it. When the window is full,
/// an idle worker computes the next epoch's order instead (a shuffle, plus a sort when
/// bucketing: ~0.1 s for the 875k words), so crossing an epoch boundary does not stall the
/// queue.
void Loader::worker_loop() {
  const std::int64_t depth = options_.prefetch_depth;
  for (;;) {
    std::int64_t k = -1;
    int precompute = -1;
    {
      std::unique_lock lock(mutex_);
      auto next_epoch = [&] { return static_cast<int>(next_claim_ / steps_per_epoch_) + 1; };
      auto order_job = [&] {
        const int e = next_epoch();
        return e > prepared_epoch_ && static_cast<std::int64_t>(e) * steps_per_epoch_ < end_;
      };
      work_cv_.wait(lock, [&] {
        return stop_ || next_claim_ >= end_ || next_claim_ < next_serve_ + depth || order_job();
      });
      if (stop_ || next_claim_ >= end_) return;
      if (next_claim_ < next_serve_ + depth) {
        k = next_claim_++;
      } else {
        precompute = prepared_epoch_ = next_epoch();
      }
    }
    if (precompute >= 0) {
      try {
        order_for(precompute);
      } catch (...) {
        // The same error is raised again, in step order, when a batch of that epoch is built.
      }
      continue;
    }
    Ready r;
    try {
      Batch b = make_batch(static_cast<int>(k / steps_per_epoch_), k % steps_per_epoch_);
      if (options_.on_ready) options_.on_ready(b);
      r.batch = std::move(b);
    } catch (...) {
      r.error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      // After a failure nothing past it is claimed: the consumer stops there.
      if (r.error) end_ = std::min(end_, k + 1);
      ready_.emplace(k, std::move(r));
    }
    ready_cv_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  MIRROR_CHECK(started_, InvalidArgument, "Loader::next called before start(epoch)");
  if (failed_) std::rethrow_exception(failed_);
  const auto t0 = std::chrono::steady_clock::now();
  auto add_wait = [&] {
    wait_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  };
  if (options_.prefetch_depth == 0) {
    if (next_serve_ >= end_) return std::nullopt;
    const std::int64_t k = next_serve_++;
    try {
      Batch b = make_batch(static_cast<int>(k / steps_per_epoch_), k % steps_per_epoch_);
      if (options_.on_ready) options_.on_ready(b);
      add_wait();
      ++served_;
      return b;
    } catch (...) {
      failed_ = std::current_exception();
      throw;
    }
  }
  std::unique_lock lock(mutex_);
  if (next_serve_ >= end_) return std::nullopt;
  ready_cv_.wait(lock, [&] { return ready_.count(next_serve_) > 0; });
  auto node = ready_.extract(next_serve_);
  ++next_serve_;
  lock.unlock();
  work_cv_.notify_all();
  add_wait();
  if (node.mapped().error) {
    failed_ = node.mapped().error;
    std::rethrow_exception(failed_);
  }
  ++served_;
  return std::move(node.mapped().batch);
}

}  // namespace mirror::data
