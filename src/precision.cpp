// The mixed-precision policy names, the process-wide math mode and the loss-scale state machine
// (Note [Mixed precision], Note [Loss scaling] in mirror/precision.h).
#include "mirror/precision.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "mirror/error.h"

namespace mirror {
namespace {
std::atomic<MathMode> g_math_mode{MathMode::kFloat32};
std::atomic<bool> g_tf32{false};
std::atomic<std::uint64_t> g_generation{0};
thread_local std::vector<const void*> t_constants;
}  // namespace

Precision parse_precision(const std::string& text) {
  if (text == "float32") return Precision::kFloat32;
  if (text == "mixed_bfloat16") return Precision::kMixedBFloat16;
  if (text == "mixed_float16") return Precision::kMixedFloat16;
  throw InvalidArgument("unknown precision policy '" + text +
                        "': expected float32, mixed_bfloat16 or mixed_float16 (Keras's names)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "float32";
    case Precision::kMixedBFloat16:
      return "mixed_bfloat16";
    case Precision::kMixedFloat16:
      return "mixed_float16";
  }
  return "?";
}

MathMode math_mode_of(Precision p) {
  switch (p) {
    case Precision::kMixedBFloat16:
      return MathMode::kBFloat16;
    case Precision::kMixedFloat16:
      return MathMode::kFloat16;
    case Precision::kFloat32:
      break;
  }
  return MathMode::kFloat32;
}

void set_tf32(bool allowed) { g_tf32 = allowed; }
bool tf32() { return g_tf32.load(); }

const char* math_mode_name(MathMode m) {
  switch (m) {
    case MathMode::kFloat32:
      return "float32";
    case MathMode::kBFloat16:
      return "bfloat16";
    case MathMode::kFloat16:
      return "float16";
  }
  return "?";
}

std::string gpu_math_missing(int cc_major, int cc_minor, MathMode mode) {
  const int cc = cc_major * 10 + cc_minor;
  const std::string have = std::to_string(cc_major) + "." + std::to_string(cc_minor);
  if (mode == MathMode::kBFloat16 && cc < 80)
    return "bfloat16 tensor cores need compute capability 8.0 (Ampere) or newer, this GPU has " +
           have;
  if (mode == MathMode::kFloat16 && cc < 70)
    return "fast fp16 (tensor cores) needs compute capability 7.0 (Volta) or newer, this GPU "
           "has " +
           have;
  return {};
}

MathMode math_mode() { return g_math_mode.load(std::memory_order_relaxed); }

ScopedMathMode::ScopedMathMode(MathMode mode) : previous_(g_math_mode.exchange(mode)) {
  g_generation.fetch_add(1);  // Note [Cast once per step]
}

std::uint64_t math_generation() { return g_generation.load(); }
void note_parameters_changed() { g_generation.fetch_add(1); }

ConstantOperands::ConstantOperands(std::initializer_list<const void*> data) : count_(data.size()) {
  t_constants.insert(t_constants.end(), data.begin(), data.end());
}
ConstantOperands::~ConstantOperands() { t_constants.resize(t_constants.size() - count_); }

bool ConstantOperands::contains(const void* data) {
  return data && std::find(t_constants.begin(), t_constants.end(), data) != t_constants.end();
}
ScopedMathMode::~ScopedMathMode() { g_math_mode.store(previous_); }

void LossScale::update(bool finite) {
  if (!finite) {
    scale = std::max(kMin, scale * 0.5);
    good_steps = 0;
    return;
  }
  if (++good_steps >= kGrowthInterval) {
    scale = std::min(kMax, scale * 2.0);
    good_steps = 0;
  }
}

}  // namespace mirror
