// mirror-bench train: weak-scaling benchmark of MirroredStrategy (see train_bench.h).
#include "tools/train_bench.h"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <omp.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "mirror/data/batch.h"
#include "mirror/distributed/strategy.h"
#include "mirror/error.h"
#include "mirror/gpu.h"
#include "mirror/memory.h"
#include "mirror/nn/models.h"
#include "mirror/optim/optimizer.h"
#include "mirror/precision.h"
#include "tools/bench_model.h"
#include "tools/rank_gpu.h"

extern char** environ;

namespace mirror::dist {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
/// The model's name in tables, rows and plots: the built-in name or the spec's name and file.
std::string model_label(const TrainBenchOptions& o) {
  return o.model_spec.empty() ? o.model : bench::bench_model("", o.model_spec).label;
}
}  // namespace

void check_train_bench_options(const TrainBenchOptions& o) {
  MIRROR_CHECK(!o.model_spec.empty() || o.model == "cnn" || o.model == "gru-rows" ||
                   o.model == "gru" || o.model == "resnet" || o.model == "inception" ||
                   o.model == "cnn-stride2",
               InvalidArgument,
               "--model must be cnn, cnn-stride2, resnet, inception or gru-rows (gru: the same "
               "model), got '" +
                   o.model + "'; --model-spec FILE benchmarks your own model");
  // The parent reads the spec once, so a bad file is one message before any job starts.
  if (!o.model_spec.empty()) bench::bench_model("", o.model_spec);
  MIRROR_CHECK(!o.replicas.empty(), InvalidArgument, "--replicas needs at least one count");
  for (int r : o.replicas) {
    MIRROR_CHECK(r >= 1 && r <= 1024, InvalidArgument,
                 "--replicas counts must be in [1, 1024], got " + std::to_string(r));
  }
  MIRROR_CHECK(o.steps >= 1 && o.warmup >= 0 && o.rounds >= 1, InvalidArgument,
               "--steps and --rounds must be >= 1 and --warmup >= 0");
  MIRROR_CHECK(o.batch_per_replica >= 1, InvalidArgument, "--batch-per-replica must be >= 1");
  MIRROR_CHECK(o.threads >= 1, InvalidArgument, "--threads must be >= 1");
  MIRROR_CHECK(o.devices == "cpu" || o.devices == "gpu", InvalidArgument,
               "--devices must be cpu or gpu, got '" + o.devices + "'");
  parse_compression(o.compression);
  try {
    parse_precision(o.precision);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("--precision: ") + e.what());
  }
  MIRROR_CHECK(o.tf32 == "on" || o.tf32 == "off", InvalidArgument,
               "--tf32 must be on or off, got '" + o.tf32 + "'");
}

void check_train_bench_devices(const TrainBenchOptions& o) {
  if (o.devices != "gpu") return;
  const GpuReport& gpus = discover_gpus();
  if (gpus.usable()) return;
  throw Unavailable(
      "--devices gpu needs a usable GPU, but " +
      (gpus.unavailable_reason.empty() ? std::string("none is visible") : gpus.unavailable_reason) +
      "; run mirror-doctor for details, or benchmark the CPU with --devices cpu");
}

// ================================================================ worker

namespace {

constexpr int kDistinctBatches = 4;  // cycled, so data preparation is outside the timing

nlohmann::json bucket_timings_json(const TrainBenchRow& r) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& b : r.bucket_timings)
    list.push_back({{"bytes", b.bytes}, {"launch_ms", b.launch_ms}, {"done_ms", b.done_ms}});
  return list;
}

nlohmann::json row_to_json(const TrainBenchRow& r, const TrainBenchOptions& o) {
  return {{"model", model_label(o)},
          {"replicas", r.replicas},
          {"batch_per_replica", o.batch_per_replica},
          {"threads_per_rank", o.threads},
          {"devices", o.devices},
          {"steps", o.steps},
          {"step_ms", r.step_ms},
          {"mean_step_ms", r.mean_step_ms},
          {"samples_per_s", r.samples_per_s},
          {"scaling_efficiency", r.scaling_efficiency},
          {"exposed_comm_ms", r.exposed_comm_ms},
          {"exposed_comm_fraction", r.step_ms > 0 ? r.exposed_comm_ms / r.step_ms : 0.0},
          {"forward_ms", r.forward_ms},
          {"backward_ms", r.backward_ms},
          {"optimizer_ms", r.optimizer_ms},
          {"cpu_ms", r.cpu_ms},
          {"peak_bytes", r.peak_bytes},
          {"buckets", r.buckets},
          {"overlapped_buckets", r.overlapped_buckets},
          {"overlap", o.overlap},
          {"compression", o.compression},
          {"precision", o.precision},
          {"tf32", o.tf32},
          {"replicas_identical", r.replicas_identical},
          {"compute_only_efficiency", r.compute_only_efficiency},
          {"bucket_timings", bucket_timings_json(r)}};
}

