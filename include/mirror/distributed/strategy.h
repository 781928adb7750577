// defines: MirroredStrategy (one model replica per local device, fused and overlapped gradient
// all-reduce, identical optimizer steps everywhere), its options and its step results.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mirror/data/batch.h"
#include "mirror/device.h"
#include "mirror/distributed/bucket.h"
#include "mirror/nn/sequential.h"
#include "mirror/optim/optimizer.h"
#include "mirror/precision.h"

namespace mirror::dist {

class Runtime;
class Communicator;
class ReplicaWorkers;
class Work;

/// Payload type of the gradient all-reduce. fp16/bf16 halve the bytes on the wire; the sum is
/// taken in the 16-bit type, then cast back to the parameter dtype (identically everywhere).
enum class Compression { kNone, kFloat16, kBFloat16 };
/// "none", "fp16" (or "float16"), "bf16" (or "bfloat16"); InvalidArgument otherwise.
Compression parse_compression(const std::string& text);
const char* compression_name(Compression c);

/// How GPU replicas exchange tensors. kAuto and kNccl: NCCL between the GPUs. kMpi: MPI between
/// ranks (and in-process sums between a rank's replicas) over page-locked host copies of the GPU
/// tensors (Note [Staged collectives], distributed/staged_communicator.h), for machines without
/// NCCL or with several ranks on one GPU that the loaded NCCL refuses. CPU replicas always use
/// MPI and in-process collectives.
enum class DeviceComm { kAuto, kNccl, kMpi };
/// "auto", "nccl" or "mpi"; InvalidArgument otherwise (distributed/staged_communicator.cpp).
DeviceComm parse_device_comm(const std::string& text);
const char* device_comm_name(DeviceComm c);

/// The loss a step minimises (Note [Float-target losses] in mirror/ops.h). Softmax
/// cross-entropy takes class labels (int32 [n]); BCE and MSE take float targets [n, K] (or [n]
/// when K == 1) as wide as the model's output.
enum class LossKind { kSoftmaxCrossEntropy, kBinaryCrossEntropy, kMeanSquaredError };
/// "softmax-cross-entropy" (alias "cross-entropy"), "binary-cross-entropy" (alias "bce"),
/// "mse" (alias "mean-squared-error"); InvalidArgument listing the choices otherwise.
LossKind parse_loss(const std::string& text);
/// The canonical name parse_loss reads: "softmax-cross-entropy", "binary-cross-entropy", "mse".
const char* loss_name(LossKind kind);

/// What a step with a non-finite (inf/NaN) reduced gradient does. The check runs on the reduced
/// bytes, which are identical on every replica, so every replica takes the same decision.
enum class NonFinitePolicy { kSkip, kStop };

struct StrategyOptions {
  BucketCaps buckets;
  Compression compression = Compression::kNone;
  /// Every collective must finish within this time, else the job aborts naming step and bucket
  /// (see the communicators). 0 = the Runtime's default_timeout().
  std::chrono::milliseconds collective_timeout{0};
  /// All-gather a weight fingerprint every K steps and throw CommError on divergence; 0 = never.
  int divergence_check_every = 100;
  /// Micro-batches per step (gradient accumulation); one all-reduce per step whatever N is.
  int accumulation_steps = 1;
  /// On OutOfMemory, retry the replica's step with its batch split into 2, 4, ... micro-batches
  /// (Note [OOM split] in strategy_step.cpp: until a replica has completed a step with its
  /// current split, its buckets are launched after backward, so a retry never repeats one).
  bool split_on_oom = false;
  NonFinitePolicy non_finite = NonFinitePolicy::kSkip;
  /// Launch a bucket's all-reduce as soon as its gradients are ready (during backward). When
  /// false, every bucket is launched after backward (for measuring what overlap buys).
  bool overlap = true;
  /// Base of the per-step random seed (dropout); see step_seed().
  std::uint64_t seed = 0;
  /// The loss; it must suit the batches' labels (class ids or float targets) and the model's
  /// output width, else the first step throws InvalidArgument naming both.
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  /// Note [Mixed precision] (mirror/precision.h): the math mode of every step; mixed_float16
  /// adds dynamic loss scaling (Note [Loss scaling]). Parameters and optimizer state stay as
  /// built (float32).
  Precision precision = Precision::kFloat32;
  /// The transport of GPU replicas (`--comm`).
  DeviceComm device_comm = DeviceComm::kAuto;
  /// Test seam: when set, each replica's communicator is replaced, right after it is created, by
  /// what this returns for it (a decorator, e.g. one that fails on purpose). Leave empty.
  std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>, int local_replica)>
      wrap_communicator;
};

