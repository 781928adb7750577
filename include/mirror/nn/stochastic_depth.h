// defines: StochasticDepth, keras.applications' per-sample drop of a residual branch (ConvNeXt
// with drop_path_rate > 0).
#pragma once

#include <string>

#include "mirror/nn/layer.h"

namespace mirror::nn {

/// While training, each sample's input is kept whole with probability 1 - rate (scaled by
/// 1 / (1 - rate)) or dropped whole; outside training it passes unchanged. The keep decision of
/// sample n is Dropout's for a single feature (a pure function of the step seed, this layer's
/// name and the sample's id), so it does not depend on the replica. Keras draws its own random
/// numbers, so the masks are Keras's in distribution, not in value (as for Dropout).
class StochasticDepth : public Layer {
 public:
  explicit StochasticDepth(double rate);
  std::string kind() const override { return "stochastic_depth"; }
  Shape build(const Shape& input_shape, DType dtype, Device device, InitRng& rng) override;
  Tensor forward(const Tensor& x, ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  nlohmann::json config() const override { return {{"rate", rate_}}; }

 private:
  double rate_;
  Shape input_shape_;
  DType dtype_ = DType::kFloat32;
  Tensor mask_;  // [N, sample...]: 0 or 1 / (1 - rate) per sample; undefined: identity
};

}  // namespace mirror::nn
