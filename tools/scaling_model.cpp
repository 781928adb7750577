// The scaling predictor (see scaling_model.h and docs/scaling.md).
#include "tools/scaling_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mirror/error.h"

namespace mirror::dist {

// ------------------------------------------------------------------ profile

const nlohmann::json& pick_bench_row(const nlohmann::json& list, int replicas) {
  MIRROR_CHECK(list.is_array() && !list.empty(), DataError,
               "the profile must be the JSON list `mirror-bench train --json FILE` writes; "
               "found " +
                   std::string(list.type_name()));
  const nlohmann::json* best = nullptr;
  for (const auto& row : list) {
    const int r = row.value("replicas", 0);
    if (replicas > 0 ? r == replicas : r > 1 && (!best || r < best->value("replicas", 0)))
      best = &row;
  }
  MIRROR_CHECK(best != nullptr, DataError,
               replicas > 0
                   ? "the profile has no row with " + std::to_string(replicas) + " replicas"
                   : std::string("the profile has no row with 2 or more replicas (one "
                                 "replica has no buckets); record it with "
                                 "`mirror-bench train --replicas 2 --json FILE`"));
  return *best;
}

StepProfile profile_from_bench_row(const nlohmann::json& row) {
  const auto field = [&](const char* name) {
    MIRROR_CHECK(row.contains(name) && row[name].is_number(), DataError,
                 std::string("the profile row lacks the number '") + name +
                     "'; record it with `mirror-bench train --json FILE`");
    return row[name].get<double>();
  };
  MIRROR_CHECK(row.value("overlap", true), DataError,
               "the profile was recorded with --overlap 0, so its bucket launch times are not "
               "when the gradients became ready; record it with overlap on (the default)");
  MIRROR_CHECK(row.contains("bucket_timings") && !row["bucket_timings"].empty(), DataError,
               "the profile row has no bucket_timings (a single replica, or a mirror-bench "
               "older than the predictor); record it with `mirror-bench train --replicas 2 "
               "--json FILE`");
  StepProfile p;
  p.compute_ms = field("step_ms") - field("exposed_comm_ms");
  // The phases are means and step_ms a median: keep backward's end inside the step.
  p.backward_end_ms = std::min(field("forward_ms") + field("backward_ms"), p.compute_ms);
  for (const auto& b : row["bucket_timings"]) {
    p.buckets.push_back({b.at("bytes").get<double>(), b.at("launch_ms").get<double>()});
  }
  std::ostringstream d;
  d << row.value("model", std::string("?")) << ", batch " << row.value("batch_per_replica", 0)
    << " per replica, " << row.value("devices", std::string("?"));
  p.description = d.str();
  MIRROR_CHECK(p.compute_ms > 0 && p.backward_end_ms > 0, DataError,
               "the profile row has a step of " + std::to_string(p.compute_ms) +
                   " ms of compute; expected a positive time");
  return p;
}

StepProfile scale_profile(StepProfile p, double factor) {
  MIRROR_CHECK(
      factor > 0, InvalidArgument,
      "--compute-scale must be > 0 (0.5: a device twice as fast), got " + std::to_string(factor));
  p.compute_ms *= factor;
  p.backward_end_ms *= factor;
  for (auto& b : p.buckets) b.ready_ms *= factor;
  return p;
}

// ------------------------------------------------------------------ links

const std::vector<LinkModel>& link_presets() {
  // docs/scaling.md ("Presets") gives the sources; alpha is an assumed per-step latency of the
  // whole stack (NCCL or MPI over the link), not a wire figure.
  static const std::vector<LinkModel> presets = {
      {"nvlink4", 3, 3600, "NVIDIA H100 SXM: NVLink 4, 900 GB/s per GPU both ways"},
      {"pcie4", 5, 252, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b, per direction"},
      {"ib-hdr", 2, 200, "InfiniBand HDR: 200 Gb/s per port (ConnectX-6)"},
      {"ib-ndr", 2, 400, "InfiniBand NDR: 400 Gb/s per port (ConnectX-7)"},
      {"25gbe", 20, 25, "25 Gigabit Ethernet (IEEE 802.3by), TCP"},
      {"100gbe", 10, 100, "100 Gigabit Ethernet (IEEE 802.3bj/cd), TCP"},
  };
  return presets;
}

LinkModel parse_link(const std::string& text) {
  for (const auto& p : link_presets())
    if (p.name == text) return p;
  const auto colon = text.find(':');
  if (colon != std::string::npos) {
    char* end1 = nullptr;
    char* end2 = nullptr;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    const double alpha = std::strtod(a.c_str(), &end1);
    const double gbit = std::strtod(b.c_str(), &end2);
    if (!a.empty() && !b.empty() && *end1 == '\0' && *end2 == '\0' && alpha >= 0 && gbit > 0)
      return {text, alpha, gbit, "given on the command line"};
  }
  std::string names;
  for (const auto& p : link_presets()) names += (names.empty() ? "" : ", ") + p.name;
  throw InvalidArgument("unknown link '" + text + "': expected a preset (" + names +
                        ") or ALPHA_US:GBIT_S such as 5:100");
}

LinkModel fit_ring_sweep(const std::vector<std::pair<double, double>>& points, int ranks,
                         const std::string& name) {
  MIRROR_CHECK(ranks >= 2, InvalidArgument,
               "an all-reduce sweep needs 2 or more ranks, got " + std::to_string(ranks));
  // t_us = c + x * s with x = 2 (P - 1) / P * bytes: ordinary least squares.
  const double p = ranks, steps = 2.0 * (p - 1), share = steps / p;
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [bytes, us] : points) {
    const double x = share * bytes;
    n += 1, sx += x, sy += us, sxx += x * x, sxy += x * us;
  }
  const double det = n * sxx - sx * sx;
  MIRROR_CHECK(n >= 2 && det > 0, InvalidArgument,
               "fitting a link needs the times of at least 2 different sizes, got " +
                   std::to_string(static_cast<int>(n)) + " point(s)");
  const double slope = (n * sxy - sx * sy) / det;  // us per byte
  const double intercept = (sy - slope * sx) / n;
  MIRROR_CHECK(slope > 0, InvalidArgument,
               "the sweep's times do not grow with the size (slope " + std::to_string(slope) +
                   " us/byte): sweep larger sizes (e.g. -b 64K -e 64M)");
  LinkModel m;
  m.name = name;
  m.alpha_us = std::max(0.0, intercept / steps);
  m.gbit_s = 8.0 / (slope * 1e-6) / 1e9;
  m.source = "fitted to an all-reduce sweep of " + std::to_string(ranks) + " ranks";
  return m;
}

SweepTable parse_sweep_table(const std::string& text) {
  SweepTable t;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find(" ranks on ");
    if (line.rfind("# mirror-bench allreduce:", 0) == 0 && at != std::string::npos) {
      t.ranks = std::atoi(line.substr(line.rfind(' ', at - 1) + 1).c_str());
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    double bytes = 0, count = 0, us = 0;
    std::string type;
    if (row >> bytes >> count >> type >> us) t.points.emplace_back(bytes, us);
  }
  MIRROR_CHECK(t.ranks >= 2 && t.points.size() >= 2, DataError,
               "not a saved `mirror-bench allreduce` table of 2 or more ranks (found " +
                   std::to_string(t.ranks) + " ranks and " + std::to_string(t.points.size()) +
                   " sizes); save one with `mirrorrun -np 2 mirror-bench allreduce -b 64K "
                   "-e 64M > FILE`");
  return t;
}

// ------------------------------------------------------------------ all-reduce and step

const char* algorithm_name(Algorithm a) { return a == Algorithm::kRing ? "ring" : "hierarchical"; }

namespace {

/// A ring of n members over one link class moving `bytes`: 2 (n - 1) steps of bytes / n.
double ring_seconds(double bytes, int n, const LinkModel& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.seconds(bytes / n);
}

/// Reduce-scatter (or all-gather) among n members: n - 1 steps of bytes / n.
double half_ring_seconds(double bytes, int n, const LinkModel& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.seconds(bytes / n);
}

}  // namespace

double allreduce_seconds(double bytes, const Cluster& c, Algorithm a) {
  MIRROR_CHECK(c.nodes >= 1 && c.gpus_per_node >= 1, InvalidArgument,
               "a cluster needs at least 1 node of 1 GPU");
  if (c.nodes == 1) return ring_seconds(bytes, c.gpus_per_node, c.intra);
  if (a == Algorithm::kRing) {
    // One ring, node after node: two of its edges per node cross the network (one out, one
    // in), each using the node's whole bandwidth; every step waits for the slowest edge.
    LinkModel slowest = c.inter;
    slowest.alpha_us = std::max(c.inter.alpha_us, c.intra.alpha_us);
    slowest.gbit_s = std::min(c.inter.gbit_s, c.intra.gbit_s);
    return ring_seconds(bytes, c.ranks(), slowest);
  }
  // Hierarchical: the node's G rings among the nodes each carry a 1/G shard and share the
  // node's bandwidth, which is one ring of the whole buffer at that bandwidth.
  return 2 * half_ring_seconds(bytes, c.gpus_per_node, c.intra) +
         ring_seconds(bytes, c.nodes, c.inter);
}

Prediction predict_step(const StepProfile& p, const Cluster& c, Algorithm a,
                        const PredictOptions& o) {
  Prediction r;
  double end_ms = 0;
  if (c.ranks() > 1) {
    for (const auto& b : p.buckets) {
      const double ready = o.overlap ? std::min(b.ready_ms, p.backward_end_ms) : p.backward_end_ms;
      const double ms = 1e3 * allreduce_seconds(b.bytes * o.wire_factor, c, a);
      end_ms = std::max(ready, end_ms) + ms;
      r.comm_ms += ms;
    }
    r.exposed_ms = std::max(0.0, end_ms - p.backward_end_ms);
  }
  r.step_ms = p.compute_ms + r.exposed_ms;
  r.efficiency = p.compute_ms / r.step_ms;
  return r;
}

// ------------------------------------------------------------------ tables

std::vector<ScalingRow> predict_scaling(const StepProfile& p, const LinkModel& intra,
                                        const LinkModel& inter, int gpus_per_node,
                                        const std::vector<int>& nodes, const PredictOptions& o) {
  MIRROR_CHECK(gpus_per_node >= 1, InvalidArgument,
               "--gpus-per-node must be >= 1, got " + std::to_string(gpus_per_node));
  std::vector<std::pair<int, int>> configs = {{1, 1}};
  for (int n : nodes) {
    MIRROR_CHECK(n >= 1 && n <= 65536, InvalidArgument,
                 "node counts must be in [1, 65536], got " + std::to_string(n));
    if (n * gpus_per_node > 1) configs.emplace_back(n, gpus_per_node);
  }
  std::vector<ScalingRow> rows;
  for (const auto& [n, g] : configs) {
    const Cluster c{n, g, intra, inter};
    rows.push_back({n, g, predict_step(p, c, Algorithm::kRing, o),
                    predict_step(p, c, Algorithm::kHierarchical, o)});
  }
  return rows;
}

std::string format_scaling_table(const StepProfile& p, const LinkModel& intra,
                                 const LinkModel& inter, const PredictOptions& o,
                                 const std::vector<ScalingRow>& rows) {
  std::ostringstream out;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "# profile: %s; compute %.2f ms per step, backward ends at %.2f ms, %zu bucket(s)\n",
      p.description.c_str(), p.compute_ms, p.backward_end_ms, p.buckets.size());
  out << line;
  for (const auto* l : {&intra, &inter}) {
    std::snprintf(line, sizeof line, "# %s link %s: alpha %.3g us, %.4g Gbit/s (%s)\n",
                  l == &intra ? "intra-node" : "inter-node", l->name.c_str(), l->alpha_us,
                  l->gbit_s, l->source.c_str());
    out << line;
  }
  out << "# overlap " << (o.overlap ? "on" : "off") << ", wire bytes x" << o.wire_factor
      << "; efficiency = compute / step (weak scaling, same batch per replica)\n";
  out << " nodes x gpus   ranks |  ring: step ms  exposed ms   eff | hier: step ms  exposed ms   "
         "eff\n";
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%6d x %-4d %7d | %14.2f %11.2f %5.3f | %14.2f %11.2f %5.3f\n",
                  r.nodes, r.gpus_per_node, r.nodes * r.gpus_per_node, r.ring.step_ms,
                  r.ring.exposed_ms, r.ring.efficiency, r.hierarchical.step_ms,
                  r.hierarchical.exposed_ms, r.hierarchical.efficiency);
    out << line;
  }
  return out.str();
}

