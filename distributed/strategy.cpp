// MirroredStrategy set-up: replicas, bucket buffers, communicators, the cross-rank model
// fingerprint, the initial weight broadcast, the divergence check, and the worker threads.
#include "mirror/distributed/strategy.h"

#include <algorithm>
#include <cstdio>
#include <omp.h>
#include <sstream>
#include <tuple>

#include "distributed/device_collectives.h"
#include "distributed/staged_communicator.h"
#include "distributed/strategy_replica.h"
#include "mirror/distributed/inproc_communicator.h"
#include "mirror/distributed/mpi_communicator.h"
#include "mirror/distributed/runtime.h"
#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::dist {

// ================================================================ small helpers

Compression parse_compression(const std::string& text) {
  if (text == "none") return Compression::kNone;
  if (text == "fp16" || text == "float16") return Compression::kFloat16;
  if (text == "bf16" || text == "bfloat16") return Compression::kBFloat16;
  throw InvalidArgument("unknown gradient compression '" + text + "': expected none, fp16 or bf16");
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kFloat16:
      return "fp16";
    case Compression::kBFloat16:
      return "bf16";
  }
  return "?";
}

LossKind parse_loss(const std::string& text) {
  if (text == "softmax-cross-entropy" || text == "cross-entropy")
    return LossKind::kSoftmaxCrossEntropy;
  if (text == "binary-cross-entropy" || text == "bce") return LossKind::kBinaryCrossEntropy;
  if (text == "mse" || text == "mean-squared-error") return LossKind::kMeanSquaredError;
  throw InvalidArgument("unknown loss '" + text +
                        "': expected softmax-cross-entropy (or cross-entropy), "
                        "binary-cross-entropy (or bce), or mse (or mean-squared-error)");
}

const char* loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kSoftmaxCrossEntropy:
      return "softmax-cross-entropy";
    case LossKind::kBinaryCrossEntropy:
      return "binary-cross-entropy";
    case LossKind::kMeanSquaredError:
      return "mse";
  }
  return "?";
}

std::uint64_t step_seed(std::uint64_t base, std::int64_t step) {
  // splitmix64 of the pair: distinct, well-mixed seeds for consecutive steps.
  std::uint64_t z = base + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(step) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

std::string shape_text(const Shape& s) { return shape_str(s); }

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string shorten(const std::string& s) { return s.size() <= 160 ? s : s.substr(0, 157) + "..."; }

/// The first line where `a` and `b` differ: "<who_a> has '..', <who_b> has '..'".
std::string first_difference(const std::string& a, const std::string& b, const std::string& who_a,
                             const std::string& who_b) {
  const auto la = split_lines(a), lb = split_lines(b);
  const std::size_t n = std::max(la.size(), lb.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string x = i < la.size() ? la[i] : "<nothing>";
    const std::string y = i < lb.size() ? lb[i] : "<nothing>";
    if (x != y) return who_a + " has '" + shorten(x) + "', " + who_b + " has '" + shorten(y) + "'";
  }
  return "the descriptions differ in length only";
}

std::uint64_t mix_hash(std::uint64_t h, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 1099511628211ull;
  }
  return h;
}

std::string describe_model(nn::Sequential& model, const BucketPlan& plan,
                           const StrategyOptions& options, int world_replicas) {
  std::ostringstream out;
  out << "mirror version " << MIRROR_VERSION << "\n";
  out << "world replicas " << world_replicas << "\n";
  out << "compression " << compression_name(options.compression) << "\n";
  out << "precision " << precision_name(options.precision) << "\n";
  out << "device comm " << device_comm_name(options.device_comm) << "\n";
  out << "accumulation steps " << options.accumulation_steps << "\n";
  out << "loss " << loss_name(options.loss) << "\n";
  out << "input " << shape_text(model.input_shape()) << " " << dtype_name(model.dtype()) << "\n";
  const auto params = model.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    out << "parameter " << i << " " << params[i]->name << " "
        << dtype_name(params[i]->value.dtype()) << " " << shape_text(params[i]->value.shape())
        << "\n";
  }
  for (const auto& layer : model.layers()) {
    out << "layer " << layer->name() << " " << layer->config().dump() << "\n";
  }
  if (!model.is_chain()) {  // the graph's edges (a chain's are implied)
    for (std::size_t i = 0; i < model.layers().size(); ++i) {
      out << "inputs " << model.layers()[i]->name();
      for (int in : model.layer_inputs(i)) out << " " << in;
      out << "\n";
    }
  }
  for (nn::Buffer* b : model.buffers()) {
    out << "buffer " << b->name << " " << dtype_name(b->value.dtype()) << " "
        << shape_text(b->value.shape()) << "\n";
  }
  out << plan.describe();
  return out.str();
}

}  // namespace

