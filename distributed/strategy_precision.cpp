// MirroredStrategy and mixed precision (Note [Mixed precision], Note [Loss scaling] in
// mirror/precision.h): the per-device support check, the loss-scale restore, and the test hook
// that injects an fp16 overflow on one replica.
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "mirror/distributed/strategy.h"
#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::dist {

std::vector<std::string> check_precision_support(Precision precision,
                                                 const std::vector<Device>& devices) {
  const MathMode mode = math_mode_of(precision);
  std::vector<std::string> notes;
  std::set<std::string> seen;
  for (const Device& d : devices) {
    const ops::MathSupport s = ops::math_support(d, mode);
    MIRROR_CHECK(s.missing.empty(), InvalidArgument,
                 std::string("--precision ") + precision_name(precision) + " cannot run on " +
                     d.str() + ": " + s.missing);
    if (!s.fallback.empty() && seen.insert(s.fallback).second) notes.push_back(s.fallback);
  }
  return notes;
}

void MirroredStrategy::set_loss_scale(const LossScale& s) {
  int exponent = 0;
  const bool power_of_two = std::isfinite(s.scale) && std::frexp(s.scale, &exponent) == 0.5;
  MIRROR_CHECK(power_of_two && s.scale >= LossScale::kMin && s.scale <= LossScale::kMax &&
                   s.good_steps >= 0 && s.good_steps < LossScale::kGrowthInterval,
               InvalidArgument,
               "loss scale " + std::to_string(s.scale) + " after " + std::to_string(s.good_steps) +
                   " good steps: expected a power of two from 1 to 2^24 and 0 to " +
                   std::to_string(LossScale::kGrowthInterval - 1) + " good steps");
  loss_scale_ = s;
}

namespace detail {

/// MIRROR_TEST_FP16_OVERFLOW="replica:step" as a pair; {-1, -1} when unset.
std::pair<int, std::int64_t> overflow_hook() {
  const char* env = std::getenv("MIRROR_TEST_FP16_OVERFLOW");
  if (!env || !*env) return {-1, -1};
  const std::string text = env;
  const std::size_t colon = text.find(':');
  try {
    std::size_t a = 0, b = 0;
    const int replica = std::stoi(text.substr(0, colon), &a);
    const std::int64_t step = std::stoll(text.substr(colon + 1), &b);
    if (colon != std::string::npos && a == colon && b == text.size() - colon - 1 && replica >= 0 &&
        step >= 0)
      return {replica, step};
  } catch (const std::exception&) {
  }
  throw InvalidArgument("MIRROR_TEST_FP16_OVERFLOW='" + text +
                        "': expected 'replica:step' (two integers >= 0, e.g. 1:3), a test hook");
}

}  // namespace detail
}  // namespace mirror::dist
