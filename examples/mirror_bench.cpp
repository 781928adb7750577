// mirror-bench: Mirror's benchmarks behind one program, one subcommand each.
//   mirror-bench allreduce [-b 8] [-e 64M] [-f 2] [-n 20] [-w 5] [--dtype float32]
//                          [--backend auto|mpi|nccl] [--allow-gpu-sharing]
//   mirror-bench train --model cnn|gru-rows --replicas 1,2 [--devices cpu|gpu] [--json FILE]
//                      (starts its own jobs)
//   mirror-bench predict --profile bench.json [--intra nvlink4] [--inter ib-ndr|--inter-sweep F]
//                        [--gpus-per-node 8] [--nodes 1,2,...,128] (no MPI; docs/scaling.md)
// Run it under mpirun / launch/mirrorrun; rank 0 prints the table.
#include <boost/program_options.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "mirror/distributed/runtime.h"
#include "mirror/distributed/strategy.h"
#include "mirror/error.h"
#include "tools/allreduce_sweep.h"
#include "tools/command_line.h"
#include "tools/scaling_model.h"
#include "tools/train_bench.h"

namespace po = boost::program_options;
using mirror::dist::Runtime;

namespace {

// ------------------------------------------------------------------ allreduce

int run_allreduce(Runtime& runtime, const std::vector<std::string>& args) {
  std::string min_bytes = "8", max_bytes = "64M", dtype = "float32";
  mirror::dist::AllreduceSweepOptions o;
  po::options_description desc(
      "mirror-bench allreduce: all-reduce bandwidth of Mirror's MPI communicator next to raw "
      "MPI_Allreduce (host memory), or of Mirror's NCCL communicator on each rank's GPU, each "
      "result checked against its closed form (like nccl-tests).\n"
      "Run under mpirun, e.g. launch/mirrorrun -np 2 build/bin/mirror-bench allreduce\n\nOptions");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("minbytes,b", po::value(&min_bytes)->default_value(min_bytes), "smallest size (8, 4K, 1M)");
  add("maxbytes,e", po::value(&max_bytes)->default_value(max_bytes), "largest size");
  add("stepfactor,f", po::value(&o.factor)->default_value(o.factor), "size multiplier per row");
  add("iters,n", po::value(&o.iterations)->default_value(o.iterations),
      "timed all-reduces per round");
  add("warmup_iters,w", po::value(&o.warmup)->default_value(o.warmup),
      "untimed all-reduces per size");
  add("rounds,r", po::value(&o.rounds)->default_value(o.rounds),
      "alternating Mirror/MPI rounds; the best of each is reported");
  add("dtype,d", po::value(&dtype)->default_value(dtype),
      "float32, float64, int32, int64, float16 or bfloat16");
  add("in-place", po::bool_switch(&o.in_place), "reduce in place (default: out of place)");
  add("backend", po::value(&o.backend)->default_value(o.backend),
      "auto (nccl when every rank has a GPU of its own, else mpi), mpi, or nccl (one GPU per "
      "rank; no usable GPU is an error)");
  add("allow-gpu-sharing", po::bool_switch(&o.allow_gpu_sharing),
      "let several ranks of a node use one GPU (NCCL may refuse it)");
  po::variables_map vm;
  const po::parsed_options parsed = po::command_line_parser(args).options(desc).run();
  mirror::tools::reject_stray_arguments(parsed);
  po::store(parsed, vm);
  if (vm.count("help")) {
    if (runtime.world_rank() == 0) std::cout << desc << "\n";
    return 0;
  }
  po::notify(vm);
  o.min_bytes = mirror::dist::parse_byte_size(min_bytes);
  o.max_bytes = mirror::dist::parse_byte_size(max_bytes);
  o.dtype = mirror::parse_dtype(dtype);
  const auto rows = mirror::dist::run_allreduce_sweep(runtime, o, std::cout);
  std::size_t wrong = 0;
  for (const auto& r : rows) wrong += r.mirror_wrong + r.mpi_wrong;
  if (wrong && runtime.world_rank() == 0)
    std::fprintf(stderr, "[mirror] %zu wrong elements: the all-reduce results are incorrect\n",
                 wrong);
  return wrong ? 1 : 0;
}

// ------------------------------------------------------------------ train

// The parent runs without MPI and relaunches this program once per replica count
// (`train --worker`), so it has its own main instead of run_main.
int run_train(int argc, char** argv) {
  mirror::dist::TrainBenchOptions o;
  std::string replicas = "1,2", result, first_bucket = "1M", bucket = "25M";
  bool worker = false;
  po::options_description desc(
      "mirror-bench train: weak scaling of MirroredStrategy on synthetic data. Starts one job "
      "per replica count (one rank per replica, through launch/mirrorrun or mpirun) and prints "
      "step time, samples/s, scaling efficiency vs the smallest count, exposed communication and "
      "peak memory.\n\nOptions");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("model", po::value(&o.model)->default_value(o.model),
      "cnn, cnn-stride2, resnet, inception or gru-rows, as in mirror-train (gru: an older name "
      "of gru-rows)");
  add("model-spec", po::value(&o.model_spec),
      "a model spec file (Mirror or Keras JSON) instead of --model, trained on synthetic data "
      "shaped like its input");
  add("replicas", po::value(&replicas)->default_value(replicas), "replica counts, e.g. 1,2,4");
  add("steps", po::value(&o.steps)->default_value(o.steps), "timed steps per count");
  add("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed steps first");
  add("rounds", po::value(&o.rounds)->default_value(o.rounds),
      "jobs per count, alternating counts; the fastest of each is reported (noisy machines)");
  add("batch-per-replica", po::value(&o.batch_per_replica)->default_value(o.batch_per_replica),
      "samples per replica per step");
  add("threads", po::value(&o.threads)->default_value(o.threads), "OpenMP threads per rank");
  add("devices", po::value(&o.devices)->default_value(o.devices),
      "cpu (one CPU replica per rank) or gpu (one GPU per rank; no usable GPU is an error)");
  add("allow-gpu-sharing", po::bool_switch(&o.allow_gpu_sharing),
      "with --devices gpu: let several ranks use one GPU (NCCL may refuse it)");
  add("json", po::value(&o.json_path), "write the rows as a JSON list (and a PNG next to it)");
  add("plot", po::value(&o.plot_path), "PNG path for the plot (needs gnuplot)");
  add("launcher", po::value(&o.launcher),
      "mpirun, or a mirrorrun script (default: launch/mirrorrun near the program, else mpirun)");
  add("overlap", po::value(&o.overlap)->default_value(o.overlap),
      "launch bucket all-reduces during backward (0 = after backward)");
  add("compression", po::value(&o.compression)->default_value(o.compression), "none, fp16, bf16");
  add("precision", po::value(&o.precision)->default_value(o.precision),
      "float32, mixed_bfloat16 or mixed_float16, as mirror-train --precision");
  add("tf32", po::value(&o.tf32)->default_value(o.tf32),
      "on | off: float32 products on a GPU's TF32 tensor cores, as mirror-train --tf32");
  add("first-bucket-bytes", po::value(&first_bucket)->default_value(first_bucket),
      "cap of the first bucket");
  add("bucket-bytes", po::value(&bucket)->default_value(bucket), "cap of the other buckets");
  add("baseline", po::bool_switch(&o.baseline),
      "also run each count > 1 without communication (every rank alone): the machine's ceiling");
  add("worker", po::bool_switch(&worker), "internal: run as one rank of a job");
  add("independent", po::bool_switch(&o.independent), "internal: the worker trains alone");
  add("result", po::value(&result), "internal: where rank 0 writes its row");
  try {
    po::variables_map vm;
    const po::parsed_options parsed =
        po::command_line_parser(std::vector<std::string>(argv + 2, argv + argc)).options(desc).run();
    mirror::tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (o.model == "gru") o.model = "gru-rows";  // one name per model across the programs
    o.replicas.clear();
    std::stringstream list(replicas);
    for (std::string item; std::getline(list, item, ',');) o.replicas.push_back(std::stoi(item));
    o.first_bucket_bytes = mirror::dist::parse_byte_size(first_bucket);
    o.bucket_bytes = mirror::dist::parse_byte_size(bucket);
    mirror::dist::check_train_bench_options(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror-bench train: %s (see --help)\n", e.what());
    return 2;
  }
  if (worker) {
    return mirror::dist::run_main(argc, argv, [&](Runtime& runtime) {
      return mirror::dist::run_train_bench_worker(runtime, o, result);
    });
  }
  try {
    return mirror::dist::run_train_bench(argv[0], o, std::cout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror-bench train: %s\n", e.what());
    return 1;
  }
}

// ------------------------------------------------------------------ predict

std::vector<int> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MIRROR_CHECK(used == item.size() && !item.empty(), mirror::InvalidArgument,
                 std::string(flag) + " expects numbers separated by commas, got '" + text + "'");
    out.push_back(v);
  }
  return out;
}

std::string read_text(const std::string& path, const char* what) {
  std::error_code ec;
  MIRROR_CHECK(!std::filesystem::is_directory(path, ec), mirror::InvalidArgument,
               std::string(what) + " '" + path + "' cannot be read: " + std::strerror(EISDIR));
  errno = 0;
  std::ifstream in(path);
  MIRROR_CHECK(in.good(), mirror::InvalidArgument,
               std::string(what) + " '" + path +
                   "' cannot be read: " + std::strerror(errno != 0 ? errno : EIO));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_predict_plot(const std::vector<mirror::dist::ScalingRow>& rows, const std::string& what,
                        const mirror::dist::LinkModel& inter, const std::string& png) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::cout << "plot: skipped (gnuplot is not installed)\n";
    return;
  }
  const std::string dat = png + ".dat", gp = png + ".gp";
  std::ofstream(dat) << mirror::dist::scaling_plot_data(rows);
  std::ofstream(gp) << mirror::dist::scaling_gnuplot(
      "mirror-bench predict: " + what + ", network " + inter.name, png, dat);
  const int rc = std::system(("gnuplot '" + gp + "'").c_str());
  std::cout << (rc == 0 ? "plot: " + png : "plot: gnuplot failed; data in " + dat) << "\n";
}