// ================================================================ construction

MirroredStrategy::MirroredStrategy(Runtime& runtime, std::vector<Device> local_devices,
                                   ModelFactory model_factory, OptimizerFactory optimizer_factory,
                                   StrategyOptions options)
    : runtime_(&runtime), devices_(std::move(local_devices)), options_(options) {
  init(model_factory, optimizer_factory);
}

MirroredStrategy::MirroredStrategy(std::vector<Device> local_devices, ModelFactory model_factory,
                                   OptimizerFactory optimizer_factory, StrategyOptions options)
    : runtime_(nullptr), devices_(std::move(local_devices)), options_(options) {
  init(model_factory, optimizer_factory);
}

void MirroredStrategy::init(ModelFactory& model_factory, OptimizerFactory& optimizer_factory) {
  MIRROR_CHECK(!devices_.empty(), InvalidArgument,
               "MirroredStrategy needs at least one local device, got none");
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      MIRROR_CHECK(devices_[i] != devices_[j], InvalidArgument,
                   "MirroredStrategy: device " + devices_[i].str() +
                       " is listed twice; give each replica its own device (cpu:0, cpu:1, ...)");
    }
  }
  MIRROR_CHECK(model_factory && optimizer_factory, InvalidArgument,
               "MirroredStrategy needs a model factory and an optimizer factory");
  MIRROR_CHECK(
      options_.accumulation_steps >= 1, InvalidArgument,
      "accumulation_steps must be >= 1, got " + std::to_string(options_.accumulation_steps));
  MIRROR_CHECK(options_.divergence_check_every >= 0, InvalidArgument,
               "divergence_check_every must be >= 0 (0 = never), got " +
                   std::to_string(options_.divergence_check_every));
  check_precision_support(options_.precision, devices_);
  std::tie(overflow_replica_, overflow_step_) = detail::overflow_hook();
  // Collective over ranks: how many replicas each rank drives.
  const int local = static_cast<int>(devices_.size());
  replicas_per_rank_ = runtime_ ? runtime_->all_gather_value<int>(local) : std::vector<int>{local};
  world_replicas_ = 0;
  for (int r = 0; r < static_cast<int>(replicas_per_rank_.size()); ++r) {
    if (r == (runtime_ ? runtime_->world_rank() : 0)) first_replica_ = world_replicas_;
    world_replicas_ += replicas_per_rank_[static_cast<std::size_t>(r)];
  }
  build_replicas(model_factory, optimizer_factory);
  check_model_fingerprint();
  bind_gradients_to_buckets();
  workers_ = std::make_unique<ReplicaWorkers>(local_replicas());
  if (world_replicas_ > 1) {
    create_communicators();
    broadcast_initial_weights();
  }
}

MirroredStrategy::~MirroredStrategy() = default;

