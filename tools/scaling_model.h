// defines: the scaling predictor behind `mirror-bench predict`: a measured single-replica step
// profile (from `mirror-bench train --json`), alpha-beta link models (presets or fitted to a
// `mirror-bench allreduce` sweep), ring and hierarchical all-reduce times, and the step
// simulation that turns them into step time, exposed communication and scaling efficiency.
// Pure functions (no MPI, no devices); the model is explained in docs/scaling.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mirror::dist {

/// One replica's step as measured: the compute (everything but waiting for communication),
/// when backward ends, and each gradient bucket in launch order with the time its gradients are
/// ready, in ms from the start of the step.
struct StepProfile {
  double compute_ms = 0;       // step time minus exposed communication
  double backward_end_ms = 0;  // forward + backward
  struct Bucket {
    double bytes = 0;  // as reduced, before compression
    double ready_ms = 0;
  };
  std::vector<Bucket> buckets;
  std::string description;  // "cnn, batch 64 per replica, cpu"
};

/// The profile in one row of `mirror-bench train --json` (a row with buckets and overlap on:
/// with overlap off the launch times are not the ready times). Throws DataError naming what is
/// missing and how to record it.
StepProfile profile_from_bench_row(const nlohmann::json& row);
/// The profile with every time multiplied by `factor` (> 0): the same model on a device that is
/// `factor` times slower (0.5: twice as fast). Throws InvalidArgument for factor <= 0.
StepProfile scale_profile(StepProfile p, double factor);
/// The row of a `--json` list to use: the one with `replicas` (0: the smallest count > 1, as a
/// single replica has no buckets). Throws DataError when there is none.
const nlohmann::json& pick_bench_row(const nlohmann::json& list, int replicas);

/// alpha-beta model of one link class: a message of B bytes takes alpha + B / bandwidth.
struct LinkModel {
  std::string name;
  double alpha_us = 0;  // per message (one ring step), software included
  double gbit_s = 0;    // per direction, per node (inter-node) or per GPU (intra-node)
  std::string source;   // where the figures come from (docs/scaling.md cites them)
  double seconds(double bytes) const { return alpha_us * 1e-6 + bytes * 8.0 / (gbit_s * 1e9); }
};

/// NVLink 4, PCIe 4 x16, InfiniBand HDR / NDR, 25 / 100 GbE (docs/scaling.md, "Presets").
const std::vector<LinkModel>& link_presets();
/// A preset name, or "ALPHA_US:GBIT_S" (e.g. "5:100"). Throws InvalidArgument listing the
/// presets otherwise.
LinkModel parse_link(const std::string& text);

/// Least-squares fit of a ring all-reduce sweep among `ranks` ranks: the time of `bytes` is
/// 2 (ranks - 1) alpha + 2 (ranks - 1) / ranks * bytes / bandwidth. Points: (bytes, us).
/// Throws InvalidArgument with fewer than 2 distinct sizes or a non-increasing fit.
LinkModel fit_ring_sweep(const std::vector<std::pair<double, double>>& points, int ranks,
                         const std::string& name);
/// The sizes and Mirror times (us) of a saved `mirror-bench allreduce` table, and its rank
/// count (from its header). Throws DataError when the text is not such a table.
struct SweepTable {
  int ranks = 0;
  std::vector<std::pair<double, double>> points;
};
SweepTable parse_sweep_table(const std::string& text);

enum class Algorithm { kRing, kHierarchical };
const char* algorithm_name(Algorithm a);

struct Cluster {
  int nodes = 1;
  int gpus_per_node = 1;
  LinkModel intra;  // between the GPUs of a node
  LinkModel inter;  // a node's network bandwidth (all its NICs) and latency
  int ranks() const { return nodes * gpus_per_node; }
};

/// Seconds of one all-reduce of `bytes` on `c` (0 with one rank). Ring: one ring through every
/// rank, node by node; each step waits for its slowest link. Hierarchical: reduce-scatter in
/// each node, all-reduce of the shards among the nodes (one ring per GPU, sharing the node's
/// network), all-gather in each node.
double allreduce_seconds(double bytes, const Cluster& c, Algorithm a);

struct Prediction {
  double step_ms = 0;
  double comm_ms = 0;     // all buckets' all-reduce time (busy link time)
  double exposed_ms = 0;  // the part after backward ends (not hidden by overlap)
  double efficiency = 1;  // compute / step: weak scaling, the same batch per replica
};

struct PredictOptions {
  bool overlap = true;       // buckets start when ready; false: all after backward
  double wire_factor = 1.0;  // bytes on the wire per reduced byte: 0.5 with fp16/bf16
};

/// Simulates one step: bucket k's all-reduce starts when its gradients are ready (or after
/// backward without overlap) and after bucket k-1's (one at a time, in order, as Mirror's
/// communication thread runs them); the step waits for the last, then runs the optimizer.
Prediction predict_step(const StepProfile& p, const Cluster& c, Algorithm a,
                        const PredictOptions& o);

/// One configuration of a scaling table: both algorithms (they are equal on one node).
struct ScalingRow {
  int nodes = 1, gpus_per_node = 1;
  Prediction ring, hierarchical;
};
/// 1 x 1, then every count of `nodes` x `gpus_per_node` (intra / inter links as given).
std::vector<ScalingRow> predict_scaling(const StepProfile& p, const LinkModel& intra,
                                        const LinkModel& inter, int gpus_per_node,
                                        const std::vector<int>& nodes, const PredictOptions& o);
/// The table `mirror-bench predict` prints (a header naming the profile, links and options).
std::string format_scaling_table(const StepProfile& p, const LinkModel& intra,
                                 const LinkModel& inter, const PredictOptions& o,
                                 const std::vector<ScalingRow>& rows);
/// gnuplot data (ranks, ring and hierarchical efficiency, ring and hierarchical exposed ms)
/// and the script drawing them into `png`.
std::string scaling_plot_data(const std::vector<ScalingRow>& rows);
std::string scaling_gnuplot(const std::string& title, const std::string& png,
                            const std::string& dat);

}  // namespace mirror::dist