double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

template <class T>
T max_over_ranks(Runtime& rt, T value) {
  const auto all = rt.all_gather_value<T>(value);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace

namespace {

/// This rank's one replica: the CPU, or its GPU (GPU = local rank) chosen by the Runtime as
/// mirror-train does, which throws Unavailable with the reason when there is none.
Device bench_device(Runtime& rt, const TrainBenchOptions& o) {
  if (o.devices != "gpu") return Device::cpu(0);
  return rank_gpu(rt, o.allow_gpu_sharing, "mirror-bench train");
}

std::unique_ptr<MirroredStrategy> make_bench_strategy(Runtime& rt, const TrainBenchOptions& o,
                                                      Device device) {
  StrategyOptions so;
  so.buckets = {o.first_bucket_bytes, o.bucket_bytes};
  so.compression = parse_compression(o.compression);
  so.overlap = o.overlap;
  so.precision = parse_precision(o.precision);
  so.divergence_check_every = 0;  // checked once at the end, outside the timing
  so.seed = 1;
  const nn::ModelSpec spec = bench::bench_model(o.model, o.model_spec).spec;
  ModelFactory model = [spec](Device d) { return nn::make_model(spec, DType::kFloat32, d, 7); };
  OptimizerFactory adam = [] { return std::make_unique<optim::Adam>(); };
  const std::vector<Device> devices = {device};
  if (o.independent) return std::make_unique<MirroredStrategy>(devices, model, adam, so);
  return std::make_unique<MirroredStrategy>(rt, devices, model, adam, so);
}

std::vector<data::Batch> make_pool(const TrainBenchOptions& o, int rank, int world) {
  const std::int64_t per = o.batch_per_replica;
  const std::int64_t size = std::max<std::int64_t>(per * world * kDistinctBatches, 1024);
  const std::shared_ptr<data::Dataset> ds = bench::bench_model(o.model, o.model_spec, size).data;
  std::vector<data::Batch> pool;
  for (int k = 0; k < kDistinctBatches; ++k) {
    pool.push_back(bench::bench_batch(*ds, rank, world, per, k));
  }
  return pool;
}

/// Adds one step's bucket launch / completion times to the row's sums (launch order).
void add_bucket_timings(TrainBenchRow& row, const StepTiming& t, const BucketPlan& plan) {
  if (row.bucket_timings.size() < t.buckets.size()) row.bucket_timings.resize(t.buckets.size());
  for (std::size_t i = 0; i < t.buckets.size(); ++i) {
    const auto& b = t.buckets[i];
    auto& out = row.bucket_timings[i];
    if (b.index >= 0 && static_cast<std::size_t>(b.index) < plan.buckets.size())
      out.bytes = plan.buckets[static_cast<std::size_t>(b.index)].bytes();
    out.launch_ms += b.launch_ms;
    out.done_ms += b.done_ms;
  }
}

/// Warm-up, then the timed steps; per-step averages, the slowest rank's.
TrainBenchRow time_steps(Runtime& rt, MirroredStrategy& s, const std::vector<data::Batch>& pool,
                         const TrainBenchOptions& o, Device device) {
  auto step = [&](std::int64_t k) {
    std::vector<data::Batch> batches = {pool[static_cast<std::size_t>(k % kDistinctBatches)]};
    batches[0].step = k;
    return s.train_step(batches, 1e-3);
  };
  for (int k = 0; k < o.warmup; ++k) step(k);
  rt.barrier();
  TrainBenchRow row;
  row.replicas = rt.world_size();  // one replica per rank (alone when independent)
  std::vector<double> step_ms;
  const auto start = Clock::now();
  const double cpu_start = process_cpu_ms();
  for (int k = 0; k < o.steps; ++k) {
    const auto step_start = Clock::now();
    const StepResult r = step(o.warmup + k);
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - step_start).count());
    row.exposed_comm_ms += r.timing.exposed_comm_ms;
    row.forward_ms += r.timing.forward_ms;
    row.backward_ms += r.timing.backward_ms;
    row.optimizer_ms += r.timing.optimizer_ms;
    row.buckets = r.buckets;
    row.overlapped_buckets = r.overlapped_buckets;
    add_bucket_timings(row, r.timing, s.plan());
  }
  for (auto& b : row.bucket_timings) {
    b.launch_ms /= o.steps;
    b.done_ms /= o.steps;
  }
  const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  row.cpu_ms = max_over_ranks(rt, (process_cpu_ms() - cpu_start) / o.steps);
  const double n = o.steps;
  row.mean_step_ms = max_over_ranks(rt, elapsed) / n;
  std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
  row.step_ms = max_over_ranks(rt, step_ms[step_ms.size() / 2]);
  row.samples_per_s =
      static_cast<double>(o.batch_per_replica * row.replicas) / (row.step_ms / 1000.0);
  row.exposed_comm_ms = max_over_ranks(rt, row.exposed_comm_ms / n);
  row.forward_ms = max_over_ranks(rt, row.forward_ms / n);
  row.backward_ms = max_over_ranks(rt, row.backward_ms / n);
  row.optimizer_ms = max_over_ranks(rt, row.optimizer_ms / n);
  row.peak_bytes = max_over_ranks(rt, allocator_for(device).stats().peak_in_use);
  return row;
}

}  // namespace