void MirroredStrategy::build_replicas(ModelFactory& model_factory,
                                      OptimizerFactory& optimizer_factory) {
  for (std::size_t i = 0; i < devices_.size(); ++i) {
    auto r = std::make_unique<Replica>();
    r->device = devices_[i];
    r->local_index = static_cast<int>(i);
    r->model = model_factory(r->device);
    MIRROR_CHECK(r->model.built(), InvalidArgument,
                 "the model factory must return a built model (call build() in the factory)");
    MIRROR_CHECK(r->model.device() == r->device, InvalidArgument,
                 "the model factory built the model on " + r->model.device().str() +
                     " but was asked for " + r->device.str());
    r->optimizer = optimizer_factory();
    MIRROR_CHECK(r->optimizer != nullptr, InvalidArgument, "the optimizer factory returned null");
    r->params = r->model.parameters();
    for (std::size_t p = 0; p < r->params.size(); ++p) {
      r->index_of[r->params[p]] = static_cast<int>(p);
    }
    r->local_buffers = replica_local_buffers(r->model);
    replicas_.push_back(std::move(r));
  }
  std::vector<BucketParam> sizes;
  for (nn::Parameter* p : replicas_[0]->params) {
    sizes.push_back({p->name, p->value.dtype(), p->value.numel()});
  }
  plan_ = plan_buckets(sizes, options_.buckets);
}

void MirroredStrategy::bind_gradients_to_buckets() {
  // Note [Gradients in buckets]: each parameter's grad becomes a view into its bucket's flat
  // buffer, so backward writes straight into what the all-reduce sends.
  for (auto& r : replicas_) {
    for (const Bucket& b : plan_.buckets) {
      r->buffers.push_back(Tensor::zeros({std::max<std::int64_t>(b.numel, 1)}, b.dtype, r->device));
    }
    r->wire.resize(plan_.buckets.size());
    for (std::size_t p = 0; p < r->params.size(); ++p) {
      const int b = plan_.bucket_of[p];
      const int s = plan_.slot_of[p];
      nn::Parameter& param = *r->params[p];
      param.grad = r->buffers[static_cast<std::size_t>(b)].view(
          plan_.buckets[static_cast<std::size_t>(b)].offsets[static_cast<std::size_t>(s)],
          param.value.shape());
    }
  }
}

void MirroredStrategy::check_model_fingerprint() {
  description_ = describe_model(replicas_[0]->model, plan_, options_, world_replicas_);
  // Local replicas come from the same factory; a difference among them is reported through the
  // same cross-rank path so that every rank reaches the same decision.
  std::string mine = description_;
  for (std::size_t i = 1; i < replicas_.size(); ++i) {
    const std::string other = describe_model(replicas_[i]->model, plan_, options_, world_replicas_);
    if (other != description_) {
      mine += "local replica " + std::to_string(i) + " on " + replicas_[i]->device.str() +
              " differs: " +
              first_difference(description_, other, "local replica 0",
                               "local replica " + std::to_string(i)) +
              "\n";
    }
  }
  const std::vector<std::string> all =
      runtime_ ? runtime_->all_gather_string(mine) : std::vector<std::string>{mine};
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    throw CommError("model fingerprint differs across ranks: rank " + std::to_string(r) +
                    " differs from rank 0; first difference: " +
                    first_difference(all[0], all[r], "rank 0", "rank " + std::to_string(r)) +
                    ". Every rank must build the same model (architecture, parameter shapes and "
                    "dtypes), with the same bucket caps, compression and Mirror version");
  }
  if (all[0] != description_) {
    throw CommError(
        "model fingerprint differs among the local replicas: " + split_lines(all[0]).back() +
        ". The model factory must build the same model on every device");
  }
}

