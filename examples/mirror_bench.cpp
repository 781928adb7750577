// mirror-bench: Mirror's benchmarks behind one program, one subcommand each.
//   mirror-bench allreduce [-b 8] [-e 64M] [-f 2] [-n 20] [-w 5] [--dtype float32]
//                          [--backend auto|mpi|nccl] [--allow-gpu-sharing]
//   mirror-bench train --model cnn|gru-rows --replicas 1,2 [--devices cpu|gpu] [--json FILE]
//                      (starts its own jobs)
// Run it under mpirun / launch/mirrorrun; rank 0 prints the table.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "mirror/distributed/runtime.h"
#include "tools/allreduce_sweep.h"
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
  po::store(po::command_line_parser(args).options(desc).run(), vm);
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
    po::store(po::command_line_parser(std::vector<std::string>(argv + 2, argv + argc))
                  .options(desc)
                  .run(),
              vm);
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
