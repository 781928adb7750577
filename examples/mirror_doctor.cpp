// mirror-doctor: says in plain words whether Mirror will train on a GPU here, and if not, why.
// Under mpirun every rank reports (build, driver, runtime, devices, MPI) and rank 0 prints one
// section per node and the verdict. The report logic lives in tools/doctor.cpp.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <string>

#include "mirror/distributed/runtime.h"
#include "mirror/gpu.h"
#include "mirror/ops.h"
#include "tools/command_line.h"
#include "tools/doctor.h"

namespace po = boost::program_options;
using mirror::doctor::RankReport;

namespace {

constexpr const char* kAbout =
    "mirror-doctor: explains whether Mirror will train on a GPU on this machine, and if not,\n"
    "why (built without CUDA, no or too old NVIDIA driver, CUDA_VISIBLE_DEVICES hiding GPUs,\n"
    "more ranks than GPUs, ...). Run it the way you run training to check every node:\n"
    "  mirror-doctor                    this machine, one rank\n"
    "  mpirun -np 4 mirror-doctor       every node of the job, ranks per node vs GPUs\n"
    "The last line is the verdict: 'will train on N x <GPU>' or 'will fall back to the CPU\n"
    "because ...'. The exit status is 0 either way (1 for bad flags or a failure).\n\nOptions";

std::string first_line(std::string s) {
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.erase(nl);
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) {
    s.pop_back();
  }
  return s;
}

RankReport local_report(const mirror::dist::Runtime& rt) {
  RankReport r;
  r.world_rank = rt.world_rank();
  r.world_size = rt.world_size();
  r.local_rank = rt.local_rank();
  r.local_size = rt.local_size();
  r.host = rt.host();
  r.mirror_version = MIRROR_VERSION;
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(library, &len) == MPI_SUCCESS) {
    r.mpi_library = first_line(std::string(library, static_cast<std::size_t>(len)));
  }
  int major = 0, minor = 0;
  if (MPI_Get_version(&major, &minor) == MPI_SUCCESS) {
    r.mpi_standard = std::to_string(major) + "." + std::to_string(minor);
  }
  r.mpi_thread_level = mirror::dist::thread_level_name(rt.thread_level());
  r.cpu_precision = mirror::doctor::cpu_precision_support();
  r.cpu_isa = mirror::ops::instruction_set(mirror::Device::cpu());
  r.gpu = mirror::discover_gpus();
  // A build without CUDA does not look at the variable; the doctor still shows it.
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
      cvd && !r.gpu.cuda_visible_devices_set) {
    r.gpu.cuda_visible_devices_set = true;
    r.gpu.cuda_visible_devices = cvd;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool as_json = false;
  mirror::dist::DeviceRequest request;
  po::options_description options(kAbout);
  options.add_options()("help,h", "show this help")("json", po::bool_switch(&as_json),
                                                    "print the report as JSON (for scripts)")(
      "devices", po::value(&request.devices)->default_value("auto"),
      "judge this --devices request as mirror-train would: auto, gpu, gpu:0,gpu:1, cpu, cpu:N")(
      "allow-gpu-sharing", po::bool_switch(&request.allow_sharing),
      "as in mirror-train: several ranks of a node may share a GPU");
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(argc, argv).options(options).run();
    mirror::tools::reject_stray_arguments(parsed);
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "mirror-doctor: " << e.what() << " (see mirror-doctor --help)\n";
    return 1;
  }
  if (vm.count("help")) {
    std::cout << options << "\n";
    return 0;
  }
  return mirror::dist::run_main(argc, argv, [&](mirror::dist::Runtime& rt) {
    const RankReport mine = local_report(rt);
    const auto all = rt.all_gather_string(mirror::doctor::to_json(mine).dump());
    if (rt.world_rank() != 0) return 0;
    std::vector<RankReport> reports;
    for (const auto& text : all) {
      reports.push_back(mirror::doctor::rank_report_from_json(nlohmann::json::parse(text)));
    }
    const auto diagnosis = mirror::doctor::diagnose(std::move(reports), request);
    if (as_json) {
      std::cout << mirror::doctor::render_json(diagnosis).dump(2) << "\n";
    } else {
      std::cout << mirror::doctor::render_text(diagnosis);
    }
    std::cout.flush();
    return 0;
  });
}
