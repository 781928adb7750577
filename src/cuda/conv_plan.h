// defines: ConvPlan, make_conv_plan and run_conv_plan, convolutions through cuDNN's graph API
// (the backend descriptors of cudnn_graph.h) with one execution plan per problem, made once.
//
// Note [Convolution plans]: cuDNN 9 implements the legacy calls (cudnnConvolutionForward and
// friends) on its graph API and pays for it on the host at every call: on an H100, 80 to 150 us
// per call, as long as a small convolution runs, so the ResNet's GPU step (54 convolution calls)
// was bound by the host. A graph-API execution plan is made once per problem shape, direction and
// math mode (ConvAlgo::plan, conv.cpp's cache) and each call only hands cuDNN a variant pack of
// pointers. The engine is chosen as the legacy algorithm was (Note [Algorithm choice]): cuDNN's
// heuristics (mode A) rank the engines, one qualifies when it is deterministic, its math is
// allowed by the math mode in force (read from its numerical notes: engine_candidate in
// algo_choice.h) and it is not runtime-compiled, and the first qualifying one whose plan
// finalizes and whose workspace fits what the allocator can give wins. When none does (or the
// problem is grouped, or MIRROR_CUDNN_LEGACY=1), conv.cpp runs the legacy API as before.
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/algo_choice.h"

namespace mirror::cuda {

/// The problem as cuDNN's graph sees it: float32 NCHW x [n, c, h, w], filter [o, c, kh, kw],
/// y [n, o, oh, ow], all packed and 16-byte aligned, symmetric padding.
struct ConvPlanProblem {
  std::int64_t n, c, h, w, o, kh, kw, oh, ow;
  std::int64_t stride_h, stride_w, pad_h, pad_w;
};

/// The direction, as conv.cpp numbers it: forward y = x * w; backward data dx = dy *^T w;
/// backward filter dw += x *^T dy (accumulates: beta 1).
enum ConvPlanDirection { kPlanForward = 0, kPlanBackwardData = 1, kPlanBackwardFilter = 2 };

struct ConvPlan {
  std::shared_ptr<void> plan;  // null: no qualifying engine (conv.cpp takes the legacy API)
  std::size_t workspace = 0;   // bytes the plan needs
  std::string name;            // "engine 12 (TF32)", for notes
  std::string note;            // a faster qualifying engine was skipped for its workspace
  std::string why;             // without a plan: why not (MIRROR_CUDNN_LOG=1 prints it)
};

/// Note [Convolution plans]: the plan cuDNN's heuristics rank first among the qualifying
/// engines whose workspace fits in `budget` bytes. Throws only on errors of Mirror's own making
/// (a descriptor cuDNN refuses to create); an unsupported problem returns a null plan.
ConvPlan make_conv_plan(cudnnHandle_t handle, const ConvPlanProblem& p, ConvPlanDirection dir,
                        MathAllowance allowed, std::size_t budget);

/// Runs `plan` (ConvPlan::plan) on the handle's stream: x, w and y are the direction's three
/// operands in that order (forward x, w, y; backward data dx, w, dy; backward filter x, dw, dy).
void run_conv_plan(cudnnHandle_t handle, const std::shared_ptr<void>& plan, void* x, void* w,
                   void* y, void* workspace);

/// False when MIRROR_CUDNN_LEGACY=1 asks for the legacy API everywhere.
bool conv_plans_enabled();
/// MIRROR_CUDNN_LOG=1: conv.cpp prints each shape's choice (plan or legacy algorithm) once.
bool conv_choice_log();

}  // namespace mirror::cuda
