// step-bench: times one training step (forward, loss, backward, Adam update) of the reference
// models on the CPU (or, with --device gpu, on the first GPU), median of --steps timed steps
// after --warmup, and prints ms/step. The PyTorch twin is bench/step_torch.py;
// scripts/bench_step.sh runs both side by side.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "backend.h"
#include "mirror/memory.h"
#include "mirror/nn/models.h"
#include "mirror/ops.h"
#include "mirror/optim/optimizer.h"
#include "mirror/precision.h"
#include "tools/bench_model.h"

namespace {

using namespace mirror;

// Process CPU time: on a shared, oversubscribed machine it excludes the time spent waiting for
// a core, so it is steadier than wall time (with one thread they agree on an idle machine).
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double median_ms, min_ms, median_cpu_ms;
  double median_host_ms;  // until the host has queued the whole step (a GPU's runs on after)
  std::uint64_t steady_backend_allocs;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Where the step's time goes: per-layer forward and backward (Sequential::set_layer_times),
/// the loss and the optimizer, in ms per step averaged over `steps` more steps, with each row's
/// share of their sum; the last line compares that sum with the timed steps' median.
void print_profile(nn::Sequential& model, const std::string& label, double loss_ms,
                   double optimizer_ms, const nn::LayerTimes& t, int steps, double median_ms) {
  std::printf("profile %s (ms per step, mean of %d steps)\n", label.c_str(), steps);
  std::printf("%-28s %-26s %-16s %9s %9s %9s %7s\n", "layer", "kind", "output", "forward",
              "backward", "total", "share");
  const double per = 1.0 / steps;
  double sum = loss_ms + optimizer_ms;
  for (std::size_t i = 0; i < model.layers().size(); ++i)
    sum += (t.forward_ms[i] + t.backward_ms[i]) * per;
  auto row = [&](const std::string& name, const std::string& kind, const std::string& out,
                 double f, double b) {
    std::printf("%-28s %-26s %-16s %9.3f %9.3f %9.3f %6.1f%%\n", name.c_str(), kind.c_str(),
                out.c_str(), f, b, f + b, 100.0 * (f + b) / sum);
  };
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    const nn::Layer& l = *model.layers()[i];
    row(l.name(), l.kind(), shape_str(model.layer_output_shapes()[i]), t.forward_ms[i] * per,
        t.backward_ms[i] * per);
  }
  row("loss", "softmax_cross_entropy", "", loss_ms, 0.0);
  row("optimizer", "adam", "", 0.0, optimizer_ms);
  std::printf("sum of the rows %.3f ms; the timed steps' median %.3f ms\n", sum, median_ms);
}

/// How the profile times a GPU's layers (Sequential's LayerTimes): their host calls only, or each
/// between two waits for the device (what the layer costs when nothing overlaps it).
enum class Profile { kOff, kHost, kDevice };

