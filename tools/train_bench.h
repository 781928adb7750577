// defines: the scaling benchmark behind `mirror-bench train`: a parent that relaunches the
// program once per replica count (one rank per replica, through launch/mirrorrun or mpirun), the
// worker each rank runs (synthetic data, MirroredStrategy steps, timings), and the table / JSON /
// PNG the parent writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "mirror/distributed/runtime.h"

namespace mirror::dist {

struct TrainBenchOptions {
  /// "cnn" (TF-tutorial CNN) or "gru-rows" (GRU over image rows; "gru" is an alias), the names
  /// mirror-train uses.
  std::string model = "cnn";
  /// A model spec file (Mirror or Keras JSON) instead of `model` (tools/bench_model.h).
  std::string model_spec;
  std::vector<int> replicas = {1, 2};
  int steps = 20;  // timed steps per replica count
  int warmup = 3;  // untimed steps first (allocator cache, oneDNN primitives)
  int rounds = 3;  // jobs per replica count (alternating); the fastest of each is reported
  std::int64_t batch_per_replica = 64;
  int threads = 1;  // OpenMP threads per rank
  /// "cpu": one CPU replica per rank; "gpu": one GPU per rank (GPU = local rank, NCCL between
  /// ranks); no usable GPU is an Unavailable error naming the reason.
  std::string devices = "cpu";
  bool allow_gpu_sharing = false;  // "gpu" with more ranks than GPUs (NCCL may refuse it)
  std::string json_path;           // list of rows; "" = none
  std::string plot_path;  // PNG (gnuplot); "" = next to json_path when gnuplot is installed
  /// How to start ranks: "" = launch/mirrorrun found near the executable, else mpirun;
  /// "mpirun" = mpirun -np R --oversubscribe --bind-to none; or a path to a mirrorrun script.
  std::string launcher;
  bool overlap = true;
  std::string compression = "none";
  /// float32 | mixed_bfloat16 | mixed_float16, as mirror-train's --precision.
  std::string precision = "float32";
  /// on | off, as mirror-train's --tf32 (Note [TF32], mirror/precision.h).
  std::string tf32 = "on";
  /// Parent: also run each count > 1 with every rank training alone (no communication), which
  /// measures what the machine allows (shared memory bandwidth, caches) before any all-reduce.
  bool baseline = false;
  /// Worker: train alone (a single-process strategy; the Runtime only gathers the timings).
  bool independent = false;
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  std::size_t bucket_bytes = std::size_t{25} << 20;
};

/// One replica count's measurements (the slowest rank's times). step_ms is the median step: on
/// a shared machine a few steps stalled by other tenants move the mean a lot and the median
/// little; the mean is kept next to it. The phase times are means.
struct TrainBenchRow {
  int replicas = 0;
  double step_ms = 0;       // median over the timed steps
  double mean_step_ms = 0;  // wall time of the timed steps / steps
  double samples_per_s = 0;
  double scaling_efficiency = 0;  // (samples/s at R) / (R * samples/s at the smallest count / it)
  double exposed_comm_ms = 0;     // waiting for buckets after backward, per step
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  /// Process CPU time (all threads) per step, the busiest rank: above step_ms means a rank keeps
  /// more than one core busy (e.g. a communication thread that spins).
  double cpu_ms = 0;
  std::size_t peak_bytes = 0;  // the largest allocator peak among the ranks
  int buckets = 0, overlapped_buckets = 0;
  bool replicas_identical = false;  // weight fingerprints equal on every rank at the end
  /// With --baseline: the same ranks training without communication, as scaling_efficiency
  /// (the ceiling the mirrored run can reach on this machine); 0 = not measured.
  double compute_only_efficiency = 0;
  /// Per bucket (in launch order, rank 0, means over the timed steps): its bytes as reduced
  /// (before compression), and when it was launched and first seen complete, in ms from the
  /// start of the step. With overlap on, launch_ms is when its gradients became ready during
  /// backward: the profile `mirror-bench predict` reads (docs/scaling.md).
  struct BucketTiming {
    std::size_t bytes = 0;
    double launch_ms = 0, done_ms = 0;
  };
  std::vector<BucketTiming> bucket_timings;
};

/// The plot's data: per row, replicas, samples/s, ideal samples/s (linear from the first row),
/// scaling efficiency and the no-comm ceiling (NaN when not measured; at most 1, Note [Ceiling
/// above 1]).
std::string train_bench_plot_data(const std::vector<TrainBenchRow>& rows);
/// Note [Ceiling above 1]: "" when every measured no-comm ceiling is at most 1, else a note
/// naming the largest ("1.511 at 2 replicas") and saying it is noise, drawn at 1.
std::string ceiling_note(const std::vector<TrainBenchRow>& rows);
/// The gnuplot script drawing `dat` into `png`: samples/s and scaling efficiency (with the
/// no-comm ceiling under --baseline, `note` from ceiling_note() in its key), both from 0, the
/// run's settings in the title.
std::string train_bench_gnuplot(const TrainBenchOptions& o, const std::string& png,
                                const std::string& dat, const std::string& note = "");

/// Validates the options; throws InvalidArgument naming the bad one.
void check_train_bench_options(const TrainBenchOptions& o);

/// Throws Unavailable, with discover_gpus()'s reason and what to do, when `o` asks for GPUs
/// and this process cannot use any. The parent calls it before starting jobs.
void check_train_bench_devices(const TrainBenchOptions& o);

/// The parent: runs one job per replica count (argv0 = this program, relaunched as
/// `argv0 train --worker --result FILE ...`), prints the table to `out`, writes the JSON list and
/// the plot. Needs no MPI itself. Returns the process exit code.
int run_train_bench(const std::string& argv0, const TrainBenchOptions& o, std::ostream& out);

/// One rank of a job: trains `o.warmup + o.steps` steps on synthetic data with one replica per
/// rank; rank 0 writes the row as JSON to `result_path`. Collective.
int run_train_bench_worker(Runtime& runtime, const TrainBenchOptions& o,
                           const std::string& result_path);

/// The command-line options that reproduce `o` in a worker (without the launcher part).
std::vector<std::string> train_bench_worker_args(const TrainBenchOptions& o,
                                                 const std::string& result_path);

}  // namespace mirror::dist
