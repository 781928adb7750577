// defines: the mixed-precision policy (Keras's names: float32, mixed_bfloat16, mixed_float16),
// the process-wide math mode the matrix-product kernels read, and the dynamic loss scale of
// mixed_float16.
//
// Note [Mixed precision]: under a mixed policy the parameters stay float32 (master weights, the
// optimizer state too) and so do the activations between layers; only the operands of the big
// matrix products (convolution, dense and the RNN's GEMMs, all through ops::gemm / ops::conv2d_*)
// are rounded to the 16-bit type, and the products accumulate in float32. Numerically sensitive
// work (softmax cross-entropy, the loss, normalisation statistics, the optimizer) never sees the
// mode. The mode is process-wide, not per thread, because in-process replicas run on worker
// threads; MirroredStrategy sets it for the duration of each step (ScopedMathMode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mirror {

enum class Precision { kFloat32, kMixedBFloat16, kMixedFloat16 };
/// "float32", "mixed_bfloat16", "mixed_float16"; InvalidArgument naming the choices otherwise.
Precision parse_precision(const std::string& text);
const char* precision_name(Precision p);

/// How the matrix-product kernels treat float32 operands.
enum class MathMode {
  kFloat32,   // as given
  kBFloat16,  // operands rounded to bfloat16, float32 accumulation
  kFloat16,   // operands rounded to IEEE fp16 (values above 65504 become inf), float32 accumulation
};
MathMode math_mode_of(Precision p);
const char* math_mode_name(MathMode m);

/// The mode in force (kFloat32 unless a ScopedMathMode is alive).
MathMode math_mode();

/// Sets the process-wide math mode for its lifetime, then restores the previous one.
class ScopedMathMode {
 public:
  explicit ScopedMathMode(MathMode mode);
  ~ScopedMathMode();
  ScopedMathMode(const ScopedMathMode&) = delete;
  ScopedMathMode& operator=(const ScopedMathMode&) = delete;

 private:
  MathMode previous_;
};

/// Note [TF32]: on Ampere and newer GPUs float32 convolutions and matrix products may run on the
/// TF32 tensor cores (operands rounded to 10-bit significands, float32 accumulation): several
/// times faster, and what TensorFlow does by default for both, PyTorch for convolutions. Under
/// the float32 policy the CUDA backend uses them when this process-wide switch is on. The
/// library's default is off (exact float32 FMA math, what the tests comparing the GPU with the
/// CPU need); mirror-train, step-bench and mirror-bench turn it on unless given --tf32 off. The
/// mixed policies are not affected (bfloat16 allows TF32 anyway), nor is the CPU.
void set_tf32(bool allowed);
bool tf32();

/// Note [Cast once per step]: a parameter is rounded to 16 bits once per step, not once per use
/// (a GRU's recurrent kernel is used at every time step, forward and backward). A layer names the
/// parameters it passes to ops as ConstantOperands for the duration of the call; a kernel may then
/// keep the 16-bit copy of such an operand, keyed by its address, until the math-mode generation
/// changes. Every ScopedMathMode and every optimizer update starts a generation (MirroredStrategy
/// opens a scope per step; parameters change only in the optimizer, after their last use).
/// Whoever writes parameters otherwise inside a scope must call note_parameters_changed(). Only the
/// named tensors are cached: activations (whose memory is recycled within a step) never are.
std::uint64_t math_generation();
/// Starts a new generation: the optimizer updates (ops::sgd_update, ops::adam_update) call it, so
/// a loop that steps an optimizer inside one ScopedMathMode never reads a stale copy.
void note_parameters_changed();

class ConstantOperands {
 public:
  /// The tensors' data stay unchanged until the current ScopedMathMode ends (the calling thread).
  explicit ConstantOperands(std::initializer_list<const void*> data);
  ~ConstantOperands();
  ConstantOperands(const ConstantOperands&) = delete;
  ConstantOperands& operator=(const ConstantOperands&) = delete;
  /// Whether `data` was named by a ConstantOperands alive on this thread.
  static bool contains(const void* data);

 private:
  std::size_t count_;
};

/// What a GPU of compute capability major.minor lacks for `mode` ("" when nothing): bfloat16
/// tensor cores need 8.0 (Ampere), fast fp16 7.0 (Volta). The CUDA backend refuses a policy with
/// this text; mirror-doctor shows it per device.
std::string gpu_math_missing(int cc_major, int cc_minor, MathMode mode);

/// Note [Loss scaling]: fp16 has 5 exponent bits, so small gradients underflow to zero. The loss
/// (and so every gradient) is multiplied by `scale` before backward and the reduced gradients
/// divided by it before the optimizer. A step whose reduced gradients hold an inf or NaN is
/// skipped and the scale halved; after `growth_interval` finite steps in a row it doubles.
/// Every replica feeds the same decisions (taken from the reduced gradients), so the scale is the
/// same everywhere. Scales are powers of two, so scaling and unscaling are exact.
struct LossScale {
  static constexpr double kInitial = 32768.0;  // 2^15
  static constexpr double kMin = 1.0;
  static constexpr double kMax = 16777216.0;  // 2^24
  static constexpr std::int64_t kGrowthInterval = 2000;

  double scale = kInitial;
  std::int64_t good_steps = 0;  // finite steps since the last change

  /// Updates the state after a step; `finite` tells whether the reduced gradients were finite.
  void update(bool finite);
};

}  // namespace mirror