void MirroredStrategy::create_communicators() {
  const bool multi_rank = runtime_ && runtime_->world_size() > 1;
  for (const Device& d : devices_) {
    MIRROR_CHECK(d.type == devices_.front().type, InvalidArgument,
                 "replicas of one rank must all be GPUs or all CPUs, got " +
                     devices_.front().str() + " and " + d.str());
  }
  const auto timeout = options_.collective_timeout.count() > 0 ? options_.collective_timeout
                       : runtime_                              ? runtime_->default_timeout()
                                                               : std::chrono::seconds(600);
  const bool staged = devices_.front().is_cuda() && options_.device_comm == DeviceComm::kMpi;
  if (devices_.front().is_cuda() && !staged) {
    // GPUs: NCCL moves the tensors; MPI only carries the unique id from replica 0's rank.
    NcclBootstrap bootstrap;
    bootstrap.world_size = world_replicas_;
    bootstrap.first_rank = first_replica_;
    bootstrap.timeout = timeout;
    if (multi_rank) {
      bootstrap.broadcast_from_root = [this](void* bytes, std::size_t n) {
        runtime_->broadcast_bytes({static_cast<std::byte*>(bytes), n}, 0);
      };
    }
    auto comms = make_nccl_communicators(devices_, bootstrap);
    MIRROR_CHECK(comms.size() == replicas_.size(), Error,
                 "make_nccl_communicators returned " + std::to_string(comms.size()) +
                     " communicators for " + std::to_string(replicas_.size()) + " GPUs");
    for (std::size_t i = 0; i < replicas_.size(); ++i) replicas_[i]->comm = std::move(comms[i]);
  } else if (multi_rank && local_replicas() == 1) {
    // One replica per rank: the MPI communicator itself, no in-process hop.
    replicas_[0]->comm = std::make_unique<MpiCommunicator>(*runtime_);
  } else {
    MpiCommunicator* cross = nullptr;
    if (multi_rank) {
      auto mpi = std::make_unique<MpiCommunicator>(*runtime_);
      cross = mpi.get();
      cross_rank_ = std::move(mpi);
    }
    auto comms = make_inproc_group(local_replicas(), cross, first_replica_, world_replicas_);
    MIRROR_CHECK(comms.size() == replicas_.size(), Error,
                 "make_inproc_group returned " + std::to_string(comms.size()) +
                     " communicators for " + std::to_string(replicas_.size()) + " replicas");
    for (std::size_t i = 0; i < replicas_.size(); ++i) replicas_[i]->comm = std::move(comms[i]);
  }
  for (auto& r : replicas_) {
    // --comm mpi: the GPU tensors go through the host (Note [Staged collectives]).
    if (staged) r->comm = std::make_unique<StagedCommunicator>(std::move(r->comm), r->device);
    if (options_.wrap_communicator) {
      r->comm = options_.wrap_communicator(std::move(r->comm), r->local_index);
    }
  }
  if (cross_rank_) cross_rank_->set_timeout(timeout);
  for (auto& r : replicas_) r->replica_sum = make_replica_sum(*r->comm, r->device, steps_);
  for (auto& r : replicas_) r->comm->set_timeout(timeout);
}

void MirroredStrategy::broadcast_initial_weights() {
  // One broadcast per bucket: pack the weights into a flat buffer shaped like the bucket.
  run_on_replicas([&](Replica& r) {
    for (const Bucket& b : plan_.buckets) {
      Tensor flat = Tensor::zeros({std::max<std::int64_t>(b.numel, 1)}, b.dtype, r.device);
      for (std::size_t s = 0; s < b.params.size(); ++s) {
        nn::Parameter& p = *r.params[static_cast<std::size_t>(b.params[s])];
        flat.view(b.offsets[s], p.value.shape()).copy_from(p.value);
      }
      r.comm->broadcast(flat, 0, "initial weights bucket " + std::to_string(b.index))->wait();
      for (std::size_t s = 0; s < b.params.size(); ++s) {
        nn::Parameter& p = *r.params[static_cast<std::size_t>(b.params[s])];
        p.value.copy_from(flat.view(b.offsets[s], p.value.shape()));
      }
    }
  });
}

// ================================================================ accessors and checks

int MirroredStrategy::local_replicas() const { return static_cast<int>(replicas_.size()); }

nn::Sequential& MirroredStrategy::model(int local_replica) {
  MIRROR_CHECK(local_replica >= 0 && local_replica < local_replicas(), InvalidArgument,
               "local replica " + std::to_string(local_replica) + " out of range [0, " +
                   std::to_string(local_replicas()) + ")");
  return replicas_[static_cast<std::size_t>(local_replica)]->model;
}

optim::Optimizer& MirroredStrategy::optimizer(int local_replica) {
  model(local_replica);  // range check
  return *replicas_[static_cast<std::size_t>(local_replica)]->optimizer;
}