int predict_main(int argc, char** argv) {
  std::string profile_path, intra = "nvlink4", inter = "ib-ndr", sweep,
                            nodes = "1,2,4,8,16,32,64,128";
  std::string compression = "none", json_path, plot_path;
  int replicas = 0, gpus = 8, nics = 1;
  double compute_scale = 1.0;
  mirror::dist::PredictOptions o;
  po::options_description desc(
      "mirror-bench predict: step time, exposed communication and scaling efficiency of "
      "MirroredStrategy on nodes x GPUs, ring and hierarchical all-reduce, from a measured "
      "single-replica profile and alpha-beta link models (docs/scaling.md).\n"
      "Record the profile with: launch/mirrorrun -np 2 build/bin/mirror-bench train --replicas 2 "
      "--json prof.json\n\nOptions");
  auto add = desc.add_options();
  add("help,h", "show this help");
  add("profile", po::value(&profile_path), "mirror-bench train --json output (required)");
  add("replicas", po::value(&replicas)->default_value(replicas),
      "the profile row to use (0: the smallest count > 1)");
  add("intra", po::value(&intra)->default_value(intra),
      "link between a node's GPUs: nvlink4, pcie4, ib-hdr, ib-ndr, 25gbe, 100gbe or ALPHA_US:GBIT");
  add("inter", po::value(&inter)->default_value(inter), "a node's network link (same choices)");
  add("inter-sweep", po::value(&sweep),
      "fit the network link to a saved mirror-bench allreduce table across nodes instead");
  add("compute-scale", po::value(&compute_scale)->default_value(compute_scale),
      "multiply the profile's times (0.5: a device twice as fast as the profiled one)");
  add("nics", po::value(&nics)->default_value(nics), "network links per node (bandwidth x N)");
  add("gpus-per-node", po::value(&gpus)->default_value(gpus), "GPUs (ranks) per node");
  add("nodes", po::value(&nodes)->default_value(nodes), "node counts");
  add("overlap", po::value(&o.overlap)->default_value(o.overlap),
      "buckets start when ready (0: after backward)");
  add("compression", po::value(&compression)->default_value(compression),
      "none, fp16 or bf16 (half the bytes on the wire)");
  add("json", po::value(&json_path), "also write the rows as JSON");
  add("plot", po::value(&plot_path), "PNG of efficiency and exposed comm vs ranks (gnuplot)");
  try {
    po::variables_map vm;
    const po::parsed_options parsed =
        po::command_line_parser(std::vector<std::string>(argv + 2, argv + argc)).options(desc).run();
    mirror::tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    MIRROR_CHECK(!profile_path.empty(), mirror::InvalidArgument,
                 "--profile FILE is required (the JSON of mirror-bench train --json)");
    MIRROR_CHECK(nics >= 1, mirror::InvalidArgument, "--nics must be >= 1");
    o.wire_factor = mirror::dist::parse_compression(compression) == mirror::dist::Compression::kNone
                        ? 1.0
                        : 0.5;
    const auto node_counts = parse_int_list(nodes, "--nodes");
    const auto intra_link = mirror::dist::parse_link(intra);
    auto inter_link = mirror::dist::parse_link(inter);
    if (!sweep.empty()) {
      const auto table = mirror::dist::parse_sweep_table(read_text(sweep, "--inter-sweep"));
      inter_link = mirror::dist::fit_ring_sweep(table.points, table.ranks, "sweep");
    }
    inter_link.gbit_s *= nics;
    nlohmann::json list;
    try {
      list = nlohmann::json::parse(read_text(profile_path, "--profile"));
    } catch (const nlohmann::json::exception& e) {
      throw mirror::DataError("--profile '" + profile_path + "' is not JSON: " + e.what());
    }
    const auto profile = mirror::dist::scale_profile(
        mirror::dist::profile_from_bench_row(mirror::dist::pick_bench_row(list, replicas)),
        compute_scale);
    const auto rows =
        mirror::dist::predict_scaling(profile, intra_link, inter_link, gpus, node_counts, o);
    std::cout << mirror::dist::format_scaling_table(profile, intra_link, inter_link, o, rows);
    if (!json_path.empty()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& r : rows) {
        out.push_back({{"nodes", r.nodes},
                       {"gpus_per_node", r.gpus_per_node},
                       {"ring_step_ms", r.ring.step_ms},
                       {"ring_exposed_ms", r.ring.exposed_ms},
                       {"ring_efficiency", r.ring.efficiency},
                       {"hierarchical_step_ms", r.hierarchical.step_ms},
                       {"hierarchical_exposed_ms", r.hierarchical.exposed_ms},
                       {"hierarchical_efficiency", r.hierarchical.efficiency}});
      }
      std::ofstream(json_path) << out.dump(2) << "\n";
    }
    if (!plot_path.empty()) write_predict_plot(rows, profile.description, inter_link, plot_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mirror-bench predict: %s (see --help)\n", e.what());
    return 2;
  }
  return 0;
}