int run_train_bench_worker(Runtime& rt, const TrainBenchOptions& o,
                           const std::string& result_path) {
  check_train_bench_options(o);
  // Exactly `threads` OpenMP threads per rank, whatever the launcher exported.
  omp_set_num_threads(o.threads);
  const Device device = bench_device(rt, o);
  // A CPU without bfloat16 instructions, say, is an error naming what it lacks.
  check_precision_support(parse_precision(o.precision), {device});
  set_tf32(o.tf32 == "on");  // Note [TF32]
  auto strategy = make_bench_strategy(rt, o, device);
  const auto pool = make_pool(o, rt.world_rank(), rt.world_size());
  TrainBenchRow row = time_steps(rt, *strategy, pool, o, device);
  try {
    strategy->check_replicas_identical();
    row.replicas_identical = true;
  } catch (const CommError& e) {
    if (rt.world_rank() == 0) std::fprintf(stderr, "[mirror] %s\n", e.what());
  }
  if (rt.world_rank() == 0) {
    std::ofstream out(result_path);
    out << row_to_json(row, o).dump() << "\n";
    MIRROR_CHECK(out.good(), Error, "cannot write the benchmark result to " + result_path);
  }
  return row.replicas_identical ? 0 : 1;
}

std::vector<std::string> train_bench_worker_args(const TrainBenchOptions& o,
                                                 const std::string& result_path) {
  std::vector<std::string> args = {"train",
                                   "--worker",
                                   "--result",
                                   result_path,
                                   "--model",
                                   o.model,
                                   "--model-spec",
                                   o.model_spec,
                                   "--steps",
                                   std::to_string(o.steps),
                                   "--warmup",
                                   std::to_string(o.warmup),
                                   "--batch-per-replica",
                                   std::to_string(o.batch_per_replica),
                                   "--threads",
                                   std::to_string(o.threads),
                                   "--compression",
                                   o.compression,
                                   "--precision",
                                   o.precision,
                                   "--tf32",
                                   o.tf32,
                                   "--devices",
                                   o.devices,
                                   "--first-bucket-bytes",
                                   std::to_string(o.first_bucket_bytes),
                                   "--bucket-bytes",
                                   std::to_string(o.bucket_bytes),
                                   o.overlap ? "--overlap=1" : "--overlap=0"};
  if (o.independent) args.push_back("--independent");
  if (o.allow_gpu_sharing) args.push_back("--allow-gpu-sharing");
  return args;
}

// ================================================================ parent

namespace {

std::string self_executable(const std::string& argv0) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::absolute(argv0).string() : self.string();
}

/// launch/mirrorrun of the source tree the program was built in (bin/ sits in the build dir,
/// usually inside the repository), or "" when not found.
std::string find_mirrorrun(const std::string& exe) {
  const fs::path dir = fs::path(exe).parent_path();
  for (const fs::path& candidate : {dir / "../launch/mirrorrun", dir / "../../launch/mirrorrun",
                                    dir / "../share/mirror/launch/mirrorrun"}) {
    std::error_code ec;
    if (fs::exists(candidate, ec) && access(candidate.c_str(), X_OK) == 0) {
      return fs::weakly_canonical(candidate).string();
    }
  }
  return "";
}

