// The collectives' shared name table and argument check (Note [One collective check]): the
// same rules and message shape for every communicator, the GPU home included (testable here
// without a GPU, since a CPU tensor is simply not on cuda:0).
#include <gtest/gtest.h>

#include <string>

#include "distributed/collective_op.h"
#include "mirror/error.h"

namespace mirror::dist::detail {
namespace {

std::string message_of(const TensorHome& home, int size, const CollectiveCall& call) {
  try {
    check_collective("comm", home, size, call);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(CollectiveOp, NamesAreOneTable) {
  EXPECT_STREQ(collective_name(Collective::kAllReduce), "all_reduce");
  EXPECT_STREQ(collective_name(Collective::kBroadcast), "broadcast");
  EXPECT_STREQ(collective_name(Collective::kAllGather), "all_gather");
  EXPECT_STREQ(collective_name(Collective::kBarrier), "barrier");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kAvg), "avg");
}

TEST(CollectiveOp, ValidCallsPass) {
  Tensor a = Tensor::zeros({4}), b = Tensor::zeros({4}), g = Tensor::zeros({12});
  EXPECT_NO_THROW(check_collective("c", TensorHome::cpu(), 3,
                                   {Collective::kAllReduce, &a, &a, ReduceOp::kAvg, 0}));
  EXPECT_NO_THROW(check_collective("c", TensorHome::cpu(), 3,
                                   {Collective::kAllReduce, &a, &b, ReduceOp::kSum, 0}));
  EXPECT_NO_THROW(check_collective("c", TensorHome::cpu(), 3,
                                   {Collective::kBroadcast, &a, nullptr, ReduceOp::kSum, 2}));
  EXPECT_NO_THROW(check_collective("c", TensorHome::cpu(), 3,
                                   {Collective::kAllGather, &a, &g, ReduceOp::kSum, 0}));
  EXPECT_NO_THROW(check_collective("c", TensorHome::cpu(), 3, {Collective::kBarrier}));
}

TEST(CollectiveOp, MessagesNameTheCommunicatorTheOpAndTheFix) {
  Tensor f = Tensor::zeros({4}), d = Tensor::zeros({4}, DType::kFloat64);
  Tensor i = Tensor::zeros({4}, DType::kInt32), u8 = Tensor::zeros({4}, DType::kUInt8);
  Tensor whole = Tensor::zeros({6});
  Tensor x = whole.view(0, {4}), y = whole.view(2, {4});
  const TensorHome cpu = TensorHome::cpu();
  std::string m = message_of(cpu, 2, {Collective::kAllReduce, &f, &d, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("comm all_reduce: input"), std::string::npos) << m;
  EXPECT_NE(m.find("same dtype and element count"), std::string::npos) << m;
  m = message_of(cpu, 2, {Collective::kAllReduce, &i, &i, ReduceOp::kAvg, 0});
  EXPECT_NE(m.find("would truncate"), std::string::npos) << m;
  m = message_of(cpu, 2, {Collective::kAllReduce, &u8, &u8, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("cannot reduce uint8"), std::string::npos) << m;
  m = message_of(cpu, 2, {Collective::kAllReduce, &x, &y, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("overlap"), std::string::npos) << m;
  m = message_of(cpu, 2, {Collective::kBroadcast, &f, nullptr, ReduceOp::kSum, 2});
  EXPECT_NE(m.find("comm broadcast: root 2 is not a replica (0..1)"), std::string::npos) << m;
  m = message_of(cpu, 2, {Collective::kAllGather, &f, &f, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("comm all_gather: output"), std::string::npos) << m;
  Tensor undefined;
  m = message_of(cpu, 2, {Collective::kBroadcast, &undefined, nullptr, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("undefined"), std::string::npos) << m;
}

TEST(CollectiveOp, GpuHomeRejectsTensorsElsewhere) {
  Tensor f = Tensor::zeros({4});
  const std::string m =
      message_of(TensorHome::gpu(0), 2, {Collective::kAllReduce, &f, &f, ReduceOp::kSum, 0});
  EXPECT_NE(m.find("is not on cuda:0"), std::string::npos) << m;
  EXPECT_FALSE(TensorHome::gpu(1).holds(Device::cuda(0)));
  EXPECT_TRUE(TensorHome::gpu(1).holds(Device::cuda(1)));
  EXPECT_TRUE(TensorHome::cpu().holds(Device::cpu(3)));
}

}  // namespace
}  // namespace mirror::dist::detail
