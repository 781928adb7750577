// mirror-doctor's report logic: per-node verdicts through dist::select_devices (the rules the
// training programs use), plain-words reasons, and text/JSON renderings.
#include "tools/doctor.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "mirror/error.h"
#include "mirror/ops.h"
#include "mirror/precision.h"

namespace mirror::doctor {

using nlohmann::json;

std::string cuda_version_str(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cudnn_version_str(int v) {
  if (v <= 0) return "none";
  const int major_unit = v >= 90000 ? 10000 : 1000;  // cuDNN 9 changed the encoding
  return std::to_string(v / major_unit) + "." + std::to_string((v % major_unit) / 100) + "." +
         std::to_string(v % 100);
}

std::string nccl_version_str(int v) {
  if (v <= 0) return "none";
  const int major_unit = v >= 20900 ? 10000 : 1000;  // NCCL 2.9 changed the encoding
  return std::to_string(v / major_unit) + "." + std::to_string((v % major_unit) / 100) + "." +
         std::to_string(v % 100);
}

std::string cublas_version_str(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

namespace {

std::string gib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return buf;
}

bool only_blanks(const std::string& s) { return s.find_first_not_of(" \t") == std::string::npos; }

/// MIRROR_CHECK appends " [file:line]"; users of the doctor do not need it.
std::string strip_where(std::string msg) {
  if (!msg.empty() && msg.back() == ']') {
    if (const auto at = msg.rfind(" ["); at != std::string::npos) msg.erase(at);
  }
  return msg;
}

}  // namespace

std::string cpu_precision_support() {
  const ops::MathSupport bf16 = ops::math_support(Device::cpu(), MathMode::kBFloat16);
  const ops::MathSupport fp16 = ops::math_support(Device::cpu(), MathMode::kFloat16);
  std::string s = bf16.missing.empty() ? "bf16 yes (AVX-512 BF16 through oneDNN)"
                                       : "bf16 no (mixed_bfloat16 fails: AVX-512 BF16 missing)";
  s += "; fp16 ";
  s += !fp16.missing.empty()   ? "no"
       : fp16.fallback.empty() ? "yes"
                               : "emulated (no fp16 arithmetic)";
  return s;
}

std::string gpu_precision_support(const GpuDevice& d) {
  auto one = [&](const char* what, MathMode m, const char* needs) {
    return std::string(what) + (gpu_math_missing(d.cc_major, d.cc_minor, m).empty()
                                    ? " yes"
                                    : std::string(" no (needs compute capability ") + needs + ")");
  };
  // Note [TF32]: the same tensor cores as bfloat16 (Ampere, 8.0), used by float32 unless --tf32 off.
  return one("bf16", MathMode::kBFloat16, "8.0") + ", " +
         one("fast fp16", MathMode::kFloat16, "7.0") + ", " +
         one("TF32 for float32", MathMode::kBFloat16, "8.0");
}

namespace {

std::string describe_device(const GpuDevice& d) {
  std::string s = "cuda:" + std::to_string(d.index) + "  " + d.name + ", compute capability " +
                  std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ", " +
                  gib(d.total_bytes);
  if (!d.pci_bus_id.empty()) s += ", PCI " + d.pci_bus_id;
  return s + "; " + gpu_precision_support(d);
}

/// "2 × NVIDIA H100, 1 × NVIDIA A100" from name counts.
std::string count_list(const std::map<std::string, int>& counts) {
  std::string s;
  for (const auto& [name, n] : counts) {
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " × " + (name.empty() ? "GPU" : name);
  }
  return s;
}

const GpuDevice* find_device(const GpuReport& gpu, int index) {
  for (const auto& d : gpu.devices) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

void version_notes(const GpuReport& gpu, std::vector<std::string>& notes) {
  if (!gpu.built_with_cuda) return;
  if (gpu.cudnn_loaded && gpu.cudnn_compiled &&
      cudnn_version_str(gpu.cudnn_loaded).substr(0, 2) !=
          cudnn_version_str(gpu.cudnn_compiled).substr(0, 2)) {
    notes.push_back("cuDNN " + cudnn_version_str(gpu.cudnn_loaded) +
                    " is loaded but Mirror was built "
                    "against " +
                    cudnn_version_str(gpu.cudnn_compiled) + " (major versions differ)");
  }
  if (gpu.nccl_loaded && gpu.nccl_compiled && gpu.nccl_loaded / 100 != gpu.nccl_compiled / 100) {
    notes.push_back("NCCL " + nccl_version_str(gpu.nccl_loaded) +
                    " is loaded but Mirror was built "
                    "against " +
                    nccl_version_str(gpu.nccl_compiled));
  }
}

NodeVerdict judge_node(const std::string& host, const std::vector<const RankReport*>& ranks,
                       const dist::DeviceRequest& request) {
  NodeVerdict v;
  v.host = host;
  std::map<std::string, int> used;  // GPU name -> count of distinct GPUs
  std::set<std::string> seen_gpus;
  bool any_gpu = false, all_cpu_chosen = true;
  for (const RankReport* r : ranks) v.ranks.push_back(r->world_rank);
  // What each local rank sees, as Runtime::setup_devices gathers it (Note [Per-rank GPU binding]).
  dist::NodeGpuViews node(ranks.size());
  for (const RankReport* r : ranks) {
    if (r->local_rank < 0 || r->local_rank >= static_cast<int>(node.size())) {
      node.clear();
      break;
    }
    for (const GpuDevice& d : r->gpu.devices) node[r->local_rank].push_back(dist::gpu_identity(d));
  }
  for (const RankReport* r : ranks) {
    dist::DeviceSelection sel;
    try {
      sel = dist::select_devices(request, r->local_rank, r->local_size, r->gpu, node);
    } catch (const Error& e) {
      v.kind = NodeVerdict::Kind::kError;
      v.text = "will stop with an error on rank " + std::to_string(r->world_rank) + ": " +
               strip_where(e.what());
      return v;
    }
    if (sel.cpu_fallback) {
      v.kind = NodeVerdict::Kind::kCpuFallback;
      v.text = "will fall back to the CPU because " + plain_reason(r->gpu);
      return v;
    }
    for (const Device& d : sel.devices) {
      if (!d.is_cuda()) continue;
      any_gpu = true;
      all_cpu_chosen = false;
      const GpuDevice* g = find_device(r->gpu, d.index);
      const std::string id =
          g && !dist::gpu_identity(*g).empty() ? dist::gpu_identity(*g) : std::to_string(d.index);
      if (seen_gpus.insert(id).second) ++used[g ? g->name : ""];
    }
  }
  if (!any_gpu && all_cpu_chosen) {
    v.kind = NodeVerdict::Kind::kCpuChosen;
    v.text = "will train on the CPU because --devices " + request.devices + " asks for it";
    return v;
  }
  v.kind = NodeVerdict::Kind::kGpu;
  v.gpus_used = static_cast<int>(seen_gpus.size());
  v.gpus = used;
  v.text = "will train on " + count_list(used);
  const GpuReport& gpu = ranks.front()->gpu;
  const int visible = static_cast<int>(gpu.devices.size());
  if (visible > v.gpus_used) {
    v.notes.push_back(std::to_string(visible - v.gpus_used) + " of " + std::to_string(visible) +
                      " visible GPUs stay idle: start " + std::to_string(visible) +
                      " ranks on this node (mirrorrun -np " + std::to_string(visible) +
                      ") to use them all");
  }
  if (static_cast<int>(ranks.size()) > v.gpus_used) {
    v.notes.push_back(std::to_string(ranks.size()) + " ranks share " + std::to_string(v.gpus_used) +
                      " GPU(s) (--allow-gpu-sharing)");
  }
  version_notes(gpu, v.notes);
  return v;
}

std::string overall_verdict(const std::vector<NodeVerdict>& nodes, bool& gpu) {
  using Kind = NodeVerdict::Kind;
  gpu = false;
  for (const auto& n : nodes) {
    if (n.kind == Kind::kError) {
      return nodes.size() == 1 ? n.text : n.text + " (node " + n.host + ")";
    }
  }
  std::vector<const NodeVerdict*> fallback;
  for (const auto& n : nodes) {
    if (n.kind == Kind::kCpuFallback) fallback.push_back(&n);
  }
  if (nodes.size() == 1) {
    gpu = nodes.front().kind == Kind::kGpu;
    return nodes.front().text;
  }
  if (!fallback.empty()) {
    const std::string because =
        fallback.front()->text.substr(fallback.front()->text.find("because"));
    if (fallback.size() == nodes.size()) {
      return "will fall back to the CPU on all " + std::to_string(nodes.size()) + " nodes " +
             because;
    }
    return "will fall back to the CPU on node " + fallback.front()->host + " " + because +
           " (other nodes have usable GPUs: fix that node, or pass --devices cpu everywhere)";
  }
  if (nodes.front().kind == Kind::kCpuChosen) return nodes.front().text;
  std::map<std::string, int> total;
  for (const auto& n : nodes) {
    for (const auto& [name, count] : n.gpus) total[name] += count;
  }
  gpu = true;
  return "will train on " + count_list(total) + " across " + std::to_string(nodes.size()) +
         " nodes";
}

}  // namespace

std::string plain_reason(const GpuReport& gpu) {
  if (gpu.usable()) return "";
  if (!gpu.built_with_cuda) {
    return gpu.unavailable_reason.empty() ? "this Mirror was built without CUDA"
                                          : gpu.unavailable_reason;
  }
  if (gpu.cuda_visible_devices_set && only_blanks(gpu.cuda_visible_devices)) {
    return "CUDA_VISIBLE_DEVICES is set to an empty string, which hides every GPU from CUDA "
           "(unset it, or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0,1)";
  }
  const std::string cuda_says = gpu.unavailable_reason.empty()
                                    ? "no CUDA device is visible to this process"
                                    : gpu.unavailable_reason;
  if (gpu.driver_version == 0) {
    return "no NVIDIA driver was found on this machine (CUDA says: " + cuda_says + ")";
  }
  if (gpu.driver_version < gpu.runtime_version_compiled && !gpu.unavailable_reason.empty()) {
    return "the NVIDIA driver supports CUDA up to " + cuda_version_str(gpu.driver_version) +
           ", older than the CUDA " + cuda_version_str(gpu.runtime_version_compiled) +
           " runtime Mirror was built with (CUDA says: " + cuda_says + ")";
  }
  return cuda_says;
}

Diagnosis diagnose(std::vector<RankReport> ranks, const dist::DeviceRequest& request) {
  MIRROR_CHECK(!ranks.empty(), InvalidArgument, "diagnose: no rank reports");
  Diagnosis d;
  d.ranks = std::move(ranks);
  std::sort(d.ranks.begin(), d.ranks.end(),
            [](const RankReport& a, const RankReport& b) { return a.world_rank < b.world_rank; });
  for (std::size_t i = 0; i < d.ranks.size(); ++i) {
    MIRROR_CHECK(d.ranks[i].world_rank == static_cast<int>(i), InvalidArgument,
                 "diagnose: expected one report per rank 0.." + std::to_string(d.ranks.size() - 1) +
                     ", found rank " + std::to_string(d.ranks[i].world_rank) + " at position " +
                     std::to_string(i));
  }
  std::vector<std::string> hosts;
  std::map<std::string, std::vector<const RankReport*>> by_host;
  for (const RankReport& r : d.ranks) {
    if (by_host[r.host].empty()) hosts.push_back(r.host);
    by_host[r.host].push_back(&r);
  }
  for (const auto& host : hosts) d.nodes.push_back(judge_node(host, by_host[host], request));
  d.verdict = overall_verdict(d.nodes, d.gpu);
  return d;
}

// ---- JSON --------------------------------------------------------------------------------

json to_json(const GpuReport& g) {
  json devices = json::array();
  for (const auto& d : g.devices) {
    devices.push_back(
        {{"index", d.index},
         {"name", d.name},
         {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
         {"cc_major", d.cc_major},
         {"cc_minor", d.cc_minor},
         {"total_bytes", d.total_bytes},
         {"pci_bus_id", d.pci_bus_id},
         {"uuid", d.uuid}});
  }
  return {{"built_with_cuda", g.built_with_cuda},
          {"runtime_version_compiled", g.runtime_version_compiled},
          {"runtime_version", g.runtime_version},
          {"driver_version", g.driver_version},
          {"cudnn_compiled", g.cudnn_compiled},
          {"cudnn_loaded", g.cudnn_loaded},
          {"nccl_compiled", g.nccl_compiled},
          {"nccl_loaded", g.nccl_loaded},
          {"cublas_loaded", g.cublas_loaded},
          {"cuda_visible_devices_set", g.cuda_visible_devices_set},
          {"cuda_visible_devices", g.cuda_visible_devices},
          {"devices", devices},
          {"usable", g.usable()},
          {"unavailable_reason", g.unavailable_reason}};
}

GpuReport gpu_report_from_json(const json& j) {
  GpuReport g;
  g.built_with_cuda = j.value("built_with_cuda", false);
  g.runtime_version_compiled = j.value("runtime_version_compiled", 0);
  g.runtime_version = j.value("runtime_version", 0);
  g.driver_version = j.value("driver_version", 0);
  g.cudnn_compiled = j.value("cudnn_compiled", 0);
  g.cudnn_loaded = j.value("cudnn_loaded", 0);
  g.nccl_compiled = j.value("nccl_compiled", 0);
  g.nccl_loaded = j.value("nccl_loaded", 0);
  g.cublas_loaded = j.value("cublas_loaded", 0);
  g.cuda_visible_devices_set = j.value("cuda_visible_devices_set", false);
  g.cuda_visible_devices = j.value("cuda_visible_devices", "");
  g.unavailable_reason = j.value("unavailable_reason", "");
  for (const json& d : j.value("devices", json::array())) {
    GpuDevice dev;
    dev.index = d.value("index", 0);
    dev.name = d.value("name", "");
    dev.cc_major = d.value("cc_major", 0);
    dev.cc_minor = d.value("cc_minor", 0);
    dev.total_bytes = d.value("total_bytes", std::size_t{0});
    dev.pci_bus_id = d.value("pci_bus_id", "");
    dev.uuid = d.value("uuid", "");
    g.devices.push_back(dev);
  }
  return g;
}

json to_json(const RankReport& r) {
  return {{"world_rank", r.world_rank},
          {"world_size", r.world_size},
          {"local_rank", r.local_rank},
          {"local_size", r.local_size},
          {"host", r.host},
          {"mirror_version", r.mirror_version},
          {"mpi_library", r.mpi_library},
          {"mpi_standard", r.mpi_standard},
          {"mpi_thread_level", r.mpi_thread_level},
          {"cpu_precision", r.cpu_precision},
          {"cpu_isa", r.cpu_isa},
          {"gpu", to_json(r.gpu)}};
}

RankReport rank_report_from_json(const json& j) {
  MIRROR_CHECK(j.is_object(), DataError, "rank report is not a JSON object");
  RankReport r;
  r.world_rank = j.value("world_rank", 0);
  r.world_size = j.value("world_size", 1);
  r.local_rank = j.value("local_rank", 0);
  r.local_size = j.value("local_size", 1);
  r.host = j.value("host", "");
  r.mirror_version = j.value("mirror_version", "");
  r.mpi_library = j.value("mpi_library", "");
  r.mpi_standard = j.value("mpi_standard", "");
  r.mpi_thread_level = j.value("mpi_thread_level", "");
  r.cpu_precision = j.value("cpu_precision", "");
  r.cpu_isa = j.value("cpu_isa", "");
  r.gpu = gpu_report_from_json(j.value("gpu", json::object()));
  return r;
}

json render_json(const Diagnosis& d) {
  static const char* kinds[] = {"gpu", "cpu_fallback", "cpu_chosen", "error"};
  json nodes = json::array();
  for (const auto& n : d.nodes) {
    nodes.push_back({{"host", n.host},
                     {"ranks", n.ranks},
                     {"kind", kinds[static_cast<int>(n.kind)]},
                     {"verdict", n.text},
                     {"notes", n.notes},
                     {"gpus_used", n.gpus_used},
                     {"reason", plain_reason(d.ranks[n.ranks.front()].gpu)}});
  }
  json ranks = json::array();
  for (const auto& r : d.ranks) ranks.push_back(to_json(r));
  return {{"mirror_version", d.ranks.front().mirror_version},
          {"built_with_cuda", d.ranks.front().gpu.built_with_cuda},
          {"verdict", {{"gpu", d.gpu}, {"text", d.verdict}}},
          {"nodes", nodes},
          {"ranks", ranks}};
}

// ---- text --------------------------------------------------------------------------------

namespace {

void row(std::string& out, const std::string& label, const std::string& value) {
  std::string l = "  " + label + " ";
  if (l.size() < 26) l.append(26 - l.size(), '.');
  out += l + " " + value + "\n";
}

std::string loaded_vs_compiled(int loaded, int compiled, std::string (*fmt)(int)) {
  std::string s = "built against " + fmt(compiled) + ", ";
  s += loaded ? "loaded " + fmt(loaded) : std::string("not loaded");
  if (loaded && compiled && fmt(loaded) != fmt(compiled)) s += " (differs)";
  return s;
}

void render_build(std::string& out, const RankReport& r) {
  const GpuReport& g = r.gpu;
  out += "How this Mirror was built\n";
  row(out, "Mirror", r.mirror_version);
  if (g.built_with_cuda) {
    row(out, "CUDA backend",
        "yes, CUDA runtime " + cuda_version_str(g.runtime_version_compiled) + ", cuDNN " +
            cudnn_version_str(g.cudnn_compiled) + ", NCCL " + nccl_version_str(g.nccl_compiled));
  } else {
    row(out, "CUDA backend",
        "no: " + (g.unavailable_reason.empty() ? std::string("built without CUDA")
                                               : g.unavailable_reason));
  }
  row(out, "MPI", r.mpi_library + (r.mpi_standard.empty() ? "" : " (MPI " + r.mpi_standard + ")"));
  if (!r.mpi_thread_level.empty()) row(out, "MPI thread level", r.mpi_thread_level);
}

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks.front());
  std::string s = "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

void render_node(std::string& out, const Diagnosis& d, const NodeVerdict& n) {
  const RankReport& r = d.ranks[n.ranks.front()];
  const GpuReport& g = r.gpu;
  out += "\nNode " + n.host + " (" + rank_list(n.ranks) + ", " + std::to_string(n.ranks.size()) +
         " rank(s) on this node)\n";
  if (g.built_with_cuda) {
    row(out, "NVIDIA driver",
        g.driver_version ? "supports CUDA up to " + cuda_version_str(g.driver_version)
                         : std::string("none found"));
    row(out, "CUDA runtime",
        g.runtime_version ? cuda_version_str(g.runtime_version) + " loaded"
                          : std::string("not loaded"));
    row(out, "cuDNN", loaded_vs_compiled(g.cudnn_loaded, g.cudnn_compiled, cudnn_version_str));
    row(out, "NCCL", loaded_vs_compiled(g.nccl_loaded, g.nccl_compiled, nccl_version_str));
    row(out, "cuBLAS",
        g.cublas_loaded ? "loaded " + cublas_version_str(g.cublas_loaded)
                        : std::string("not loaded"));
  } else {
    row(out, "NVIDIA driver", "not checked (this Mirror has no CUDA backend)");
  }
  if (!r.cpu_isa.empty()) row(out, "CPU instruction set", r.cpu_isa);
  if (!r.cpu_precision.empty()) row(out, "CPU mixed precision", r.cpu_precision);
  row(out, "CUDA_VISIBLE_DEVICES",
      g.cuda_visible_devices_set ? "'" + g.cuda_visible_devices + "'" : std::string("not set"));
  if (g.devices.empty()) {
    row(out, "GPUs found",
        "none" + (g.unavailable_reason.empty() ? std::string() : ": " + g.unavailable_reason));
  } else {
    row(out, "GPUs found",
        std::to_string(g.devices.size()) +
            (g.usable() ? "" : " (not usable: " + g.unavailable_reason + ")"));
    for (const auto& dev : g.devices) out += "      " + describe_device(dev) + "\n";
  }
  row(out, "ranks vs GPUs",
      std::to_string(n.ranks.size()) + " rank(s) on this node, " +
          std::to_string(g.usable() ? g.devices.size() : 0) + " usable GPU(s)");
  for (int rank : n.ranks) {
    const GpuReport& other = d.ranks[rank].gpu;
    if (other.devices.size() != g.devices.size() ||
        other.cuda_visible_devices != g.cuda_visible_devices) {
      row(out, "rank " + std::to_string(rank) + " differs",
          "CUDA_VISIBLE_DEVICES='" + other.cuda_visible_devices + "', " +
              std::to_string(other.devices.size()) + " GPU(s)");
    }
  }
  for (const auto& note : n.notes) row(out, "note", note);
  if (d.nodes.size() > 1) row(out, "this node", n.text);
}

}  // namespace

std::string render_text(const Diagnosis& d) {
  std::string out = "mirror-doctor: can Mirror use a GPU here?\n\n";
  render_build(out, d.ranks.front());
  for (const auto& n : d.nodes) render_node(out, d, n);
  out += "\nverdict: " + d.verdict + "\n";
  return out;
}

}  // namespace mirror::doctor
