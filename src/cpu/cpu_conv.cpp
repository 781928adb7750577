// 2-D convolution: float32 through oneDNN primitives (forward, backward-data, backward-weights,
// cached per shape and math mode), float64 through reference loops that are also the tests'
// oracle. Under MathMode::kBFloat16 the primitives take bfloat16 inputs (the boundary reorders
// round them) and write float32 outputs; under kFloat16 the inputs are rounded to fp16 first
// (Note [CPU fp16 emulation], cpu_kernels.h).
// Mirror's tensors are plain NCHW / OIHW; the primitives choose their own (blocked) layouts and
// the tensors are reordered at the boundaries (Note [oneDNN layouts] in cpu_dnnl.h).
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "cpu/cpu_dnnl.h"
#include "cpu/cpu_kernels.h"
#include "mirror/precision.h"

namespace mirror::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

/// Every size a convolution depends on. Asymmetric padding maps onto oneDNN's padding_l
/// ({top, left}) and padding_r ({bottom, right}); groups onto 5-D (goihw) weights.
struct ConvDims {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  std::int64_t groups, cg, og;  // groups, input and output channels per group
  ops::Conv2DGeometry g;

  ConvDims(const Shape& x, const Shape& k, const ops::Conv2DGeometry& geo)
      : n(x[0]), c(x[1]), h(x[2]), w(x[3]), o(k[0]), kh(k[2]), kw(k[3]), groups(geo.groups),
        cg(k[1]), og(k[0] / geo.groups), g(geo) {
    oh = g.out_h(static_cast<int>(h), static_cast<int>(kh));
    ow = g.out_w(static_cast<int>(w), static_cast<int>(kw));
  }
  /// Multiply-adds of one pass (decides whether the reference loops fork threads).
  std::int64_t macs() const { return n * o * oh * ow * cg * kh * kw; }
  /// `in`: the data type of the primitive's inputs (f32, or bf16 under MathMode::kBFloat16).
  std::string key(const char* kind, bool bias, dt in) const {
    std::string s = std::string(kind) + (in == dt::bf16 ? ",bf16" : ",f32");
    for (std::int64_t v : {n, c, h, w, o, kh, kw, groups}) s += "," + std::to_string(v);
    for (int v : {g.stride_h, g.stride_w, g.pad_top, g.pad_bottom, g.pad_left, g.pad_right})
      s += "," + std::to_string(v);
    return s + (bias ? ",b" : ",-");
  }
  dnnl::memory::desc src() const { return {{n, c, h, w}, dt::f32, tag::nchw}; }
  dnnl::memory::desc weights() const {
    if (groups == 1) return {{o, c, kh, kw}, dt::f32, tag::oihw};
    return {{groups, og, cg, kh, kw}, dt::f32, tag::goihw};  // Mirror's [O, C/g, KH, KW] memory
  }
  dnnl::memory::desc bias() const { return {{o}, dt::f32, tag::x}; }
  dnnl::memory::desc dst() const { return {{n, o, oh, ow}, dt::f32, tag::nchw}; }
  dnnl::memory::dims strides() const { return {g.stride_h, g.stride_w}; }
  dnnl::memory::dims pad_l() const { return {g.pad_top, g.pad_left}; }
  dnnl::memory::dims pad_r() const { return {g.pad_bottom, g.pad_right}; }
};

// ---------------------------------------------------------------- oneDNN (float32)

// Note [Convolution layouts]: format_tag::any lets each primitive choose blocked layouts
// (Note [oneDNN layouts]). On AVX2 those block channels by 8, so a 1-channel input (the first
// layer of an image model) becomes 8 channels of which 7 are zero padding; the backward-weights
// kernel then does 8x the work (Fashion-MNIST CNN's first layer, batch 64: 11 ms blocked, 5 ms
// im2col + sgemm, 3 ms channels-last, reorders included). So each primitive is created with the
// layouts tried in this order and the first whose activations (not weights: padding those is cheap)
// need no padding is kept: blocked (any), channels-last activations with any weights, plain. The
// choice depends only on the shape, so results stay deterministic.
enum class Layouts { kAny, kChannelsLast, kPlain };
constexpr Layouts kLayoutOrder[] = {Layouts::kAny, Layouts::kChannelsLast, Layouts::kPlain};

