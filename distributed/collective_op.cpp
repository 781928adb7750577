// The collective name table and the one argument check (Note [One collective check]).
#include "distributed/collective_op.h"

#include <array>

#include "distributed/collective_util.h"
#include "mirror/error.h"

namespace mirror::dist::detail {
namespace {

constexpr std::array<const char*, 4> kNames = {"all_reduce", "broadcast", "all_gather", "barrier"};

bool reducible(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string home_str(const TensorHome& home) {
  if (home.type == DeviceType::kCpu) return "the CPU";
  return home.index < 0 ? std::string("a GPU") : Device::cuda(home.index).str();
}

void check_home(const std::string& what, const TensorHome& home, const char* role,
                const Tensor& t) {
  MIRROR_CHECK(t.defined(), InvalidArgument, what + ": the " + role + " tensor is undefined");
  if (home.holds(t.device())) return;
  throw InvalidArgument(
      what + ": the " + role + " tensor " + t.str() + " is not on " + home_str(home) +
      (home.type == DeviceType::kCpu
           ? "; this communicator moves CPU tensors (use the NCCL communicator for GPU tensors)"
           : "; each NCCL communicator moves the tensors of its own GPU"));
}

void check_all_reduce(const std::string& what, const Tensor& in, const Tensor& out, ReduceOp op) {
  MIRROR_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel(), InvalidArgument,
               what + ": input " + in.str() + " and output " + out.str() +
                   " must have the same dtype and element count");
  MIRROR_CHECK(reducible(in.dtype()), InvalidArgument,
               what + ": cannot reduce " + dtype_name(in.dtype()) +
                   " tensors; use float32, float64, float16, bfloat16, int32 or int64");
  MIRROR_CHECK(op != ReduceOp::kAvg || is_floating(in.dtype()), InvalidArgument,
               what + ": average of " + dtype_name(in.dtype()) +
                   " tensors would truncate; use ReduceOp::kSum and divide yourself");
  if (!same_memory(in, out) && in.nbytes() > 0) {
    const auto* a = static_cast<const char*>(in.raw_data());
    const auto* b = static_cast<const char*>(out.raw_data());
    const bool overlap = a < b + out.nbytes() && b < a + in.nbytes();
    MIRROR_CHECK(!overlap, InvalidArgument,
                 what +
                     ": input and output overlap without being the same memory; "
                     "pass the same tensor for in-place or disjoint tensors");
  }
}

}  // namespace

const char* collective_name(Collective op) { return kNames.at(static_cast<std::size_t>(op)); }

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "avg"; }

void check_collective(const std::string& who, const TensorHome& home, int size,
                      const CollectiveCall& call) {
  const std::string what = who + " " + collective_name(call.op);
  switch (call.op) {
    case Collective::kAllReduce:
      check_home(what, home, "input", *call.in);
      check_home(what, home, "output", *call.out);
      return check_all_reduce(what, *call.in, *call.out, call.reduce);
    case Collective::kBroadcast:
      check_home(what, home, "broadcast", *call.in);
      MIRROR_CHECK(call.root >= 0 && call.root < size, InvalidArgument,
                   what + ": root " + std::to_string(call.root) + " is not a replica (0.." +
                       std::to_string(size - 1) + ")");
      return;
    case Collective::kAllGather:
      check_home(what, home, "input", *call.in);
      check_home(what, home, "output", *call.out);
      MIRROR_CHECK(
          call.in->dtype() == call.out->dtype() && call.out->numel() == call.in->numel() * size,
          InvalidArgument,
          what + ": output " + call.out->str() + " must hold " + std::to_string(size) +
              " x input " + call.in->str() + " of the same dtype");
      return;
    case Collective::kBarrier:
      return;
  }
}

}  // namespace mirror::dist::detail
