// Cross-replica state of the model: the ReplicaSum that synchronized BatchNormalization calls
// in forward and backward, and which non-trained buffers (BatchNorm moving statistics) differ
// between replicas and so are averaged every step.
//
// Note [Buffers across replicas]: an unsynchronized BatchNorm normalises each replica's shard,
// so each replica's forward moves its moving statistics towards its own shard's statistics.
// The strategy averages those buffers across all replicas at the end of every training step
// (they travel, as float64, in the step's metrics all-reduce: no collective of their own), as
// TensorFlow's MirroredStrategy does with its MEAN-aggregated moving averages. The moving
// average is linear, so averaging every step gives, up to rounding, what averaging once at the
// end would; but because every step does it, the buffers are identical on every replica after
// every step: the fingerprint covers them, a checkpoint saves the state every replica holds,
// and writing one (at any step, on a schedule or at a preemption) changes nothing that follows,
// so a resumed run continues bit for bit. With synchronized BatchNorm every replica computes
// the statistics of the global batch, so there is nothing to average.
#include "distributed/strategy_replica.h"
#include "mirror/nn/cnn_layers.h"

namespace mirror::dist {

namespace {

/// Sums host vectors over every replica of the world through the replica's communicator.
class CommReplicaSum final : public nn::ReplicaSum {
 public:
  CommReplicaSum(Communicator& comm, Device device, const std::int64_t& step)
      : comm_(comm), device_(device), step_(step) {}

  void sum(std::vector<double>& values, const std::string& tag) override {
    const auto n = static_cast<std::int64_t>(values.size());
    Tensor t = Tensor::from_vector(values, {n}).to(device_);
    comm_.all_reduce(t, t, ReduceOp::kSum, "step " + std::to_string(step_) + " " + tag)->wait();
    values = t.to(Device::cpu()).to_vector<double>();
  }

  // Note [Device batch norm] (mirror/ops.h): in device order, on the express lane, so the sum
  // neither waits on the host nor queues behind the gradient buckets in flight.
  void sum_on_device(Tensor& values, const std::string& tag) override {
    comm_.express()
        .all_reduce(values, values, ReduceOp::kSum, "step " + std::to_string(step_) + " " + tag)
        ->wait();
  }

 private:
  Communicator& comm_;
  Device device_;
  const std::int64_t& step_;
};

}  // namespace

std::vector<nn::Buffer*> replica_local_buffers(nn::Sequential& model) {
  std::vector<nn::Buffer*> local;
  for (auto& layer : model.layers()) {
    auto* bn = dynamic_cast<nn::BatchNormalization*>(layer.get());
    if (bn != nullptr && bn->synchronized()) continue;
    for (nn::Buffer* b : layer->buffers()) local.push_back(b);
  }
  return local;
}

std::int64_t total_numel(const std::vector<nn::Buffer*>& buffers) {
  std::int64_t n = 0;
  for (const nn::Buffer* b : buffers) n += b->value.numel();
  return n;
}

bool has_synchronized_batchnorm(nn::Sequential& model) {
  for (auto& layer : model.layers()) {
    auto* bn = dynamic_cast<nn::BatchNormalization*>(layer.get());
    if (bn != nullptr && bn->synchronized()) return true;
  }
  return false;
}

std::unique_ptr<nn::ReplicaSum> make_replica_sum(Communicator& comm, Device device,
                                                 const std::int64_t& step) {
  return std::make_unique<CommReplicaSum>(comm, device, step);
}

}  // namespace mirror::dist