/// The primitive's view of a plain activation (NCHW) of data type `type`.
dnnl::memory::desc activation(const dnnl::memory::desc& plain, Layouts l, dt type = dt::f32) {
  if (l == Layouts::kPlain) return {plain.dims(), type, tag::nchw};
  return {plain.dims(), type, l == Layouts::kAny ? tag::any : tag::nhwc};
}
dnnl::memory::desc weights_in(const dnnl::memory::desc& plain, Layouts l, dt type = dt::f32) {
  const tag plain_tag = plain.dims().size() == 5 ? tag::goihw : tag::oihw;
  return {plain.dims(), type, l == Layouts::kPlain ? plain_tag : tag::any};
}
bool padded(const dnnl::memory::desc& md) {
  std::size_t elements = 1;
  for (auto v : md.dims()) elements *= static_cast<std::size_t>(v);
  return md.get_size() != elements * dnnl::memory::data_type_size(md.data_type());
}

/// Note [Blocked images] (ops.h): oneDNN's tag for nChw{b}c, 0 < b | 16.
tag blocked_tag(std::int64_t block) {
  switch (block) {
    case 16:
      return tag::nChw16c;
    case 8:
      return tag::nChw8c;
    case 4:
      return tag::nChw4c;
    default:
      throw InvalidArgument("convolution: no oneDNN layout blocks channels by " +
                            std::to_string(block));
  }
}
/// An image tensor's own layout: plain NCHW (block 0) or nChw{block}c, float32 or (a
/// convolution operand, Note [Convolution operands] in ops.h) bfloat16.
dnnl::memory::desc image_md(const dnnl::memory::desc& plain, std::int64_t block,
                            dt type = dt::f32) {
  return {plain.dims(), type, block == 0 ? tag::nchw : blocked_tag(block)};
}
/// Note [Convolution operands]: whether `t` is a bfloat16 operand made by conv2d_operand.
bool is_operand(const Tensor& t) { return t.dtype() == DType::kBFloat16; }
/// The layout of the image tensor `t` as the primitives' boundaries see it.
dnnl::memory::desc image_md(const dnnl::memory::desc& plain, const Tensor& t) {
  return image_md(plain, ops::image_block(t), is_operand(t) ? dt::bf16 : dt::f32);
}
/// The block of `chosen` when it is an unpadded float32 nChw{b}c that Mirror can hold as a
/// blocked image, else 0 (the output is then reordered to plain).
std::int64_t image_block_of(const dnnl::memory::desc& chosen) {
  const auto dims = chosen.dims();
  if (chosen.data_type() != dt::f32 || dims.size() != 4) return 0;
  for (std::int64_t b : {16, 8, 4}) {
    if (dims[1] % b == 0 && chosen == dnnl::memory::desc(dims, dt::f32, blocked_tag(b))) return b;
  }
  return 0;
}
/// The tensor for an image output of NCHW dims `plain`, blocked by `block` or plain.
Tensor image_tensor(const dnnl::memory::desc& plain, std::int64_t block, Device device) {
  const auto d = plain.dims();
  if (block == 0) return Tensor::empty({d[0], d[1], d[2], d[3]}, DType::kFloat32, device);
  return Tensor::empty({d[0], d[1] / block, d[2], d[3], block}, DType::kFloat32, device);
}

/// The data type of the primitives' inputs under the current math mode.
dt input_type() { return math_mode() == MathMode::kBFloat16 ? dt::bf16 : dt::f32; }

/// Note [Strided 1x1 gradients]: oneDNN 2.6's jit_1x1 gradients of a strided 1x1 convolution
/// on AVX-512 write outside their buffers with channels-last activations (a ResNet-style 1x1/2
/// shortcut of 8 channels at 64x64, batch 16, corrupted the heap; the AVX2 kernels do not). The
/// gradient passes of such a convolution skip that implementation for the next one oneDNN
/// offers, which computes them correctly (tests/ops_reference_test.cpp, 1x1_s2_shortcut).
template <class PrimitiveDesc>
PrimitiveDesc without_strided_jit_1x1(PrimitiveDesc pd, const ConvDims& d) {
  if (d.kh != 1 || d.kw != 1 || (d.g.stride_h == 1 && d.g.stride_w == 1)) return pd;
  while (std::string_view(pd.impl_info_str()).starts_with("jit_1x1") && pd.next_impl()) {
  }
  return pd;
}