std::uint64_t MirroredStrategy::weights_fingerprint(int local_replica) {
  std::uint64_t h = 14695981039346656037ull;
  for (nn::Parameter* p : model(local_replica).parameters())
    h = mix_hash(h, ops::fingerprint(p->value));
  for (nn::Buffer* b : model(local_replica).buffers()) h = mix_hash(h, ops::fingerprint(b->value));
  return h;
}

int MirroredStrategy::rank_of_replica(int replica) const {
  int first = 0;
  for (std::size_t r = 0; r < replicas_per_rank_.size(); ++r) {
    first += replicas_per_rank_[r];
    if (replica < first) return static_cast<int>(r);
  }
  return -1;
}

void MirroredStrategy::check_replicas_identical() {
  if (world_replicas_ == 1) return;
  std::vector<std::vector<std::int64_t>> gathered(replicas_.size());
  run_on_replicas([&](Replica& r) {
    const auto fp = static_cast<std::int64_t>(weights_fingerprint(r.local_index));
    Tensor mine = Tensor::from_vector<std::int64_t>({fp}, {1}).to(r.device);
    Tensor all = Tensor::empty({world_replicas_}, DType::kInt64, r.device);
    r.comm->all_gather(mine, all, "divergence check after step " + std::to_string(steps_))->wait();
    gathered[static_cast<std::size_t>(r.local_index)] =
        all.to(Device::cpu()).to_vector<std::int64_t>();
  });
  const auto& fps = gathered[0];
  for (int i = 1; i < world_replicas_; ++i) {
    if (fps[static_cast<std::size_t>(i)] == fps[0]) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%016llx vs %016llx", static_cast<unsigned long long>(fps[0]),
                  static_cast<unsigned long long>(fps[static_cast<std::size_t>(i)]));
    throw CommError("replicas diverged after step " + std::to_string(steps_) + ": replica " +
                    std::to_string(i) + " (rank " + std::to_string(rank_of_replica(i)) +
                    ") has different weights from replica 0 (rank 0), fingerprints " + buf +
                    ". Replicas must apply identical updates; look for non-deterministic "
                    "kernels or a rank that fed different data to an op");
  }
}

void MirroredStrategy::run_on_replicas(const std::function<void(Replica&)>& fn) {
  const std::function<void(int)> job = [&](int i) { fn(*replicas_[static_cast<std::size_t>(i)]); };
  workers_->run(job);
}

// ================================================================ worker threads
//
// Note [Replica threads]: replica 0 runs on the calling thread, the others on these workers.
// OpenMP's thread count (--threads) is a per-thread setting: a thread started with std::thread
// does not see the caller's omp_set_num_threads but the process default (all cores). Kernels
// split their work (and so order their floating-point sums) by that count, so a worker that
// kept the default computed other bits than replica 0, and which replica created a cached
// oneDNN primitive decided the others' results too (Note [Primitives and thread counts],
// src/cpu/cpu_dnnl.h). Every job therefore runs under the caller's count on every thread.

ReplicaWorkers::ReplicaWorkers(int count) : errors_(static_cast<std::size_t>(count)) {
  for (int i = 1; i < count; ++i) threads_.emplace_back([this, i] { loop(i); });
}

ReplicaWorkers::~ReplicaWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ReplicaWorkers::run(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    compute_threads_ = omp_get_max_threads();
    remaining_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  try {
    fn(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
  }
  // A CommError is often the echo of another replica's failure: report the cause first.
  std::exception_ptr first, first_other;
  for (auto& e : errors_) {
    if (!e) continue;
    if (!first) first = e;
    try {
      std::rethrow_exception(e);
    } catch (const CommError&) {
    } catch (...) {
      if (!first_other) first_other = e;
    }
    e = nullptr;
  }
  if (first_other) std::rethrow_exception(first_other);
  if (first) std::rethrow_exception(first);
}

void ReplicaWorkers::loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    int threads = 1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      threads = compute_threads_;
    }
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    try {
      (*job)(index);
    } catch (...) {
      errors_[static_cast<std::size_t>(index)] = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace mirror::dist