/// Checks that every device can run `precision` (InvalidArgument naming what a device lacks,
/// e.g. a CPU without AVX-512 BF16) and returns the notes of emulated modes (empty when all run
/// natively), one line per device type, for the log.
std::vector<std::string> check_precision_support(Precision precision,
                                                 const std::vector<Device>& devices);

struct StepTiming {
  double forward_ms = 0;
  double backward_ms = 0;
  /// Time waiting for buckets after backward finished: the communication overlap did not hide.
  double exposed_comm_ms = 0;
  double optimizer_ms = 0;
  double total_ms = 0;
  /// Each bucket's all-reduce, in ms from the start of the step: when it was launched and when
  /// it was first seen complete (a test during backward, or the wait after it). Local replica 0.
  struct Bucket {
    int index = 0;
    double launch_ms = 0, done_ms = 0;
  };
  std::vector<Bucket> buckets;
};

/// Global (all replicas) results of one step. For train_step, the loss is computed before the
/// update. `loss` is the mean over the real samples of the global batch (per sample: the
/// cross-entropy, or the mean over its target elements for BCE/MSE), weighted by the batches'
/// weights. Accuracy is correct / count for softmax cross-entropy and correct / target_values
/// for BCE; MSE has none. mse = squared_error_sum / target_values, mae = abs_error_sum /
/// target_values.
struct StepResult {
  double loss = 0;
  double loss_sum = 0;             // loss * count
  std::int64_t correct = 0;        // softmax CE: real samples whose argmax equals the label; BCE:
                                   // target elements with (logit > 0) == (target > 0.5); MSE: 0
  std::int64_t count = 0;          // real (weight > 0) samples
  std::int64_t target_values = 0;  // float-target elements of the real samples (BCE/MSE)
  double squared_error_sum = 0;    // MSE: sum of (y - t)^2 over real elements (BCE: of
                                   // sigmoid(y) - t)
  double abs_error_sum = 0;        // MAE numerator, same elements
  bool skipped = false;            // non-finite gradients: no update was applied anywhere
  double loss_scale = 0;           // mixed_float16: the scale this step's loss was multiplied by
                                   // (0: no loss scaling)
  bool stop_requested = false;     // a stop signal reached some rank (Note [Preemption])
  int micro_batches = 1;           // largest micro-batch count used by a local replica
  int buckets = 0;                 // all-reduces of the step (0 with a single replica)
  int overlapped_buckets = 0;      // of those, launched while backward was still running (fewest
                                   // over the local replicas)
  StepTiming timing;               // slowest local replica, per phase
};

/// The model each replica builds (and initialises) on its device. It may be called with
/// different devices; every call must build the same architecture.
using ModelFactory = std::function<nn::Sequential(Device)>;
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>()>;

/// The dropout seed of a global step: a mix of the base seed and the step index, identical on
/// every replica.
std::uint64_t step_seed(std::uint64_t base, std::int64_t step);

/// Note [Mirrored step]
/// Every replica holds the whole model. A step runs, on every local replica concurrently (one
/// thread each): forward on its shard -> loss divided by the GLOBAL sample count -> backward.
/// Gradients live as views inside flat per-bucket buffers (see Note [Bucket assignment]); when
/// the last gradient of bucket k is final, bucket k's SUM all-reduce is launched, strictly in
/// index order, while backward continues with lower layers. After backward the replica waits
/// for the buckets still in flight, then applies the optimizer. Because the sum of per-replica
/// shares is the global mean and the communicator delivers identical bytes to every replica,
/// the update (and so the weights) stay bitwise identical everywhere.
class MirroredStrategy {
 public:
  /// Builds one replica per device in `local_devices` (this rank's share of the world), checks
  /// that every rank builds the same model (CommError naming the first differing rank and
  /// tensor otherwise), and broadcasts world replica 0's initial weights to every replica.
  /// Collective over the ranks. With several local replicas, every rank must drive the same
  /// number (the in-process group joined across ranks requires it; InvalidArgument otherwise).
  MirroredStrategy(Runtime& runtime, std::vector<Device> local_devices, ModelFactory model_factory,
                   OptimizerFactory optimizer_factory, StrategyOptions options = {});
  /// Single process: the replicas on `local_devices` are the whole world (threads, no MPI, no
  /// Runtime needed). Same semantics otherwise.
  MirroredStrategy(std::vector<Device> local_devices, ModelFactory model_factory,
                   OptimizerFactory optimizer_factory, StrategyOptions options = {});
  ~MirroredStrategy();
  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;

  /// One training step; `batches` holds one batch per local replica (this replica's shard of
  /// the global batch, global_count = real samples of the whole global batch). Collective: every
  /// rank must call it the same number of times.
  StepResult train_step(std::vector<data::Batch>& batches, double lr);
  /// Forward only (training = false): global loss, correct and count. No weight change.
  StepResult evaluate_step(std::vector<data::Batch>& batches);

