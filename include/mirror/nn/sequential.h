// defines: Sequential, the model: layers in a fixed (topological) order with deterministic names,
// each reading the model input or earlier layers' outputs (a chain by default, any DAG when
// layers are added with their inputs), and a gradient-ready hook that lets the strategy start
// all-reducing a bucket while backward continues.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mirror/nn/layer.h"

namespace mirror::nn {

/// Per-layer wall time of forward and backward, in ms summed over the calls made while it is
/// attached (Sequential::set_layer_times): the profile of step-bench --profile. A backend that
/// runs asynchronously (CUDA) is timed up to its launch, not its completion, unless `fence`
/// waits for the device: it is called before each layer's clock starts and before it stops.
struct LayerTimes {
  std::vector<double> forward_ms, backward_ms;  // per layer, in layer order
  int forwards = 0, backwards = 0;              // calls timed
  std::function<void()> fence;                  // empty: time the host's calls only
};

class Sequential {
 public:
  Sequential() = default;
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;

  /// Appends a layer reading the previous layer's output (the model input for the first).
  Sequential& add(std::unique_ptr<Layer> layer);
  /// Note [Model graph]
  /// Appends a layer reading `inputs`: indices of EARLIER layers, or kModelInput. Requiring
  /// earlier layers makes every model a DAG in topological order by construction (cycles cannot
  /// be expressed; a spec with names is sorted and checked by ModelSpec). A MergeLayer takes two
  /// or more inputs, any other layer exactly one. The last layer is the model's output; build()
  /// rejects a layer whose output nothing reads. Forward runs the layers in order, keeping each
  /// output until its last reader has run; backward runs them in reverse and sums the gradients
  /// of an output read by several layers before its producer's backward runs (Caffe's split).
  Sequential& add(std::unique_ptr<Layer> layer, std::vector<int> inputs);
  static constexpr int kModelInput = -1;
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

  /// Runs the layers in order. ctx.lengths holds the batch's sequence lengths on entry (empty for
  /// none) and each layer sees those of its input (Note [Sequence masks] in layer.h); on return
  /// it holds the output's (empty: every step valid, or no time axis).
  Tensor forward(const Tensor& x, ForwardContext& ctx);
  /// Note [Sequence masks]: true for Keras's mask semantics (the batch's lengths are ignored;
  /// masks start at Masking layers), false (the default) for Mirror's.
  void set_keras_masks(bool keras) { keras_masks_ = keras; }
  bool keras_masks() const { return keras_masks_; }
  /// Note [Keras's image layout] (mirror/nn/models.h): inputs may come as [H, W, C].
  void set_channels_last_input(bool v) { channels_last_input_ = v; }
  bool channels_last_input() const { return channels_last_input_; }
  /// Called after each layer's backward with the parameters whose gradients are now final
  /// (last layer first; layers without parameters do not call it).
  using GradReadyHook = std::function<void(const std::vector<Parameter*>&)>;
  /// Back-propagates `dlogits` through every layer (last to first).
  void backward(const Tensor& dlogits, const GradReadyHook& on_ready = {});

  /// All parameters in build order (layer order, then each layer's own order).
  std::vector<Parameter*> parameters();
  /// All non-trained state (BatchNorm moving statistics), in layer order.
  std::vector<Buffer*> buffers();
  /// The inputs of layer i (indices of earlier layers or kModelInput).
  const std::vector<int>& layer_inputs(std::size_t i) const { return inputs_.at(i); }
  /// Whether every layer reads the one before it (the model is a plain stack).
  bool is_chain() const;
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
  /// Note [Blocked images] (mirror/ops.h): whether layers that agree to it pass images to each
  /// other in the blocked layout of the backend's convolutions (on by default; off runs every
  /// layer on plain NCHW, which benchmarks and tests compare against). May change between steps.
  void set_blocked_images(bool enabled);
  /// Times every layer's forward and backward into `times` (null: no timing, the default).
  void set_layer_times(LayerTimes* times) { times_ = times; }

 private:
  void accumulate_grad(int index, const Tensor& g);
  void prepare_times();  // sizes times_ to the layers
  void fence_times() const;  // LayerTimes::fence, when profiling with one

  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> inputs_;  // per layer (Note [Model graph])
  std::vector<int> last_reader_;          // per layer: the last layer reading its output
  std::vector<Tensor> outputs_;           // per layer, during forward
  std::vector<std::vector<std::int32_t>> lengths_;  // per layer output, during forward
  std::vector<Tensor> grads_;             // per layer output, during backward
  std::vector<bool> grad_owned_;          // grads_[i] is a private sum (may be added into)
  std::vector<Shape> output_shapes_;
  Shape input_shape_, output_shape_;
  DType dtype_ = DType::kFloat32;
  Device device_ = Device::cpu();
  bool built_ = false;
  LayerTimes* times_ = nullptr;
  bool keras_masks_ = false;
  bool channels_last_input_ = false;
  bool blocked_images_ = true;
};

}  // namespace mirror::nn