std::string scaling_plot_data(const std::vector<ScalingRow>& rows) {
  std::ostringstream d;
  for (const auto& r : rows) {
    d << r.nodes * r.gpus_per_node << " " << r.ring.efficiency << " " << r.hierarchical.efficiency
      << " " << r.ring.exposed_ms << " " << r.hierarchical.exposed_ms << "\n";
  }
  return d.str();
}

std::string scaling_gnuplot(const std::string& title, const std::string& png,
                            const std::string& dat) {
  std::ostringstream g;
  g << "set terminal png size 900,800\nset output '" << png << "'\n"
    << "set multiplot layout 2,1 title \"" << title << "\"\n"
    << "set xlabel 'ranks (nodes x GPUs per node)'\nset logscale x 2\nset grid\n"
    << "set key left bottom\nset ylabel 'scaling efficiency'\nset yrange [0:1.05]\n"
    << "plot '" << dat << "' using 1:2 with linespoints lw 2 title 'ring', '" << dat
    << "' using 1:3 with linespoints lw 2 dt 2 title 'hierarchical'\n"
    << "set key left top\nset ylabel 'exposed communication (ms per step)'\nset yrange [0:*]\n"
    << "plot '" << dat << "' using 1:4 with linespoints lw 2 title 'ring', '" << dat
    << "' using 1:5 with linespoints lw 2 dt 2 title 'hierarchical'\nunset multiplot\n";
  return g.str();
}

}  // namespace mirror::dist