/// The first primitive descriptor `make(layouts)` returns whose activation descriptors
/// (`acts(pd)` -> pair) are unpadded (Note [Convolution layouts]).
template <class Make, class Acts>
auto first_unpadded(Make&& make, Acts&& acts) {
  for (Layouts l : kLayoutOrder) {
    auto pd = make(l);
    const auto [a, b] = acts(pd);
    if (l == Layouts::kPlain || (!padded(a) && !padded(b))) return pd;
  }
  return make(Layouts::kPlain);  // not reached: kPlain is last and always accepted
}

/// `relu`: the ReLU runs as the convolution's post-op (forward only: a backward-pass hint does
/// not need it).
dnnl::convolution_forward::primitive_desc forward_pd(const ConvDims& d, bool with_bias, Layouts l,
                                                     dt in, bool relu = false) {
  const auto alg = dnnl::algorithm::convolution_direct;
  const auto prop = dnnl::prop_kind::forward_training;
  const auto src = activation(d.src(), l, in), weights = weights_in(d.weights(), l, in),
             dst = activation(d.dst(), l);
  auto desc = with_bias ? dnnl::convolution_forward::desc(prop, alg, src, weights, d.bias(), dst,
                                                          d.strides(), d.pad_l(), d.pad_r())
                        : dnnl::convolution_forward::desc(prop, alg, src, weights, dst, d.strides(),
                                                          d.pad_l(), d.pad_r());
  dnnl::primitive_attr attr = dnnl_user_scratchpad_attr();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return {desc, attr, dnnl_engine()};
}

/// A cached primitive with the layouts it chose (Note [oneDNN layouts]). Shared between threads
/// read-only; held by shared_ptr so a cache hit copies no descriptors.
template <class Prim>
struct Cached {
  typename Prim::primitive_desc pd;
  Prim prim;
  DnnlBoundary a, b, c;  // per primitive: the three tensor arguments, in the order named below
};
template <class Prim>
using CachedPtr = std::shared_ptr<const Cached<Prim>>;

/// The cache-key suffix for the layouts of an execution's image tensors (Note [Blocked images]):
/// each one's block, and whether it is a bfloat16 operand (Note [Convolution operands]).
std::string layout_key(std::initializer_list<const Tensor*> images, std::int64_t out_block) {
  std::string s = ",layout";
  for (const Tensor* t : images)
    s += "," + std::to_string(ops::image_block(*t)) + (is_operand(*t) ? "bf16" : "");
  return s + "," + std::to_string(out_block);
}

// Forward: a = src, b = weights (inputs), c = dst (output). Bias stays plain (a vector).
// `blocked_out`: the output stays in the primitive's layout when Mirror can hold it as a blocked
// image (out_block), and is reordered to plain otherwise.
struct CachedForward : Cached<dnnl::convolution_forward> {
  std::int64_t out_block = 0;
};

Tensor conv_forward_dnnl(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvDims& d,
                         bool relu, bool blocked_out) {
  using Prim = dnnl::convolution_forward;
  static PrimitiveCache<std::shared_ptr<const CachedForward>> cache;
  const bool with_bias = bias.defined();
  const dt in = input_type();
  const std::string key =
      d.key("fwd", with_bias, in) + (relu ? ",relu" : ",-") + layout_key({&x}, blocked_out ? 1 : 0);
  auto e = cache.get(key, [&] {
    auto pd = first_unpadded([&](Layouts l) { return forward_pd(d, with_bias, l, in, relu); },
                             [](const auto& p) { return std::pair(p.src_desc(), p.dst_desc()); });
    const std::int64_t out_block = blocked_out ? image_block_of(pd.dst_desc()) : 0;
    CachedForward c{{pd, Prim(pd), dnnl_input_boundary(image_md(d.src(), x), pd.src_desc()),
                     dnnl_input_boundary(d.weights(), pd.weights_desc()),
                     dnnl_output_boundary(image_md(d.dst(), out_block), pd.dst_desc())},
                    out_block};
    return std::make_shared<const CachedForward>(std::move(c));
  });
  Tensor y = image_tensor(d.dst(), e->out_block, x.device());
  DnnlRun run(x.device());
  run.input(DNNL_ARG_SRC, e->a, x);
  run.input(DNNL_ARG_WEIGHTS, e->b, w);
  if (with_bias) run.input(DNNL_ARG_BIAS, dnnl_input_boundary(d.bias(), d.bias()), bias);
  run.output(DNNL_ARG_DST, e->c, y);
  run.execute(e->prim, e->pd.scratchpad_desc());
  return y;
}

