// ops.h "Keras's layers" entry points: check shapes, dtypes and devices once, then call the
// device's KernelSet; and KernelSet's default batched_gemm (one gemm per matrix).
#include "backend.h"
#include "mirror/ops.h"

namespace mirror {

void KernelSet::batched_gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a,
                             const Tensor& b, double beta, Tensor& c) {
  const Shape sa(a.shape().begin() + 1, a.shape().end()),
      sb(b.shape().begin() + 1, b.shape().end()), sc(c.shape().begin() + 1, c.shape().end());
  for (std::int64_t i = 0; i < c.dim(0); ++i) {
    Tensor ci = c.view(i * shape_numel(sc), sc);
    gemm(trans_a, trans_b, alpha, a.view(i * shape_numel(sa), sa), b.view(i * shape_numel(sb), sb),
         beta, ci);
  }
}

namespace ops {
namespace {

KernelSet& on(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    MIRROR_CHECK(t->defined(), InvalidArgument, std::string(op) + ": an undefined tensor");
    MIRROR_CHECK(
        first == nullptr || (t->device() == first->device() && t->dtype() == first->dtype()),
        InvalidArgument,
        std::string(op) + ": tensors differ in device or dtype (" + first->str() + " and " +
            t->str() + ")");
    MIRROR_CHECK(t->dtype() == DType::kFloat32 || t->dtype() == DType::kFloat64, InvalidArgument,
                 std::string(op) + ": expected float32 or float64, got " + t->str());
    if (first == nullptr) first = t;
  }
  return kernels_for(first->device());
}

void same_shape(const Tensor& a, const Tensor& b, const char* op) {
  MIRROR_CHECK(a.shape() == b.shape(), InvalidArgument,
               std::string(op) + ": shapes differ: " + a.str() + " vs " + b.str());
}

void check_mask(const Tensor& scores, const AttentionMask& m, const char* op) {
  MIRROR_CHECK(scores.rank() == 3 && m.heads >= 1 && scores.dim(0) % m.heads == 0, InvalidArgument,
               std::string(op) + ": expected scores [N * heads, Tq, Tk] with heads " +
                   std::to_string(m.heads) + ", got " + scores.str());
  MIRROR_CHECK(
      m.lengths.empty() || static_cast<std::int64_t>(m.lengths.size()) * m.heads == scores.dim(0),
      InvalidArgument,
      std::string(op) + ": " + std::to_string(m.lengths.size()) + " lengths for " + scores.str() +
          " with " + std::to_string(m.heads) + " heads");
  for (std::int32_t len : m.lengths) {
    MIRROR_CHECK(len >= 1, InvalidArgument, std::string(op) + ": a length below 1");
  }
}

}  // namespace

Tensor eltwise_forward(const Eltwise& f, const Tensor& x) {
  return on("eltwise_forward", {&x}).eltwise_forward(f, x);
}

Tensor eltwise_backward(const Eltwise& f, const Tensor& x, const Tensor& dy) {
  KernelSet& k = on("eltwise_backward", {&x, &dy});
  same_shape(x, dy, "eltwise_backward");
  return k.eltwise_backward(f, x, dy);
}

Tensor extremum(const Tensor& a, const Tensor& b, bool minimum, Tensor& mask) {
  KernelSet& k = on("extremum", {&a, &b});
  same_shape(a, b, "extremum");
  return k.extremum(a, b, minimum, mask);
}

void batched_gemm(bool ta, bool tb, double alpha, const Tensor& a, const Tensor& b, double beta,
                  Tensor& c) {
  KernelSet& k = on("batched_gemm", {&a, &b, &c});
  MIRROR_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3 && a.dim(0) == c.dim(0) &&
                   b.dim(0) == c.dim(0),
               InvalidArgument,
               "batched_gemm: expected 3-D tensors with one batch size, got " + a.str() + ", " +
                   b.str() + ", " + c.str());
  const auto m = ta ? a.dim(2) : a.dim(1), ka = ta ? a.dim(1) : a.dim(2);
  const auto kb = tb ? b.dim(2) : b.dim(1), n = tb ? b.dim(1) : b.dim(2);
  MIRROR_CHECK(ka == kb && c.dim(1) == m && c.dim(2) == n, InvalidArgument,
               "batched_gemm: inner/outer sizes disagree: " + a.str() + (ta ? "^T" : "") + " x " +
                   b.str() + (tb ? "^T" : "") + " -> " + c.str());
  if (c.numel() == 0) return;
  k.batched_gemm(ta, tb, alpha, a, b, beta, c);
}

Tensor attention_softmax(const Tensor& scores, const AttentionMask& m) {
  KernelSet& k = on("attention_softmax", {&scores});
  check_mask(scores, m, "attention_softmax");
  return k.attention_softmax(scores, m);
}

Tensor attention_softmax_backward(const Tensor& probs, const Tensor& dprobs,
                                  const AttentionMask& m) {
  KernelSet& k = on("attention_softmax_backward", {&probs, &dprobs});
  same_shape(probs, dprobs, "attention_softmax_backward");
  check_mask(probs, m, "attention_softmax_backward");
  return k.attention_softmax_backward(probs, dprobs, m);
}

}  // namespace ops
}  // namespace mirror
