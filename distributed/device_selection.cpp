// select_devices: which devices one rank drives (pure; see device_selection.h for the rules).
#include "mirror/distributed/device_selection.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "mirror/error.h"

namespace mirror::dist {

namespace {

std::string strip(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '\t') out += c;
  return out;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const auto comma = s.find(',', start);
    items.push_back(
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::string no_gpu_reason(const GpuReport& gpus) {
  if (!gpus.unavailable_reason.empty()) return gpus.unavailable_reason;
  return "no CUDA device is visible to this process";
}

std::string visible_note(const GpuReport& gpus) {
  if (!gpus.cuda_visible_devices_set) return "";
  return " (CUDA_VISIBLE_DEVICES='" + gpus.cuda_visible_devices +
         "' is set; indices count the "
         "visible GPUs only)";
}

std::string gpu_list(const GpuReport& gpus) {
  std::string s;
  for (const auto& d : gpus.devices) {
    s += (s.empty() ? "" : ", ") + std::string("cuda:") + std::to_string(d.index);
    if (!d.name.empty()) s += " " + d.name;
  }
  return s.empty() ? "none" : s;
}

std::string fallback_warning(const GpuReport& gpus) {
  const std::string bar(78, '#');
  std::string w = bar + "\n";
  w += "WARNING: NO USABLE GPU -- MIRROR RUNS ON THE CPU (much slower)\n";
  w += "  reason: " + no_gpu_reason(gpus) + "\n";
  if (gpus.cuda_visible_devices_set)
    w += "  CUDA_VISIBLE_DEVICES='" + gpus.cuda_visible_devices + "'\n";
  w += "  --require-gpu makes this an error; --devices cpu chooses the CPU on purpose\n";
  w += "  (and silences this warning); mirror-doctor shows what was found.\n";
  w += bar;
  return w;
}

[[noreturn]] void throw_no_gpu(const std::string& why_needed, const GpuReport& gpus) {
  throw Unavailable(why_needed + ", but no GPU is usable: " + no_gpu_reason(gpus) +
                    visible_note(gpus) +
                    ". Fix the GPU setup (mirror-doctor shows what was found) or run with "
                    "--devices cpu");
}

/// Note [Per-rank GPU binding] (device_selection.h): which physical GPU local ranks would share.
struct Sharing {
  bool known = false;      // false: `node` cannot tell (missing, or GPUs without identity)
  std::string gpu;         // the first GPU driven by several local ranks; "" when none is
  std::vector<int> ranks;  // the local ranks that would drive it
};

/// Rank r of the node drives the entries picks(r, GPUs r sees) of its view.
Sharing find_sharing(const NodeGpuViews& node, int local_size,
                     const std::function<std::vector<int>(int, int)>& picks) {
  Sharing s;
  if (static_cast<int>(node.size()) != local_size) return s;
  std::map<std::string, std::vector<int>> users;
  std::vector<std::string> order;
  for (int r = 0; r < local_size; ++r) {
    const auto& view = node[static_cast<std::size_t>(r)];
    for (int i : picks(r, static_cast<int>(view.size()))) {
      if (i < 0 || i >= static_cast<int>(view.size()) || view[i].empty()) return s;
      auto& u = users[view[i]];
      if (u.empty()) order.push_back(view[i]);
      if (u.empty() || u.back() != r) u.push_back(r);
    }
  }
  s.known = true;
  for (const auto& id : order) {
    if (users[id].size() > 1) {
      s.gpu = id;
      s.ranks = users[id];
      break;
    }
  }
  return s;
}

/// "; local ranks 0, 1 and 2 would all drive GPU-... (cuda:0 H100)" or why it is unknown.
std::string sharing_detail(const Sharing& s, const NodeGpuViews& node, const GpuReport& gpus) {
  if (!s.known) {
    return node.empty() ? ""
                        : "; the GPUs have no UUID or PCI bus id, so whether the local ranks "
                          "see different GPUs cannot be told";
  }
  std::string ranks;
  for (std::size_t i = 0; i < s.ranks.size(); ++i) {
    ranks += (i == 0 ? "" : i + 1 == s.ranks.size() ? " and " : ", ") + std::to_string(s.ranks[i]);
  }
  std::string name;
  for (const auto& d : gpus.devices) {
    if (gpu_identity(d) == s.gpu) name = " (cuda:" + std::to_string(d.index) + " " + d.name + ")";
  }
  return "; local ranks " + ranks + " would all drive GPU " + s.gpu + name;
}

// "auto" / "gpu": one GPU per local rank.
DeviceSelection select_auto(const DeviceRequest& req, bool gpu_required, int local_rank,
                            int local_size, const GpuReport& gpus, const NodeGpuViews& node) {
  DeviceSelection sel;
  if (!gpus.usable()) {
    if (gpu_required)
      throw_no_gpu(req.require_gpu ? "--require-gpu was given"
                                   : "--devices " + req.devices + " asks for a GPU",
                   gpus);
    sel.devices = {Device::cpu(0)};
    sel.cpu_fallback = true;
    sel.warning = fallback_warning(gpus);
    return sel;
  }
  const int n = static_cast<int>(gpus.devices.size());
  // Each rank takes its local rank modulo the GPUs it sees (its only GPU when it sees one).
  const Sharing sharing = find_sharing(node, local_size, [](int rank, int seen) {
    return seen > 0 ? std::vector<int>{rank % seen} : std::vector<int>{};
  });
  const bool shared = sharing.known ? !sharing.gpu.empty() : local_size > n;
  if (shared && !req.allow_sharing) {
    throw Unavailable(std::to_string(local_size) +
                      " ranks run on this node but this process sees " + std::to_string(n) +
                      " GPU(s) (" + gpu_list(gpus) + ")" + visible_note(gpus) +
                      sharing_detail(sharing, node, gpus) + "; start at most " + std::to_string(n) +
                      " ranks per node (mirrorrun -np " + std::to_string(n) +
                      "), give each rank its own GPU (srun --gpus-per-task=1), let ranks share "
                      "GPUs with --allow-gpu-sharing, or use --devices cpu");
  }
  sel.devices = {Device::cuda(gpus.devices[local_rank % n].index)};
  return sel;
}

// "gpu:0,cuda:1": an explicit list of GPUs, one replica each.
DeviceSelection select_gpu_list(const DeviceRequest& req, const std::vector<std::string>& items,
                                int local_size, const GpuReport& gpus, const NodeGpuViews& node) {
  DeviceSelection sel;
  std::set<int> seen;
  const auto is_cpu = [](const std::string& item) { return item.rfind("cpu", 0) == 0; };
  const auto cpu_items = std::count_if(items.begin(), items.end(), is_cpu);
  MIRROR_CHECK(cpu_items == 0 || cpu_items == static_cast<std::ptrdiff_t>(items.size()),
               InvalidArgument,
               "--devices '" + req.devices +
                   "' mixes CPU and GPU devices; all replicas of a rank must be of one kind "
                   "(GPUs: gpu:0,gpu:1; N CPU replicas: cpu:N)");
  MIRROR_CHECK(cpu_items == 0, InvalidArgument,
               "--devices '" + req.devices + "': a list names GPUs; for " +
                   std::to_string(cpu_items) +
                   " in-process CPU replicas write cpu:" + std::to_string(cpu_items));
  for (const auto& item : items) {
    MIRROR_CHECK(item.find(':') != std::string::npos, InvalidArgument,
                 "--devices '" + req.devices + "': list item '" + item +
                     "' needs an index (gpu:N or cuda:N)");
    const Device d = Device::parse(item);
    MIRROR_CHECK(seen.insert(d.index).second, InvalidArgument,
                 "--devices '" + req.devices + "' names " + d.str() + " twice");
    sel.devices.push_back(d);
  }
  if (!gpus.usable()) throw_no_gpu("--devices " + req.devices + " asks for GPUs", gpus);
  for (const Device& d : sel.devices) {
    const bool exists = std::any_of(gpus.devices.begin(), gpus.devices.end(),
                                    [&](const GpuDevice& g) { return g.index == d.index; });
    MIRROR_CHECK(exists, InvalidArgument,
                 "device " + d.str() + " does not exist: this process sees " +
                     std::to_string(gpus.devices.size()) + " GPU(s): " + gpu_list(gpus) +
                     visible_note(gpus) + "; pick one of those or use --devices auto");
  }
  // Every rank lists the same indices; they are different GPUs only where the ranks see
  // different GPUs (Note [Per-rank GPU binding]).
  std::vector<int> listed;
  for (const Device& d : sel.devices) listed.push_back(d.index);
  const Sharing sharing = find_sharing(node, local_size, [&](int, int) { return listed; });
  const bool shared = sharing.known ? !sharing.gpu.empty() : local_size > 1;
  if (shared && !req.allow_sharing) {
    throw Unavailable("--devices " + req.devices + " gives the same GPUs to each of the " +
                      std::to_string(local_size) + " ranks on this node" +
                      sharing_detail(sharing, node, gpus) +
                      "; use --devices auto "
                      "(one GPU per rank), start one rank per node, or pass --allow-gpu-sharing");
  }
  return sel;
}

// "cpu" / "cpu:N": N in-process CPU replicas.
DeviceSelection select_cpu(const DeviceRequest& req, const std::string& text) {
  MIRROR_CHECK(!req.require_gpu, InvalidArgument,
               "--require-gpu contradicts --devices " + req.devices + "; drop one of them");
  int count = 1;
  if (text != "cpu") {
    const char* first = text.data() + 4;
    const char* last = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(first, last, count);
    MIRROR_CHECK(ec == std::errc() && ptr == last && first != last && count >= 1 && count <= 1024,
                 InvalidArgument,
                 "--devices '" + req.devices +
                     "': cpu:N means N in-process CPU replicas, N from "
                     "1 to 1024 (cpu for one)");
  }
  DeviceSelection sel;
  for (int i = 0; i < count; ++i) sel.devices.push_back(Device::cpu(i));
  return sel;
}

}  // namespace

std::string DeviceSelection::devices_str() const {
  std::string s;
  for (std::size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + devices[i].str();
  return s;
}

std::string gpu_identity(const GpuDevice& gpu) {
  return !gpu.uuid.empty() ? gpu.uuid : gpu.pci_bus_id;
}

DeviceSelection select_devices(const DeviceRequest& request, int local_rank, int local_size,
                               const GpuReport& gpus, const NodeGpuViews& node) {
  MIRROR_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size, InvalidArgument,
               "local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size) +
                   " is not a valid place on a node");
  const MemoryPolicy policy = MemoryPolicy::parse(request.memory_policy);
  const std::string text = strip(request.devices);
  MIRROR_CHECK(!text.empty(), InvalidArgument,
               "--devices is empty; expected auto, gpu, gpu:0,gpu:1, cpu or cpu:N");
  DeviceSelection sel;
  if (text == "auto" || text == "gpu" || text == "cuda") {
    const bool required = request.require_gpu || text != "auto";
    sel = select_auto(request, required, local_rank, local_size, gpus, node);
  } else if ((text == "cpu" || text.rfind("cpu:", 0) == 0) && text.find(',') == std::string::npos) {
    sel = select_cpu(request, text);
  } else {
    const auto items = split_commas(text);
    for (const auto& item : items)
      MIRROR_CHECK(!item.empty(), InvalidArgument,
                   "--devices '" + request.devices + "' has an empty list item");
    sel = select_gpu_list(request, items, local_size, gpus, node);
  }
  sel.memory_policy = policy;
  return sel;
}

}  // namespace mirror::dist
