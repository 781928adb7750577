// Cross-replica state of the model: the ReplicaSum that synchronized BatchNormalization calls
// in forward and backward, and the averaging of non-trained buffers (BatchNorm moving
// statistics) across replicas.
//
// Note [Buffers across replicas]: an unsynchronized BatchNorm normalises each replica's shard,
// so its moving statistics differ between replicas (DDP's and TF's default). They are averaged
// (one all-reduce per buffer, kAvg: every replica receives the same bytes) before evaluation,
// before every divergence check and before a checkpoint; after that, the replica fingerprint,
// which covers the buffers, is equal everywhere. With synchronized BatchNorm every replica
// computes the same statistics from the same global sums, so there is nothing to average.
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

/// Whether some buffer of the model can differ across replicas (an unsynchronized BatchNorm,
/// or a layer with buffers this file does not know).
bool has_replica_local_buffers(nn::Sequential& model) {
  for (auto& layer : model.layers()) {
    if (layer->buffers().empty()) continue;
    auto* bn = dynamic_cast<nn::BatchNormalization*>(layer.get());
    if (bn == nullptr || !bn->synchronized()) return true;
  }
  return false;
}

}  // namespace

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

void MirroredStrategy::average_buffers() {
  if (world_replicas_ == 1 || !has_replica_local_buffers(replicas_[0]->model)) return;
  run_on_replicas([&](Replica& r) {
    for (nn::Buffer* b : r.model.buffers()) {
      r.comm
          ->all_reduce(b->value, b->value, ReduceOp::kAvg,
                       "average of " + b->name + " after step " + std::to_string(steps_))
          ->wait();
    }
  });
}

}  // namespace mirror::dist