// Backward data: a = diff_dst, b = weights (inputs), c = diff_src (output, plain or blocked by
// `block`).
Tensor conv_backward_data_dnnl(const Tensor& dy, const Tensor& w, const ConvDims& d,
                               std::int64_t block) {
  using Prim = dnnl::convolution_backward_data;
  static PrimitiveCache<CachedPtr<Prim>> cache;
  const dt in = input_type();
  auto e = cache.get(d.key("bwd_data", false, in) + layout_key({&dy}, block), [&] {
    auto make = [&](Layouts l) {
      Prim::desc desc(dnnl::algorithm::convolution_direct, activation(d.src(), l),
                      weights_in(d.weights(), l, in), activation(d.dst(), l, in), d.strides(),
                      d.pad_l(), d.pad_r());
      return without_strided_jit_1x1(
          Prim::primitive_desc(desc, dnnl_user_scratchpad_attr(), dnnl_engine(),
                               forward_pd(d, false, l, in)),
          d);
    };
    auto pd = first_unpadded(
        make, [](const auto& p) { return std::pair(p.diff_src_desc(), p.diff_dst_desc()); });
    return std::make_shared<const Cached<Prim>>(
        Cached<Prim>{pd, Prim(pd), dnnl_input_boundary(image_md(d.dst(), dy), pd.diff_dst_desc()),
                     dnnl_input_boundary(d.weights(), pd.weights_desc()),
                     dnnl_output_boundary(image_md(d.src(), block), pd.diff_src_desc())});
  });
  Tensor dx = image_tensor(d.src(), block, dy.device());
  DnnlRun run(dy.device());
  run.input(DNNL_ARG_DIFF_DST, e->a, dy);
  run.input(DNNL_ARG_WEIGHTS, e->b, w);
  run.output(DNNL_ARG_DIFF_SRC, e->c, dx);
  run.execute(e->prim, e->pd.scratchpad_desc());
  return dx;
}

// Backward weights: a = src, b = diff_dst (inputs), c = diff_weights (output, accumulated).
// oneDNN overwrites its outputs while Mirror accumulates gradients, so dw and dbias are written
// by reorders with a sum post-op.
struct CachedBackwardWeights : Cached<dnnl::convolution_backward_weights> {
  DnnlBoundary bias;
};

void conv_backward_weights_dnnl(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                                const ConvDims& d) {
  using Prim = dnnl::convolution_backward_weights;
  static PrimitiveCache<std::shared_ptr<const CachedBackwardWeights>> cache;
  const bool with_bias = dbias.defined();
  const dt in = input_type();
  auto e = cache.get(d.key("bwd_w", with_bias, in) + layout_key({&x, &dy}, 0), [&] {
    auto make = [&](Layouts l) {
      const auto alg = dnnl::algorithm::convolution_direct;
      const auto src = activation(d.src(), l, in), weights = weights_in(d.weights(), l),
                 dst = activation(d.dst(), l, in);
      auto desc = with_bias ? Prim::desc(alg, src, weights, d.bias(), dst, d.strides(), d.pad_l(),
                                         d.pad_r())
                            : Prim::desc(alg, src, weights, dst, d.strides(), d.pad_l(), d.pad_r());
      return without_strided_jit_1x1(
          Prim::primitive_desc(desc, dnnl_user_scratchpad_attr(), dnnl_engine(),
                               forward_pd(d, with_bias, l, in)),
          d);
    };
    auto pd = first_unpadded(
        make, [](const auto& p) { return std::pair(p.src_desc(), p.diff_dst_desc()); });
    CachedBackwardWeights c{{pd, Prim(pd), dnnl_input_boundary(image_md(d.src(), x), pd.src_desc()),
                             dnnl_input_boundary(image_md(d.dst(), dy), pd.diff_dst_desc()),
                             dnnl_output_boundary(d.weights(), pd.diff_weights_desc(), true)},
                            {}};
    if (with_bias) c.bias = dnnl_output_boundary(d.bias(), pd.diff_bias_desc(), true);
    return std::make_shared<const CachedBackwardWeights>(std::move(c));
  });
  DnnlRun run(x.device());
  run.input(DNNL_ARG_SRC, e->a, x);
  run.input(DNNL_ARG_DIFF_DST, e->b, dy);
  run.output(DNNL_ARG_DIFF_WEIGHTS, e->c, dw);
  if (with_bias) run.output(DNNL_ARG_DIFF_BIAS, e->bias, dbias);
  run.execute(e->prim, e->pd.scratchpad_desc());
}