std::vector<std::string> launcher_prefix(const TrainBenchOptions& o, const std::string& exe,
                                         int ranks) {
  std::string launcher = o.launcher;
  if (launcher.empty()) launcher = find_mirrorrun(exe);
  if (launcher.empty() || launcher == "mpirun") {
    std::vector<std::string> cmd = {
        "mpirun", "-np", std::to_string(ranks), "--oversubscribe", "--bind-to",
        "none",   "-x",  "OMP_NUM_THREADS"};
    if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
    return cmd;
  }
  // The binding is spelled out: mirrorrun derives it from `nproc`, which reports
  // OMP_NUM_THREADS instead of the cores when that is set (as it is here).
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int per_rank = cores / ranks;
  if (per_rank >= 1) {
    return {launcher,
            "-np",
            std::to_string(ranks),
            "--map-by",
            "slot:PE=" + std::to_string(per_rank),
            "--bind-to",
            "core",
            "--"};
  }
  return {launcher, "-np",          std::to_string(ranks), "--bind-to",
          "none",   "--mpirun-arg", "--oversubscribe",     "--"};
}

int spawn_and_wait(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  MIRROR_CHECK(rc == 0, Error, "cannot start '" + args[0] + "': " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    MIRROR_CHECK(errno == EINTR, Error, "waitpid failed: " + std::string(std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

TrainBenchRow row_from_json(const nlohmann::json& j) {
  TrainBenchRow r;
  r.replicas = j.at("replicas");
  r.step_ms = j.at("step_ms");
  r.mean_step_ms = j.at("mean_step_ms");
  r.samples_per_s = j.at("samples_per_s");
  r.exposed_comm_ms = j.at("exposed_comm_ms");
  r.forward_ms = j.at("forward_ms");
  r.backward_ms = j.at("backward_ms");
  r.optimizer_ms = j.at("optimizer_ms");
  r.cpu_ms = j.at("cpu_ms");
  r.peak_bytes = j.at("peak_bytes");
  r.buckets = j.at("buckets");
  r.overlapped_buckets = j.at("overlapped_buckets");
  r.replicas_identical = j.at("replicas_identical");
  for (const auto& b : j.value("bucket_timings", nlohmann::json::array()))
    r.bucket_timings.push_back({b.at("bytes"), b.at("launch_ms"), b.at("done_ms")});
  return r;
}

void print_table(const std::vector<TrainBenchRow>& rows, const TrainBenchOptions& o,
                 std::ostream& out) {
  out << "mirror-bench train: model " << model_label(o) << " on " << o.devices << ", batch "
      << o.batch_per_replica << " per replica, " << o.threads << " thread(s) per rank, " << o.steps
      << " steps (+" << o.warmup << " warm-up, best of " << o.rounds << " round(s)), overlap "
      << (o.overlap ? "on" : "off") << ", compression " << o.compression << ", precision "
      << o.precision << (o.precision == "float32" && o.tf32 == "off" ? " (--tf32 off)" : "")
      << "\n";
  out << "replicas   step ms    mean ms   cpu ms   samples/s   scaling   "
         "exposed comm ms (% step)   fwd/bwd/opt ms        peak MiB   buckets (overlapped)"
      << (o.baseline ? "   no-comm ceiling" : "") << "\n";
  for (const auto& r : rows) {
    char line[256];
    std::snprintf(
        line, sizeof line,
        "%8d %9.2f %10.2f %8.2f %11.1f %9.3f %14.2f (%5.1f%%)       %6.1f/%6.1f/%5.1f %12.1f %6d "
        "(%d)",
        r.replicas, r.step_ms, r.mean_step_ms, r.cpu_ms, r.samples_per_s, r.scaling_efficiency,
        r.exposed_comm_ms, r.step_ms > 0 ? 100.0 * r.exposed_comm_ms / r.step_ms : 0.0,
        r.forward_ms, r.backward_ms, r.optimizer_ms, static_cast<double>(r.peak_bytes) / (1 << 20),
        r.buckets, r.overlapped_buckets);
    out << line;
    if (o.baseline && r.compute_only_efficiency > 0) {
      std::snprintf(line, sizeof line, "   %15.3f", r.compute_only_efficiency);
      out << line;
    }
    out << (r.replicas_identical ? "" : "   REPLICAS DIFFER") << "\n";
  }
  out << "step ms: the median step (slowest rank), which samples/s and scaling use; mean ms: "
         "all timed steps' wall time / steps\n";
  if (o.baseline) {
    out << "no-comm ceiling: the same ranks each training alone (no all-reduce), as a scaling "
           "efficiency; the gap to it is what communication costs\n";
    if (const std::string note = ceiling_note(rows); !note.empty())
      out << "no-comm ceiling " << note << " in the plot\n";
  }
}

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

void write_plot(const std::vector<TrainBenchRow>& rows, const TrainBenchOptions& o,
                const std::string& png, std::ostream& out) {
  const fs::path dat = fs::path(png).replace_extension(".dat");
  const fs::path gp = fs::path(png).replace_extension(".gp");
  {
    std::ofstream d(dat);
    d << train_bench_plot_data(rows);
    std::ofstream g(gp);
    g << train_bench_gnuplot(o, png, dat.string(), ceiling_note(rows));
  }
  const int rc = spawn_and_wait({"gnuplot", gp.string()});
  if (rc == 0) {
    out << "plot: " << png << "\n";
  } else {
    out << "plot: gnuplot failed (exit " << rc << "); data in " << dat.string() << "\n";
  }
}

}  // namespace

namespace {

/// Runs the job of `ranks` ranks; throws Error when it fails.
TrainBenchRow run_job(const TrainBenchOptions& o, const std::string& exe, const fs::path& tmp,
                      int ranks) {
  const std::string result = (tmp / ("replicas-" + std::to_string(ranks) + ".json")).string();
  fs::remove(result);
  std::vector<std::string> cmd = launcher_prefix(o, exe, ranks);
  cmd.push_back(exe);
  for (auto& a : train_bench_worker_args(o, result)) cmd.push_back(a);
  std::fprintf(stderr, "[mirror-bench] %s\n", join(cmd).c_str());
  const int rc = spawn_and_wait(cmd);
  std::ifstream in(result);
  MIRROR_CHECK(rc == 0 && in, Error,
               "the " + std::to_string(ranks) + "-rank job failed (exit " + std::to_string(rc) +
                   "); command: " + join(cmd));
  return row_from_json(nlohmann::json::parse(in));
}

void write_outputs(const std::vector<TrainBenchRow>& rows, const TrainBenchOptions& o,
                   std::ostream& out) {
  if (!o.json_path.empty()) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& row : rows) list.push_back(row_to_json(row, o));
    std::ofstream j(o.json_path);
    j << list.dump(2) << "\n";
    MIRROR_CHECK(j.good(), Error, "cannot write " + o.json_path);
    out << "json: " << o.json_path << "\n";
  }
  std::string png = o.plot_path;
  if (png.empty() && !o.json_path.empty()) png = fs::path(o.json_path).replace_extension(".png");
  if (png.empty()) return;
  if (gnuplot_available()) {
    write_plot(rows, o, png, out);
  } else {
    out << "plot: skipped (gnuplot is not installed)\n";
  }
}

}  // namespace

// Note [Ceiling above 1]: the no-comm ceiling is the scaling efficiency of R ranks each training
// alone; with no communication and the same per-replica work it cannot beat R times the base
// count's rate, so a value above 1 is measurement noise (other load on a shared machine during
// the base run, clock boost, caches). The table prints the measured value; the plot draws it at
// 1 and its key says what was measured, so no curve shows a ceiling above the ideal unexplained.
std::string ceiling_note(const std::vector<TrainBenchRow>& rows) {
  const TrainBenchRow* worst = nullptr;
  for (const TrainBenchRow& r : rows) {
    if (r.compute_only_efficiency > 1 &&
        (!worst || r.compute_only_efficiency > worst->compute_only_efficiency))
      worst = &r;
  }
  if (!worst) return "";
  char text[160];
  std::snprintf(
      text, sizeof text,
      "measured %.3f at %d replicas, drawn at 1: running alone cannot beat the base rate, "
      "so above 1 is noise",
      worst->compute_only_efficiency, worst->replicas);
  return text;
}

std::string train_bench_plot_data(const std::vector<TrainBenchRow>& rows) {
  std::ostringstream d;
  const double base = rows.empty() ? 0 : rows.front().samples_per_s / rows.front().replicas;
  const bool ceiling = std::any_of(rows.begin(), rows.end(), [](const TrainBenchRow& r) {
    return r.compute_only_efficiency > 0;
  });
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TrainBenchRow& r = rows[i];
    d << r.replicas << " " << r.samples_per_s << " " << base * r.replicas << " "
      << r.scaling_efficiency << " ";
    // The smallest count is its own ceiling (efficiency 1); NaN: gnuplot leaves the point out.
    if (r.compute_only_efficiency > 0) {
      d << std::min(r.compute_only_efficiency, 1.0);  // Note [Ceiling above 1]
    } else if (ceiling && i == 0) {
      d << r.scaling_efficiency;
    } else {
      d << "NaN";
    }
    d << "\n";
  }
  return d.str();
}

