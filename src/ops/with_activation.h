// defines: with_activation, the one switch from ops::Activation to its src/math functor that
// both backends' element-wise kernels use (host code; the functor then runs on either side).
#pragma once

#include <string>

#include "math/activation.h"
#include "mirror/error.h"
#include "mirror/ops.h"

namespace mirror::ops {

/// Calls f(Functor{}) for the activation.
template <class F>
void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::kIdentity:
      return f(math::Identity{});
    case Activation::kRelu:
      return f(math::Relu{});
    case Activation::kTanh:
      return f(math::Tanh{});
    case Activation::kSigmoid:
      return f(math::Sigmoid{});
  }
  throw InvalidArgument("activation: unknown activation kind " +
                        std::to_string(static_cast<int>(act)));
}

}  // namespace mirror::ops
