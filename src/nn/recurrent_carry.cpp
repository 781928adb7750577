// Note [Carried outputs]: a Keras GRU or LSTM returning sequences over a masked input skips the
// masked steps, keeping its state and, unless zero_output_for_mask is true, repeating its last
// output there (Keras's RNN sets it false by default; Bidirectional sets it true). Mirror's
// recurrent kernels return zeros past each length, which a layer that reads the mask never
// sees, but a layer that ends it (Conv1D, GlobalMaxPooling1D, Flatten) does. So with Keras's
// masks and zero_output_for_mask false, the output past each length is the last valid step's,
// copied (a strided copy per shorter sequence), and its gradient is summed back onto that step.
#include <algorithm>

#include "mirror/nn/recurrent.h"
#include "mirror/ops.h"

namespace mirror::nn {

Tensor Recurrent::carry_outputs(const Tensor& y, const std::vector<std::int32_t>& lengths,
                                const ForwardContext& ctx) {
  carried_.clear();
  if (zero_output_for_mask_ || !ctx.keras_masks || ctx.lengths.empty()) return y;
  const std::int64_t n = y.dim(0), t = y.dim(1), h = y.dim(2);
  Tensor out = y.clone();
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t len = lengths[static_cast<std::size_t>(s)];
    if (len >= t || len < 1) continue;
    ops::BlockCopy copy;  // rows len..T-1 of sample s <- row len-1 (a source stride of 0)
    copy.dims[0] = t - len;
    copy.dims[1] = h;
    copy.src_strides[0] = 0;
    copy.src_strides[1] = 1;
    copy.dst_strides[0] = h;
    copy.dst_strides[1] = 1;
    copy.src_offset = (s * t + len - 1) * h;
    copy.dst_offset = (s * t + len) * h;
    ops::copy_block(out, y, copy);
  }
  carried_ = lengths;
  return out;
}

Tensor Recurrent::carried_gradient(const Tensor& dy) const {
  if (carried_.empty()) return dy;
  const std::int64_t n = dy.dim(0), t = dy.dim(1), h = dy.dim(2);
  Tensor g = dy.clone();
  const auto count = static_cast<std::size_t>(t);
  const Tensor ones =
      (dy.dtype() == DType::kFloat64 ? Tensor::from_vector(std::vector<double>(count, 1.0), {1, t})
                                     : Tensor::from_vector(std::vector<float>(count, 1.0f), {1, t}))
          .to(dy.device());
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int64_t len = carried_[static_cast<std::size_t>(s)];
    if (len >= t || len < 1) continue;
    Tensor last = g.view((s * t + len - 1) * h, {1, h});
    ops::gemm(false, false, 1.0, ones.view(0, {1, t - len}),
              dy.view((s * t + len) * h, {t - len, h}), 1.0, last);
  }
  return ops::zero_past_lengths(g, carried_);
}

}  // namespace mirror::nn
