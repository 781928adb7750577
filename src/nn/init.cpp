// Initialisers: host double precision, own uniform/normal transforms of the mt19937_64 stream
// (std::*_distribution are implementation-defined, so they could differ across standard
// libraries and break "same seed -> same weights" between builds).
#include "mirror/nn/init.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <string>

namespace mirror::nn::init {
namespace {

// [0, 1) with 53 random bits.
double unit(InitRng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Standard normal by Box-Muller (one value per two draws; simple and deterministic).
double normal(InitRng& rng) {
  const double u1 = 1.0 - unit(rng);  // (0, 1]: log is finite
  const double u2 = unit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Orthonormalises the columns of a (m x n, row-major, m >= n) in place by modified Gram-Schmidt
// with one re-orthogonalisation pass. The implied R has a positive diagonal, which is the
// Householder QR with Q multiplied by sign(diag(R)), i.e. the Keras/PyTorch recipe.
void orthonormalise_columns(std::vector<double>& a, std::int64_t m, std::int64_t n) {
  auto at = [&](std::int64_t i, std::int64_t j) -> double& { return a[i * n + j]; };
  for (std::int64_t j = 0; j < n; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (std::int64_t i = 0; i < m; ++i) dot += at(i, k) * at(i, j);
        for (std::int64_t i = 0; i < m; ++i) at(i, j) -= dot * at(i, k);
      }
    }
    double norm = 0;
    for (std::int64_t i = 0; i < m; ++i) norm += at(i, j) * at(i, j);
    norm = std::sqrt(norm);
    MIRROR_CHECK(norm > 1e-12, Error, "orthogonal init: rank-deficient random matrix");
    for (std::int64_t i = 0; i < m; ++i) at(i, j) /= norm;
  }
}

}  // namespace

std::vector<double> uniform_values(std::int64_t numel, double low, double high, InitRng& rng) {
  MIRROR_CHECK(numel >= 0 && high >= low, InvalidArgument,
               "uniform init: expected numel >= 0 and low <= high, got " + std::to_string(numel) +
                   ", [" + std::to_string(low) + ", " + std::to_string(high) + ")");
  std::vector<double> v(static_cast<std::size_t>(numel));
  for (auto& x : v) x = low + (high - low) * unit(rng);
  return v;
}

std::vector<double> glorot_uniform_values(std::int64_t numel, std::int64_t fan_in,
                                          std::int64_t fan_out, InitRng& rng) {
  MIRROR_CHECK(fan_in + fan_out > 0, InvalidArgument,
               "glorot_uniform: fan_in + fan_out must be positive, got " + std::to_string(fan_in) +
                   " + " + std::to_string(fan_out));
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_values(numel, -limit, limit, rng);
}

std::vector<double> orthogonal_values(std::int64_t rows, std::int64_t cols, InitRng& rng,
                                      double gain) {
  MIRROR_CHECK(rows > 0 && cols > 0, InvalidArgument,
               "orthogonal init: expected a non-empty matrix, got " + std::to_string(rows) + "x" +
                   std::to_string(cols));
  // Draw the rows x cols normal matrix in row-major order, then orthonormalise the columns of
  // it (or of its transpose when it is wide), as Keras does.
  std::vector<double> a(static_cast<std::size_t>(rows * cols));
  for (auto& x : a) x = normal(rng);
  const bool wide = rows < cols;
  const std::int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  std::vector<double> t(a.size());
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      if (wide) {
        t[j * rows + i] = a[i * cols + j];
      } else {
        t[i * cols + j] = a[i * cols + j];
      }
    }
  }
  orthonormalise_columns(t, m, n);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      a[i * cols + j] = gain * (wide ? t[j * rows + i] : t[i * cols + j]);
    }
  }
  return a;
}

Tensor to_tensor(const std::vector<double>& values, const Shape& shape, DType dtype,
                 Device device) {
  Tensor host;
  if (dtype == DType::kFloat64) {
    host = Tensor::from_vector(values, shape);
  } else if (dtype == DType::kFloat32) {
    host = Tensor::from_vector(std::vector<float>(values.begin(), values.end()), shape);
  } else {
    throw InvalidArgument(std::string("init: parameters must be float32 or float64, got ") +
                          dtype_name(dtype));
  }
  return host.to(device);
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return Tensor::zeros(shape, dtype, device);
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device,
               InitRng& rng) {
  return to_tensor(uniform_values(shape_numel(shape), low, high, rng), shape, dtype, device);
}

Tensor glorot_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out, DType dtype,
                      Device device, InitRng& rng) {
  return to_tensor(glorot_uniform_values(shape_numel(shape), fan_in, fan_out, rng), shape, dtype,
                   device);
}

Tensor orthogonal(const Shape& shape, DType dtype, Device device, InitRng& rng, double gain) {
  MIRROR_CHECK(shape.size() == 2, InvalidArgument,
               "orthogonal init: expected a 2-D shape, got " + shape_str(shape));
  return to_tensor(orthogonal_values(shape[0], shape[1], rng, gain), shape, dtype, device);
}

double truncated_normal(InitRng& rng) {
  for (;;) {
    const double z = normal(rng);
    if (std::fabs(z) <= 2.0) return z;
  }
}