std::string train_bench_gnuplot(const TrainBenchOptions& o, const std::string& png,
                                const std::string& dat, const std::string& note) {
  std::ostringstream g;
  // Both panels start at 0 and autoscale their top over every curve drawn, so nothing is
  // clipped and a small gap between curves does not look like a large one.
  g << "set terminal png size 900,800\n"
    << "set output '" << png << "'\n"
    << "set multiplot layout 2,1 title \"mirror-bench train: " << model_label(o) << " on " << o.devices
    << ", batch " << o.batch_per_replica << " per replica, " << o.threads
    << " thread(s) per rank\\n"
    << o.steps << " steps (+" << o.warmup << " warm-up), best of " << o.rounds << ", overlap "
    << (o.overlap ? "on" : "off") << ", compression " << o.compression << ", precision "
    << o.precision << "\"\n"
    << "set xlabel 'replicas (ranks)'\nset xtics 1\nset grid\nset key left top\n"
    << "set offsets 0.1, 0.1, graph 0.08, 0\n"
    << "set ylabel 'samples/s'\nset yrange [0:*]\n"
    << "plot '" << dat << "' using 1:2 with linespoints lw 2 title 'measured', '" << dat
    << "' using 1:3 with lines dt 2 title 'ideal (linear)'\n"
    << "set ylabel 'scaling efficiency'\nset yrange [0:*]\nset key left bottom\n"
    << "plot '" << dat << "' using 1:4 with linespoints lw 2 title 'measured', 1 with lines dt 2 "
    << "title 'ideal'";
  if (o.baseline) {
    g << ", '" << dat << "' using 1:5 with linespoints dt 3 title 'no-comm ceiling"
      << (note.empty() ? "" : " (" + note + ")") << "'";
  }
  g << "\nunset multiplot\n";
  return g.str();
}

