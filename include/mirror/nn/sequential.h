// defines: Sequential, an ordered stack of layers with deterministic names and a gradient-ready
// hook that lets the strategy start all-reducing a bucket while backward continues.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"

namespace mirror::nn {

class Sequential {
 public:
  Sequential() = default;
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;

  Sequential& add(std::unique_ptr<Layer> layer);
  template <class L, class... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_unique<L>(std::forward<Args>(args)...));
  }

  /// Names layers ("conv2d_1", "dense_2", counted per kind), builds them for `input_shape`
  /// (without batch) and initialises parameters from `seed` (Keras-like: Glorot uniform
  /// kernels, orthogonal recurrent kernels, zero biases).
  void build(const Shape& input_shape, std::uint64_t seed, DType dtype = DType::kFloat32,
             Device device = Device::cpu());
  bool built() const { return built_; }

  Tensor forward(const Tensor& x, ForwardContext& ctx);
  /// Called after each layer's backward with the parameters whose gradients are now final
  /// (last layer first; layers without parameters do not call it).
  using GradReadyHook = std::function<void(const std::vector<Parameter*>&)>;
  /// Back-propagates `dlogits` through every layer (last to first).
  void backward(const Tensor& dlogits, const GradReadyHook& on_ready = {});

  /// All parameters in build order (layer order, then each layer's own order).
  std::vector<Parameter*> parameters();
  void zero_grad();
  std::int64_t parameter_count();
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  /// Each layer's output shape per sample, in layer order (after build).
  const std::vector<Shape>& layer_output_shapes() const { return output_shapes_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  /// JSON description: layers with kinds, names and configs; input shape; dtype.
  nlohmann::json config() const;
  /// Keras-like table: layer, output shape, parameter count.
  std::string summary();

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Shape> output_shapes_;
  Shape input_shape_, output_shape_;
  DType dtype_ = DType::kFloat32;
  Device device_ = Device::cpu();
  bool built_ = false;
};

}  // namespace mirror::nn