namespace {

/// VarianceScaling's parameters for `cls` (VarianceScaling itself or one of its named cases).
struct Scaling {
  double scale = 1.0;
  std::string mode = "fan_in", distribution = "truncated_normal";
};

bool variance_scaling(const std::string& cls, const nlohmann::json& cfg, Scaling* s) {
  if (cls == "VarianceScaling") {
    s->scale = cfg.value("scale", 1.0);
    s->mode = cfg.value("mode", std::string("fan_in"));
    s->distribution = cfg.value("distribution", std::string("truncated_normal"));
    if (s->distribution == "normal") s->distribution = "truncated_normal";  // Keras's alias
    return true;
  }
  static const std::map<std::string, Scaling> named = {
      {"GlorotUniform", {1.0, "fan_avg", "uniform"}},
      {"GlorotNormal", {1.0, "fan_avg", "truncated_normal"}},
      {"HeUniform", {2.0, "fan_in", "uniform"}},
      {"HeNormal", {2.0, "fan_in", "truncated_normal"}},
      {"LecunUniform", {1.0, "fan_in", "uniform"}},
      {"LecunNormal", {1.0, "fan_in", "truncated_normal"}}};
  const auto it = named.find(cls);
  if (it == named.end()) return false;
  *s = it->second;
  return true;
}

}  // namespace

std::vector<double> initializer_values(const nlohmann::json& spec, const Shape& shape,
                                       std::int64_t fan_in, std::int64_t fan_out, InitRng& rng) {
  MIRROR_CHECK(spec.is_object() && spec.contains("class_name") && spec["class_name"].is_string(),
               InvalidArgument, "init: expected {\"class_name\", \"config\"}, got " + spec.dump());
  const std::string cls = spec["class_name"].get<std::string>();
  const nlohmann::json cfg = spec.value("config", nlohmann::json::object());
  const std::int64_t numel = shape_numel(shape);
  std::vector<double> v(static_cast<std::size_t>(numel));
  if (cls == "Zeros" || cls == "Ones" || cls == "Constant") {
    const double c = cls == "Zeros" ? 0.0 : cls == "Ones" ? 1.0 : cfg.value("value", 0.0);
    std::fill(v.begin(), v.end(), c);
    return v;
  }
  if (cls == "RandomUniform") {
    return uniform_values(numel, cfg.value("minval", -0.05), cfg.value("maxval", 0.05), rng);
  }
  if (cls == "RandomNormal" || cls == "TruncatedNormal") {
    const double mean = cfg.value("mean", 0.0), stddev = cfg.value("stddev", 0.05);
    for (auto& x : v)
      x = mean + stddev * (cls == "RandomNormal" ? normal(rng) : truncated_normal(rng));
    return v;
  }
  if (cls == "Orthogonal") {
    MIRROR_CHECK(shape.size() >= 2, InvalidArgument,
                 "init: Orthogonal needs a matrix or a kernel, got shape " + shape_str(shape));
    return orthogonal_values(shape[0], numel / shape[0], rng, cfg.value("gain", 1.0));
  }
  Scaling s;
  MIRROR_CHECK(variance_scaling(cls, cfg, &s), InvalidArgument,
               "init: unknown initializer " + spec.dump());
  const double fan = s.mode == "fan_in"    ? static_cast<double>(fan_in)
                     : s.mode == "fan_out" ? static_cast<double>(fan_out)
                                           : (static_cast<double>(fan_in) + fan_out) / 2.0;
  const double scale = s.scale / std::max(1.0, fan);
  if (s.distribution == "uniform") {
    const double limit = std::sqrt(3.0 * scale);
    return uniform_values(numel, -limit, limit, rng);
  }
  MIRROR_CHECK(s.distribution == "truncated_normal" || s.distribution == "untruncated_normal",
               InvalidArgument, "init: unknown VarianceScaling distribution in " + spec.dump());
  if (s.distribution == "untruncated_normal") {
    const double stddev = std::sqrt(scale);
    for (auto& x : v) x = stddev * normal(rng);
    return v;
  }
  // The standard deviation of a unit normal truncated to [-2, 2] is 0.87962566103423978.
  const double stddev = std::sqrt(scale) / 0.87962566103423978;
  for (auto& x : v) x = stddev * truncated_normal(rng);
  return v;
}

Tensor kernel(const Layer& layer, const std::string& what, const Shape& shape, std::int64_t fan_in,
              std::int64_t fan_out, DType dtype, Device device, InitRng& rng) {
  const nlohmann::json& spec = layer.initializer(what);
  if (spec.is_null()) return glorot_uniform(shape, fan_in, fan_out, dtype, device, rng);
  return to_tensor(initializer_values(spec, shape, fan_in, fan_out, rng), shape, dtype, device);
}

Tensor bias(const Layer& layer, const std::string& what, const Shape& shape, DType dtype,
            Device device, InitRng& rng) {
  const nlohmann::json& spec = layer.initializer(what);
  if (spec.is_null()) return zeros(shape, dtype, device);
  // Keras's fans of a vector are its length, both ways.
  return to_tensor(initializer_values(spec, shape, shape_numel(shape), shape_numel(shape), rng),
                   shape, dtype, device);
}

}  // namespace mirror::nn::init