int run_train_bench(const std::string& argv0, const TrainBenchOptions& o, std::ostream& out) {
  check_train_bench_options(o);
  check_train_bench_devices(o);
  const std::string exe = self_executable(argv0);
  // One OpenMP team of `threads` per rank (the launcher exports it).
  setenv("OMP_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
  const fs::path tmp =
      fs::temp_directory_path() / ("mirror-bench-train-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  // Rounds alternate the counts; the best (fastest) job of each count is kept, so a burst of
  // load from other processes on a shared machine does not decide the comparison.
  std::map<int, TrainBenchRow> best, alone;
  auto keep = [](std::map<int, TrainBenchRow>& m, const TrainBenchRow& row) {
    auto it = m.find(row.replicas);
    if (it == m.end() || row.step_ms < it->second.step_ms) m[row.replicas] = row;
  };
  TrainBenchOptions independent = o;
  independent.independent = true;
  try {
    for (int round = 0; round < o.rounds; ++round) {
      for (int r : o.replicas) {
        keep(best, run_job(o, exe, tmp, r));
        if (o.baseline && r > 1) keep(alone, run_job(independent, exe, tmp, r));
      }
    }
  } catch (const Error&) {
    fs::remove_all(tmp);
    throw;
  }
  fs::remove_all(tmp);
  std::vector<TrainBenchRow> rows;
  for (auto& [r, row] : best) rows.push_back(row);
  const double base = rows.front().samples_per_s / rows.front().replicas;
  for (auto& row : rows) {
    row.scaling_efficiency = row.samples_per_s / (base * row.replicas);
    const auto it = alone.find(row.replicas);
    if (it != alone.end()) {
      row.compute_only_efficiency = it->second.samples_per_s / (base * row.replicas);
    }
  }
  print_table(rows, o, out);
  write_outputs(rows, o, out);
  bool identical = true;
  for (const auto& row : rows) identical = identical && row.replicas_identical;
  return identical ? 0 : 1;
}

}  // namespace mirror::dist
