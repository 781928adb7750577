// defines: the parameter initialisers (Glorot uniform, orthogonal, uniform, zeros, and every
// initializer a spec may name: Note [Spec initializers]), computed on the host in double
// precision from an InitRng and then cast/copied to the parameter's dtype and device, so every
// rank and every backend starts from bit-identical weights.
//
// Note [Spec initializers]
// A spec may give a layer's kernel and bias Keras's initializers (VarianceScaling and its named
// cases HeNormal/HeUniform, LecunNormal/LecunUniform, GlorotNormal/GlorotUniform; TruncatedNormal,
// RandomNormal, RandomUniform, Constant, Zeros, Ones, Orthogonal). The spec reader keeps the ones
// that differ from the layer's default as a canonical {"class_name", "config"} (no seed: Keras's
// seeds cannot reproduce Mirror's draws anyway), the layer is told them (Layer::set_initializer)
// and draws them in build from the model's one generator, in its usual order: a seed gives the
// same weights on every rank and backend, and a layer at its defaults draws what it always drew.
// The fans are Keras's, of Keras's kernel shape (receptive field x input channels, receptive field
// x output channels; the layer states them), so VarianceScaling's scale means what it means in
// Keras. Truncated normals are redrawn beyond two standard deviations, and VarianceScaling's
// truncated_normal divides its standard deviation by 0.87962566103423978 (the standard deviation
// of a unit normal truncated there), as Keras does. Orthogonal makes the [rows, rest] matrix
// of the kernel (Mirror's layout: Dense [in, units], convolutions [out, in * kh * kw])
// orthonormal along its shorter side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mirror/nn/layer.h"
#include "mirror/tensor.h"

namespace mirror::nn::init {

/// Host values, row-major, `numel` of them, drawn from `rng` in index order.
std::vector<double> uniform_values(std::int64_t numel, double low, double high, InitRng& rng);
/// Glorot (Xavier) uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)) (Keras default).
std::vector<double> glorot_uniform_values(std::int64_t numel, std::int64_t fan_in,
                                          std::int64_t fan_out, InitRng& rng);
/// A rows x cols matrix with orthonormal rows (rows <= cols) or columns (rows > cols), from the
/// QR decomposition of a standard-normal matrix with the sign of R's diagonal folded in (the
/// Keras / PyTorch recipe). `gain` scales the result.
std::vector<double> orthogonal_values(std::int64_t rows, std::int64_t cols, InitRng& rng,
                                      double gain = 1.0);

/// Copies host doubles into a new tensor of `shape`, `dtype` (float32/float64) on `device`.
Tensor to_tensor(const std::vector<double>& values, const Shape& shape, DType dtype, Device device);

// Convenience: build the tensor directly.
Tensor zeros(const Shape& shape, DType dtype, Device device);
Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device,
               InitRng& rng);
Tensor glorot_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out, DType dtype,
                      Device device, InitRng& rng);
/// Orthogonal matrix of `shape` = [rows, cols].
Tensor orthogonal(const Shape& shape, DType dtype, Device device, InitRng& rng, double gain = 1.0);

/// Note [Spec initializers]: the values of canonical initializer `spec` for a tensor of `shape`
/// with Keras's fans, drawn from `rng` in index order. InvalidArgument for an unknown class or
/// config (the spec reader refuses them first).
std::vector<double> initializer_values(const nlohmann::json& spec, const Shape& shape,
                                       std::int64_t fan_in, std::int64_t fan_out, InitRng& rng);
/// A standard normal truncated to [-2, 2] (redrawn beyond), as Keras's truncated normals.
double truncated_normal(InitRng& rng);
/// Kernel `what` of `layer`: its spec initializer (Layer::initializer) when set, else Glorot
/// uniform with these fans.
Tensor kernel(const Layer& layer, const std::string& what, const Shape& shape, std::int64_t fan_in,
              std::int64_t fan_out, DType dtype, Device device, InitRng& rng);
/// Bias `what` of `layer` (a vector): its spec initializer when set, else zeros.
Tensor bias(const Layer& layer, const std::string& what, const Shape& shape, DType dtype,
            Device device, InitRng& rng);

}  // namespace mirror::nn::init