// ---------------------------------------------------------------- reference loops (float64)

template <class T>
Tensor conv_forward_ref(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvDims& d) {
  Tensor y = Tensor::empty({d.n, d.o, d.oh, d.ow}, x.dtype(), x.device());
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  T* yp = y.data<T>();
  const auto& g = d.g;
#pragma omp parallel for schedule(static) if (d.macs() > kParallelGrain)
  for (std::int64_t no = 0; no < d.n * d.o; ++no) {
    const std::int64_t n = no / d.o, o = no % d.o, c0 = o / d.og * d.cg;  // its group's channels
    for (std::int64_t oh = 0; oh < d.oh; ++oh) {
      for (std::int64_t ow = 0; ow < d.ow; ++ow) {
        double acc = bp ? bp[o] : 0.0;
        for (std::int64_t c = c0; c < c0 + d.cg; ++c) {
          for (std::int64_t i = 0; i < d.kh; ++i) {
            const std::int64_t ih = oh * g.stride_h - g.pad_top + i;
            if (ih < 0 || ih >= d.h) continue;
            for (std::int64_t j = 0; j < d.kw; ++j) {
              const std::int64_t iw = ow * g.stride_w - g.pad_left + j;
              if (iw < 0 || iw >= d.w) continue;
              acc += xp[((n * d.c + c) * d.h + ih) * d.w + iw] *
                     wp[((o * d.cg + c - c0) * d.kh + i) * d.kw + j];
            }
          }
        }
        yp[(no * d.oh + oh) * d.ow + ow] = static_cast<T>(acc);
      }
    }
  }
  return y;
}

/// Gather form: dx[n,c,ih,iw] = sum over (o, i, j) with ih = oh*sh - pt + i of dy * w.
template <class T>
Tensor conv_backward_data_ref(const Tensor& dy, const Tensor& w, DType dtype, const ConvDims& d) {
  Tensor dx = Tensor::empty({d.n, d.c, d.h, d.w}, dtype, dy.device());
  const T* dyp = dy.data<T>();
  const T* wp = w.data<T>();
  T* dxp = dx.data<T>();
  const auto& g = d.g;
#pragma omp parallel for schedule(static) if (d.macs() > kParallelGrain)
  for (std::int64_t nc = 0; nc < d.n * d.c; ++nc) {
    const std::int64_t n = nc / d.c, c = nc % d.c, o0 = c / d.cg * d.og;  // its group's outputs
    for (std::int64_t ih = 0; ih < d.h; ++ih) {
      for (std::int64_t iw = 0; iw < d.w; ++iw) {
        double acc = 0;
        for (std::int64_t i = 0; i < d.kh; ++i) {
          const std::int64_t th = ih + g.pad_top - i;
          if (th < 0 || th % g.stride_h != 0 || th / g.stride_h >= d.oh) continue;
          for (std::int64_t j = 0; j < d.kw; ++j) {
            const std::int64_t tw = iw + g.pad_left - j;
            if (tw < 0 || tw % g.stride_w != 0 || tw / g.stride_w >= d.ow) continue;
            for (std::int64_t o = o0; o < o0 + d.og; ++o) {
              acc += dyp[((n * d.o + o) * d.oh + th / g.stride_h) * d.ow + tw / g.stride_w] *
                     wp[((o * d.cg + c % d.cg) * d.kh + i) * d.kw + j];
            }
          }
        }
        dxp[(nc * d.h + ih) * d.w + iw] = static_cast<T>(acc);
      }
    }
  }
  return dx;
}