Result time_model(const bench::BenchModel& bm, Device device, int batch, int warmup, int steps,
                  Profile profile, bool blocked_images) {
  // Each timing starts from an empty cache: blocks cached for the previous model's sizes made
  // the next one measurably slower (--images both ran its second layout 10 % slow).
  allocator_for(device).release_cached();
  nn::Sequential model = nn::make_model(bm.spec, DType::kFloat32, device, 1);
  model.set_blocked_images(blocked_images);
  // Synthetic data shaped like the model's input, fixed for every step (the data path is not
  // part of what is measured), on the model's device.
  data::Batch b = bench::bench_batch(*bm.data, 0, 1, batch, 0);
  b.inputs = b.inputs.to(device);
  b.labels = b.labels.to(device);
  if (b.weights.defined()) b.weights = b.weights.to(device);
  if (b.sample_ids.defined()) b.sample_ids = b.sample_ids.to(device);  // dropout's seeds
  optim::Adam adam;
  // A GPU runs the queued work after the host returns: the step ends when the device is done.
  auto wait_for_device = [&] {
    if (device.is_cuda()) kernels_for(device).synchronize(device);
  };
  std::function<void()> fence;  // around the loss and the optimizer when profiling the device

  double loss_ms = 0, optimizer_ms = 0;  // summed over the profiled steps
  double host_ms = 0;                    // the last step's, until its work was queued
  auto step = [&] {
    nn::ForwardContext ctx;
    ctx.training = true;
    ctx.seed = static_cast<std::uint64_t>(adam.steps());
    ctx.sample_ids = b.sample_ids;
    ctx.lengths = b.lengths;
    const auto begin = std::chrono::steady_clock::now();
    model.zero_grad();
    const Tensor logits = model.forward(b.inputs, ctx);
    if (fence) fence();
    auto t0 = std::chrono::steady_clock::now();
    const ops::LossResult r = ops::softmax_cross_entropy(logits, b.labels, b.weights, batch);
    if (fence) fence();
    loss_ms += ms_since(t0);
    model.backward(r.dlogits);
    if (fence) fence();
    t0 = std::chrono::steady_clock::now();
    adam.step(model.parameters(), 1e-3);
    if (fence) fence();
    optimizer_ms += ms_since(t0);
    host_ms = ms_since(begin);
    wait_for_device();
  };
  for (int i = 0; i < warmup; ++i) step();
  const auto allocs = allocator_for(device).stats().backend_allocs;
  std::vector<double> ms, cpu, host;
  for (int i = 0; i < steps; ++i) {
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_ms() - c0);
    host.push_back(host_ms);
  }
  const Result result{median(ms), *std::min_element(ms.begin(), ms.end()), median(cpu),
                      median(host), allocator_for(device).stats().backend_allocs - allocs};
  if (profile != Profile::kOff) {
    nn::LayerTimes times;
    if (profile == Profile::kDevice) times.fence = fence = wait_for_device;
    model.set_layer_times(&times);
    loss_ms = optimizer_ms = 0;
    for (int i = 0; i < steps; ++i) step();
    model.set_layer_times(nullptr);
    fence = nullptr;
    print_profile(model,
                  bm.label + (!device.is_cuda()           ? ""
                              : profile == Profile::kHost ? ", GPU: the host's calls only"
                                                          : ", GPU: each row waits for the device"),
                  loss_ms / steps, optimizer_ms / steps, times, steps, result.median_ms);
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::string models, spec_file, precision = "float32", images = "blocked", device_name = "cpu";
  std::string profile_name = "host", tf32_flag = "on";
  int batch = 64, warmup = 3, steps = 20, threads = 1;
  bool profile = false;
  po::options_description opts(
      "step-bench: median time of one training step (forward, loss, backward, Adam)");
  opts.add_options()("help,h", "show this help")(
      "model", po::value(&models)->default_value("cnn,gru-rows"),
      "comma-separated: cnn, gru-rows, lstm-rows, bigru-rows, bilstm-rows, resnet, inception, "
      "cnn-stride2")(
      "model-spec", po::value(&spec_file),
      "a model spec file (Mirror or Keras JSON) timed instead of --model, on synthetic data "
      "shaped like its input")("batch", po::value(&batch)->default_value(64), "samples per step")(
      "warmup", po::value(&warmup)->default_value(3), "untimed steps first")(
      "steps", po::value(&steps)->default_value(20), "timed steps")(
      "threads", po::value(&threads)->default_value(1), "OpenMP / oneDNN threads")(
      "profile", po::bool_switch(&profile),
      "then time --steps more steps layer by layer and print where the time goes")(
      "profile-gpu", po::value(&profile_name)->default_value(profile_name),
      "with --device gpu: host (time each layer's host calls only: what queuing its work "
      "costs), device (wait for the device around each layer: its cost with nothing "
      "overlapping) or both")(
      "device", po::value(&device_name)->default_value(device_name),
      "cpu | gpu (the first GPU; the model computes in float32 there, the math mode picks the "
      "convolutions' tensor-core math)")(
      "precision", po::value(&precision)->default_value(precision),
      "float32 | mixed_bfloat16 | mixed_float16 (the math mode of the products; no loss scaling)")(
      "tf32", po::value(&tf32_flag)->default_value(tf32_flag),
      "on | off: float32 products on the GPU's TF32 tensor cores (as mirror-train --tf32)")(
      "images", po::value(&images)->default_value(images),
      "blocked | plain | both: layers pass images in the convolutions' blocked layout (Note "
      "[Blocked images], mirror/ops.h), or every layer reads plain NCHW; both: two alternating "
      "rounds of each and the ratio");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "step-bench: " << e.what() << "\n" << opts;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (images != "blocked" && images != "plain" && images != "both") {
    std::cerr << "step-bench: --images must be blocked, plain or both, got '" << images << "'\n";
    return 2;
  }
  if (device_name != "cpu" && device_name != "gpu") {
    std::cerr << "step-bench: --device must be cpu or gpu, got '" << device_name << "'\n";
    return 2;
  }
  if (profile_name != "host" && profile_name != "device" && profile_name != "both") {
    std::cerr << "step-bench: --profile-gpu must be host, device or both, got '" << profile_name
              << "'\n";
    return 2;
  }
  if (batch < 1 || steps < 1 || warmup < 0 || threads < 1) {
    std::cerr << "step-bench: batch, steps and threads must be >= 1, warmup >= 0\n";
    return 2;
  }
  omp_set_num_threads(threads);
  try {
    const Precision policy = parse_precision(precision);
    const MathMode mode = math_mode_of(policy);
    MIRROR_CHECK(tf32_flag == "on" || tf32_flag == "off", InvalidArgument,
                 "--tf32 must be on or off, got '" + tf32_flag + "'");
    set_tf32(tf32_flag == "on");
    const Device device = device_name == "gpu" ? Device::cuda(0) : Device::cpu();
    const ops::MathSupport support = ops::math_support(device, mode);
    MIRROR_CHECK(support.missing.empty(), InvalidArgument, support.missing);
    if (!support.fallback.empty())
      std::fprintf(stderr, "step-bench: note: %s\n", support.fallback.c_str());
    const ScopedMathMode scoped(mode);
    std::vector<bench::BenchModel> list;
    if (!spec_file.empty()) list.push_back(bench::bench_model("", spec_file, batch));
    for (std::size_t start = 0; spec_file.empty() && start <= models.size();) {
      const std::size_t comma = std::min(models.find(',', start), models.size());
      const std::string name = models.substr(start, comma - start);
      start = comma + 1;
      if (!name.empty()) list.push_back(bench::bench_model(name, "", batch));
    }
    std::vector<bool> layouts = {images != "plain"};
    if (images == "both") layouts = {true, false, true, false};  // alternating rounds
    for (const bench::BenchModel& m : list) {
      double sum[2] = {0, 0};
      for (bool blocked : layouts) {
        std::vector<Profile> profiles;  // one timing per profile (the first one's is printed)
        if (!profile) {
          profiles = {Profile::kOff};
        } else if (!device.is_cuda()) {
          profiles = {Profile::kHost};
        } else {
          if (profile_name != "device") profiles.push_back(Profile::kHost);
          if (profile_name != "host") profiles.push_back(Profile::kDevice);
        }
        const Result r = time_model(m, device, batch, warmup, steps, profiles[0], blocked);
        for (std::size_t k = 1; k < profiles.size(); ++k)
          (void)time_model(m, device, batch, warmup, steps, profiles[k], blocked);
        sum[blocked] += r.median_ms;
        char host[64] = "";  // a GPU's step: when the host had queued all of it
        if (device.is_cuda())
          std::snprintf(host, sizeof host, ", host done queuing after %.2f ms", r.median_host_ms);
        std::printf(
            "mirror %s %s%s batch=%d threads=%d%s: median %.2f ms/step (min %.2f, cpu %.2f "
            "ms/step%s, %d steps, %llu backend allocations while timed)\n",
            m.label.c_str(), precision.c_str(), device.is_cuda() ? " gpu" : "", batch, threads,
            images == "both" ? (blocked ? " blocked" : " plain") : "", r.median_ms, r.min_ms,
            r.median_cpu_ms, host, steps, static_cast<unsigned long long>(r.steady_backend_allocs));
        std::fflush(stdout);
      }
      if (images == "both")
        std::printf("mirror %s %s: blocked / plain images = %.3f (mean of the rounds' medians)\n",
                    m.label.c_str(), precision.c_str(), sum[1] / sum[0]);
    }
  } catch (const mirror::Error& e) {
    std::cerr << "step-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