// ------------------------------------------------------------------ the table

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(Runtime&, const std::vector<std::string>&);
  int (*own_main)(int argc, char** argv) = nullptr;  // instead of run_main + run
};

const Subcommand kSubcommands[] = {
    {"allreduce",
     "all-reduce bandwidth sweep: Mirror's MpiCommunicator vs raw MPI_Allreduce, or NCCL on GPUs",
     run_allreduce},
    {"train", "scaling of MirroredStrategy steps over 1, 2, ... ranks (relaunches itself)", nullptr,
     run_train},
    {"predict", "predicted step time and scaling on nodes x GPUs from a train profile (no MPI)",
     nullptr, predict_main},
};

void usage(std::FILE* to) {
  std::fprintf(
      to, "usage: mirror-bench <subcommand> [options]   (<subcommand> --help for its options)\n\n");
  for (const auto& s : kSubcommands) std::fprintf(to, "  %-12s %s\n", s.name, s.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const Subcommand* chosen = nullptr;
  for (const auto& s : kSubcommands)
    if (argv[1] == std::string(s.name)) chosen = &s;
  if (!chosen) {
    std::fprintf(stderr, "mirror-bench: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  if (chosen->own_main) return chosen->own_main(argc, argv);
  const std::vector<std::string> args(argv + 2, argv + argc);
  return mirror::dist::run_main(argc, argv,
                                [&](Runtime& runtime) { return chosen->run(runtime, args); });
}