template <class T>
void conv_backward_weights_ref(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& dbias,
                               const ConvDims& d) {
  const T* xp = x.data<T>();
  const T* dyp = dy.data<T>();
  T* dwp = dw.data<T>();
  const auto& g = d.g;
#pragma omp parallel for schedule(static) if (d.macs() > kParallelGrain)
  for (std::int64_t oc = 0; oc < d.o * d.cg; ++oc) {
    const std::int64_t o = oc / d.cg, c = o / d.og * d.cg + oc % d.cg;  // in its group
    for (std::int64_t i = 0; i < d.kh; ++i) {
      for (std::int64_t j = 0; j < d.kw; ++j) {
        double acc = 0;
        for (std::int64_t n = 0; n < d.n; ++n) {
          for (std::int64_t oh = 0; oh < d.oh; ++oh) {
            const std::int64_t ih = oh * g.stride_h - g.pad_top + i;
            if (ih < 0 || ih >= d.h) continue;
            for (std::int64_t ow = 0; ow < d.ow; ++ow) {
              const std::int64_t iw = ow * g.stride_w - g.pad_left + j;
              if (iw < 0 || iw >= d.w) continue;
              acc += dyp[((n * d.o + o) * d.oh + oh) * d.ow + ow] *
                     xp[((n * d.c + c) * d.h + ih) * d.w + iw];
            }
          }
        }
        dwp[(oc * d.kh + i) * d.kw + j] += static_cast<T>(acc);
      }
    }
  }
  if (!dbias.defined()) return;
  T* dbp = dbias.data<T>();
  for (std::int64_t o = 0; o < d.o; ++o) {
    double acc = 0;
    for (std::int64_t n = 0; n < d.n; ++n) {
      const T* plane = dyp + (n * d.o + o) * d.oh * d.ow;
      for (std::int64_t k = 0; k < d.oh * d.ow; ++k) acc += plane[k];
    }
    dbp[o] += static_cast<T>(acc);
  }
}

/// The reference loops read plain NCHW; only the float32 primitives make blocked images.
void require_plain(const Tensor& t, const char* op) {
  MIRROR_CHECK(ops::image_block(t) == 0, InvalidArgument,
               std::string(op) + ": the reference loops take plain NCHW, got " + t.str());
}

/// dispatch.cpp compares only some dtypes; mixing float32 and float64 here would misread memory.
/// A bfloat16 operand stands in for float32 (Note [Convolution operands]).
void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  const DType want = is_operand(a) ? DType::kFloat32 : a.dtype();
  if (b.defined() && !(is_operand(b) && want == DType::kFloat32))
    require_dtype(b, want, op, "every tensor (like the first)");
}

/// Under mixed_float16 the inputs are rounded to fp16 (Note [CPU fp16 emulation]); a bfloat16
/// operand made under another math mode has no place there.
Tensor half_input(const Tensor& t, const char* op) {
  MIRROR_CHECK(!is_operand(t), InvalidArgument,
               std::string(op) + ": a bfloat16 operand " + t.str() +
                   " under mixed_float16 math (make operands under the math mode that uses them)");
  return round_to_half(t);
}

constexpr std::int64_t kOperandBlock = 16;  // nChw16c: the bfloat16 primitives' layout

}  // namespace

Tensor CpuKernels::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                  const ops::Conv2DGeometry& g) {
  return conv2d_forward_blocked(x, w, bias, g, ops::Activation::kIdentity, false);
}

Tensor CpuKernels::conv2d_forward_blocked(const Tensor& x, const Tensor& w, const Tensor& bias,
                                          const ops::Conv2DGeometry& g, ops::Activation act,
                                          bool blocked_out) {
  require_same_dtype(w, x, "conv2d_forward");
  require_same_dtype(w, bias, "conv2d_forward");
  const ConvDims d(ops::image_shape(x), w.shape(), g);
  const bool relu = act == ops::Activation::kRelu;
  Tensor y = with_float(w, "conv2d_forward", [&](auto t) -> Tensor {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      try {
        if (math_mode() == MathMode::kFloat16)
          return conv_forward_dnnl(half_input(x, "conv2d_forward"), round_to_half(w), bias, d, relu,
                                   blocked_out);
        return conv_forward_dnnl(x, w, bias, d, relu, blocked_out);
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "conv2d_forward " + x.str() + " * " + w.str());
      }
    } else {
      require_plain(x, "conv2d_forward");
      Tensor plain = conv_forward_ref<T>(x, w, bias, d);
      return relu ? activation_forward(act, plain) : plain;
    }
  });
  // ReLU ran as the primitive's post-op (or above); the others are element-wise on either layout.
  if (act == ops::Activation::kIdentity || relu) return y;
  return activation_forward(act, y);
}

Tensor CpuKernels::conv2d_backward_data(const Tensor& dy, const Tensor& w, const Shape& x_shape,
                                        const ops::Conv2DGeometry& g) {
  return conv2d_backward_data_blocked(dy, w, x_shape, g, 0);
}