  /// All-gathers every replica's weights_fingerprint(); throws CommError naming the replicas
  /// (and their ranks) that differ from replica 0. The fingerprint covers the non-trained
  /// buffers, which every train_step leaves identical on every replica (Note [Buffers across
  /// replicas], distributed/strategy_sync_bn.cpp). Collective.
  void check_replicas_identical();

  int local_replicas() const;
  int world_replicas() const { return world_replicas_; }
  /// World index of local replica 0 (replicas on lower ranks come first).
  int first_replica() const { return first_replica_; }
  const std::vector<Device>& devices() const { return devices_; }
  nn::Sequential& model(int local_replica = 0);
  optim::Optimizer& optimizer(int local_replica = 0);
  /// 64-bit hash of every weight's bytes, in parameter order, then every buffer's.
  std::uint64_t weights_fingerprint(int local_replica = 0);
  const BucketPlan& plan() const { return plan_; }
  /// The text whose equality across ranks the constructor checked (one line per item).
  const std::string& model_description() const { return description_; }
  /// Completed train_step calls (skipped steps included).
  std::int64_t steps() const { return steps_; }
  const StrategyOptions& options() const { return options_; }
  /// The dynamic loss scale (mixed_float16; stays at its initial value otherwise). Identical on
  /// every replica: it is updated from the reduced gradients.
  const LossScale& loss_scale() const { return loss_scale_; }
  /// Restores the loss scale (resuming a checkpoint); InvalidArgument unless the scale is a
  /// power of two in [LossScale::kMin, kMax] and good_steps in [0, kGrowthInterval).
  void set_loss_scale(const LossScale& s);

  struct Replica;  // per-device state (distributed/strategy_replica.h)

 private:
  void init(ModelFactory& model_factory, OptimizerFactory& optimizer_factory);
  void build_replicas(ModelFactory& model_factory, OptimizerFactory& optimizer_factory);
  void check_model_fingerprint();
  void bind_gradients_to_buckets();
  void create_communicators();
  void broadcast_initial_weights();
  void run_on_replicas(const std::function<void(Replica&)>& fn);
  int rank_of_replica(int replica) const;
  // step pieces (strategy_step.cpp)
  /// Adds the micro-batch's loss and metrics (options_.loss) to r's; returns d loss / d logits.
  /// `output_lengths`: the valid steps of the model's output (empty: every step), which a loss
  /// over per-step labels checks against the batch's (Note [Dense labels]).
  Tensor add_loss(Replica& r, const Tensor& logits, const data::Batch& micro,
                  const std::vector<std::int32_t>& output_lengths);
  void run_micro_batches(Replica& r, const data::Batch& batch, bool training, bool overlap);
  void compute_gradients(Replica& r, const data::Batch& batch,
                         std::chrono::steady_clock::time_point start);
  void on_grads_ready(Replica& r, const std::vector<nn::Parameter*>& ready);
  void launch_bucket(Replica& r, int bucket);
  void finish_buckets(Replica& r);
  void launch_train_metrics(Replica& r);
  /// All-reduces (sums) the step's metrics and, when given, the float64 copies of `buffers`
  /// appended to them; null with one replica.
  std::shared_ptr<Work> launch_metrics(Replica& r, Tensor& metrics, std::int64_t count,
                                       const char* what,
                                       const std::vector<nn::Buffer*>& buffers = {});
  /// Replaces every local buffer by the average of the reduced sums in r's metrics.
  void adopt_buffer_averages(Replica& r);
  StepResult reduce_metrics(std::vector<Tensor>& metrics);
  /// mixed_float16: multiplies d loss / d logits by the loss scale (and applies the test hook).
  void scale_loss_gradient(Replica& r, Tensor& dlogits);
  void maybe_check_divergence();

  Runtime* runtime_;  // null: single-process world
  std::vector<Device> devices_;
  StrategyOptions options_;
  int world_replicas_ = 1;
  int first_replica_ = 0;
  std::vector<int> replicas_per_rank_;
  BucketPlan plan_;
  std::string description_;
  std::unique_ptr<Communicator> cross_rank_;  // MPI among ranks; outlives the replicas' groups
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<ReplicaWorkers> workers_;
  std::int64_t steps_ = 0;
  LossScale loss_scale_;
  // Test hook (MIRROR_TEST_FP16_OVERFLOW="replica:step"): that world replica's loss gradient is
  // made infinite at that strategy step, as an fp16 overflow would; -1 = off.
  int overflow_replica_ = -1;
  std::int64_t overflow_step_ = -1;
};

}  // namespace mirror::dist
