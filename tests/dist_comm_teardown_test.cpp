// destroy_together / abort_together (distributed/comm_teardown.h) through a recording double of
// the NCCL calls: the grouping and order of Note [Grouped teardown], with no GPU and no NCCL.
// The double also plays NCCL's rule that a thread owning several ranks must group them: a
// finalize or abort made outside a group is recorded as a violation (where NCCL would hang).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "distributed/comm_teardown.h"

namespace mirror::dist::detail {
namespace {

/// Records every call ("start", "finalize 3", ...); `fail` makes the named calls return an error.
struct RecordingOps {
  using Comm = int;  // 0 is the null communicator
  std::vector<std::string> log;
  std::set<std::string> fail;
  int depth = 0;
  int violations = 0;  // finalize/abort of one of several ranks outside a group

  std::string result(const std::string& call) {
    log.push_back(call);
    return fail.count(call) ? "unhandled cuda error (" + call + ")" : "";
  }
  std::string group_start() {
    std::string r = result("start");
    if (r.empty()) ++depth;
    return r;
  }
  std::string group_end() {
    --depth;
    return result("end");
  }
  std::string collective(const char* what, int comm) {
    if (depth == 0) ++violations;
    return result(what + std::string(" ") + std::to_string(comm));
  }
  std::string finalize(int comm) { return collective("finalize", comm); }
  std::string settle(int comm) {
    if (depth != 0) ++violations;  // polling a finalize inside a group would never see it done
    return result("settle " + std::to_string(comm));
  }
  std::string destroy(int comm) { return result("destroy " + std::to_string(comm)); }
  std::string abort(int comm) { return collective("abort", comm); }
};

std::vector<int> eight() { return {1, 2, 3, 4, 5, 6, 7, 8}; }

std::vector<std::string> each(const std::string& call, const std::vector<int>& comms) {
  std::vector<std::string> out;
  for (int c : comms) out.push_back(call + " " + std::to_string(c));
  return out;
}

/// {"start", body..., "end"}
std::vector<std::string> group(const std::vector<std::string>& body) {
  std::vector<std::string> out{"start"};
  out.insert(out.end(), body.begin(), body.end());
  out.push_back("end");
  return out;
}

std::vector<std::string> then(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(CommTeardown, EightCommunicatorsAreFinalizedInOneGroupThenDestroyedInAnother) {
  RecordingOps ops;
  const std::vector<int> comms = eight();
  EXPECT_EQ(destroy_together<RecordingOps>(ops, comms, /*drained=*/true), "");
  // Non-blocking communicators: every finalize is waited for, outside any group, before the
  // destroys.
  EXPECT_EQ(ops.log, then(then(group(each("finalize", comms)), each("settle", comms)),
                          group(each("destroy", comms))));
  EXPECT_EQ(ops.violations, 0);
  EXPECT_EQ(ops.depth, 0);
}

TEST(CommTeardown, PendingWorkAbortsEveryCommunicatorInOneGroup) {
  RecordingOps ops;
  const std::vector<int> comms = eight();
  EXPECT_EQ(destroy_together<RecordingOps>(ops, comms, /*drained=*/false), "");
  EXPECT_EQ(ops.log, group(each("abort", comms)));
  EXPECT_EQ(ops.violations, 0);
}

TEST(CommTeardown, AbortTogetherGroupsEveryLiveCommunicator) {
  RecordingOps ops;
  const std::vector<int> comms{4, 0, 6};  // 0: already released, skipped
  EXPECT_EQ(abort_together<RecordingOps>(ops, comms), "");
  EXPECT_EQ(ops.log, group({"abort 4", "abort 6"}));
  EXPECT_EQ(ops.violations, 0);
}

TEST(CommTeardown, FailedFinalizeFallsBackToAGroupedAbortOfAll) {
  RecordingOps ops;
  ops.fail = {"finalize 3"};
  const std::vector<int> comms{1, 2, 3};
  const std::string errors = destroy_together<RecordingOps>(ops, comms, true);
  EXPECT_EQ(ops.log, then(group(each("finalize", comms)), group(each("abort", comms))));
  EXPECT_NE(errors.find("ncclCommFinalize: unhandled cuda error (finalize 3)"), std::string::npos)
      << errors;
  EXPECT_EQ(ops.violations, 0);
}

TEST(CommTeardown, FailedFinalizeGroupEndAlsoAborts) {
  RecordingOps ops;
  ops.fail = {"end"};  // every group end fails: the finalize group, then the abort group
  const std::vector<int> comms{1, 2};
  const std::string errors = destroy_together<RecordingOps>(ops, comms, true);
  EXPECT_EQ(ops.log, then(group(each("finalize", comms)), group(each("abort", comms))));
  EXPECT_NE(errors.find("ncclGroupEnd after finalize"), std::string::npos) << errors;
  EXPECT_NE(errors.find("ncclGroupEnd after abort"), std::string::npos) << errors;
}

TEST(CommTeardown, FailedDestroyIsReportedNeverAborted) {
  RecordingOps ops;
  ops.fail = {"destroy 1"};
  const std::vector<int> comms{1, 2};
  const std::string errors = destroy_together<RecordingOps>(ops, comms, true);
  EXPECT_EQ(ops.log, then(then(group(each("finalize", comms)), each("settle", comms)),
                          group(each("destroy", comms))));
  EXPECT_NE(errors.find("ncclCommDestroy: unhandled cuda error (destroy 1)"), std::string::npos)
      << errors;
}

TEST(CommTeardown, AGroupThatCannotOpenStillAbortsEveryCommunicator) {
  RecordingOps ops;
  ops.fail = {"start"};
  const std::vector<int> comms{1, 2};
  const std::string errors = destroy_together<RecordingOps>(ops, comms, true);
  // The finalize group cannot open, the abort group neither: the aborts are made one by one
  // (the last way out) and no unmatched group end is issued.
  EXPECT_EQ(ops.log, (std::vector<std::string>{"start", "start", "abort 1", "abort 2"}));
  EXPECT_NE(errors.find("ncclGroupStart before finalize"), std::string::npos) << errors;
  EXPECT_EQ(ops.depth, 0);
}

TEST(CommTeardown, OneCommunicatorStillGoesThroughTheGroups) {
  RecordingOps ops;
  const std::vector<int> comms{7};
  EXPECT_EQ(destroy_together<RecordingOps>(ops, comms, true), "");
  EXPECT_EQ(ops.log, then(group({"finalize 7"}), then({"settle 7"}, group({"destroy 7"}))));
}

TEST(CommTeardown, AFinalizeThatDoesNotSettleAbortsEveryCommunicator) {
  RecordingOps ops;
  ops.fail = {"settle 2"};  // a peer never finalized: the poll ran out of time
  const std::vector<int> comms{1, 2, 3};
  const std::string errors = destroy_together<RecordingOps>(ops, comms, true);
  EXPECT_EQ(ops.log, then(then(group(each("finalize", comms)), {"settle 1", "settle 2"}),
                          group(each("abort", comms))));
  EXPECT_NE(errors.find("finalizing: unhandled cuda error (settle 2)"), std::string::npos)
      << errors;
  EXPECT_EQ(ops.violations, 0);
}

}  // namespace
}  // namespace mirror::dist::detail