Tensor CpuKernels::conv2d_backward_data_blocked(const Tensor& dy, const Tensor& w,
                                                const Shape& x_shape, const ops::Conv2DGeometry& g,
                                                std::int64_t block) {
  require_same_dtype(w, dy, "conv2d_backward_data");
  const ConvDims d(x_shape, w.shape(), g);
  const Shape dy_shape = ops::image_shape(dy);
  MIRROR_CHECK(dy_shape[2] == d.oh && dy_shape[3] == d.ow, InvalidArgument,
               "conv2d_backward_data: dy " + dy.str() + " does not match the output size of x " +
                   shape_str(x_shape) + " and kernel " + w.str());
  return with_float(w, "conv2d_backward_data", [&](auto t) -> Tensor {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      try {
        if (math_mode() == MathMode::kFloat16)
          return conv_backward_data_dnnl(half_input(dy, "conv2d_backward_data"), round_to_half(w),
                                         d, block);
        return conv_backward_data_dnnl(dy, w, d, block);
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "conv2d_backward_data dy " + dy.str() + ", kernel " + w.str());
      }
    } else {
      require_plain(dy, "conv2d_backward_data");
      MIRROR_CHECK(block == 0, InvalidArgument,
                   "conv2d_backward_data: float64 images are never blocked");
      return conv_backward_data_ref<T>(dy, w, dy.dtype(), d);
    }
  });
}

void CpuKernels::conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw,
                                         Tensor& dbias, const ops::Conv2DGeometry& g) {
  require_same_dtype(dw, x, "conv2d_backward_weights");
  require_same_dtype(dw, dy, "conv2d_backward_weights");
  require_same_dtype(dw, dbias, "conv2d_backward_weights");
  MIRROR_CHECK(
      !dbias.defined() || (dbias.rank() == 1 && dbias.dim(0) == dw.dim(0)), InvalidArgument,
      "conv2d_backward_weights: dbias " + dbias.str() + " does not match kernel " + dw.str());
  const ConvDims d(ops::image_shape(x), dw.shape(), g);
  const Shape dy_shape = ops::image_shape(dy);
  MIRROR_CHECK(dy_shape[2] == d.oh && dy_shape[3] == d.ow && dy_shape[0] == d.n, InvalidArgument,
               "conv2d_backward_weights: dy " + dy.str() + " does not match x " + x.str() +
                   " and kernel " + dw.str());
  with_float(dw, "conv2d_backward_weights", [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, float>) {
      try {
        if (math_mode() == MathMode::kFloat16) {
          conv_backward_weights_dnnl(half_input(x, "conv2d_backward_weights"),
                                     half_input(dy, "conv2d_backward_weights"), dw, dbias, d);
          return;
        }
        conv_backward_weights_dnnl(x, dy, dw, dbias, d);
      } catch (const dnnl::error& e) {
        rethrow_dnnl(e, "conv2d_backward_weights x " + x.str() + ", dy " + dy.str());
      }
    } else {
      require_plain(x, "conv2d_backward_weights");
      require_plain(dy, "conv2d_backward_weights");
      conv_backward_weights_ref<T>(x, dy, dw, dbias, d);
    }
  });
}

Tensor CpuKernels::conv2d_operand(const Tensor& t) {
  if (math_mode() != MathMode::kBFloat16 || t.dtype() != DType::kFloat32) return t;
  const Shape s = ops::image_shape(t);
  if (s[1] % kOperandBlock != 0) return t;  // the primitives pick another layout: nothing to gain
  const dnnl::memory::desc plain{{s[0], s[1], s[2], s[3]}, dt::f32, tag::nchw};
  static PrimitiveCache<std::shared_ptr<const DnnlBoundary>> cache;
  const std::int64_t from_block = ops::image_block(t);
  std::string key = "operand";
  for (std::int64_t v : s) key += "," + std::to_string(v);
  const auto boundary = cache.get(key + "," + std::to_string(from_block), [&] {
    return std::make_shared<const DnnlBoundary>(
        dnnl_input_boundary(image_md(plain, from_block), image_md(plain, kOperandBlock, dt::bf16)));
  });
  Tensor out = Tensor::empty({s[0], s[1] / kOperandBlock, s[2], s[3], kOperandBlock},
                             DType::kBFloat16, t.device());
  try {
    DnnlRun(t.device()).reorder(*boundary, t, out);
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "conv2d_operand " + t.str());
  }
  return out;
}

}  // namespace mirror::cpu
