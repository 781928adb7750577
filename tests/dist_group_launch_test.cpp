// finish_group / wait_refusal (distributed/comm_teardown.h) through a recording double of the
// calls that end a group of collectives: Note [Failed group launch], with no GPU and no NCCL.
// The double plays the communicators: aborting one aborts every communicator created with it
// (its clique) once, and a Work's buffers count as "in use by NCCL" until they are released or
// kept, so a release before the abort of every communicator is caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "distributed/comm_teardown.h"

namespace mirror::dist::detail {
namespace {

/// Works 1..4 issued in one group on communicators 10, 20, 11, 21; communicators 10, 11, 12 were
/// created together (one clique), 20, 21 another.
struct RecordingGroup {
  using Work = int;
  std::map<int, int> comm_of{{1, 10}, {2, 20}, {3, 11}, {4, 21}};
  std::map<int, int> clique_of{{10, 1}, {11, 1}, {12, 1}, {20, 2}, {21, 2}};
  std::map<int, std::string> comm_error;  // failed communicators and their error
  std::set<int> recorded;
  std::set<std::string> fail;  // calls that return an error ("record 2", "release 3")
  std::vector<std::string> log;
  // A buffer released while a communicator of the group still runs (NCCL may still write it).
  int released_under_live_comm = 0;

  std::string result(const std::string& call) {
    log.push_back(call);
    return fail.count(call) ? "invalid resource handle (" + call + ")" : "";
  }
  void launched(int w) {
    log.push_back("launched " + std::to_string(w));
    recorded.insert(w);
  }
  void abort(int w, const std::string& why) {
    const int clique = clique_of.at(comm_of.at(w));
    for (const auto& [comm, q] : clique_of) {
      if (q != clique || comm_error.count(comm)) continue;  // idempotent, like NcclClique::abort
      log.push_back("abort " + std::to_string(comm));
      comm_error[comm] = why;
    }
  }
  std::string record(int w) {
    std::string r = result("record " + std::to_string(w));
    if (r.empty()) recorded.insert(w);
    return r;
  }
  std::string release(int w) {
    std::string r = result("release " + std::to_string(w));
    if (r.empty()) {
      for (const auto& [work, comm] : comm_of) {
        if (!comm_error.count(comm)) ++released_under_live_comm;
      }
    }
    return r;
  }
  void keep(int w, const std::string& why) {
    log.push_back("keep " + std::to_string(w) + ": " + why);
  }
  /// What wait() on work `w` reports, as NcclWork::wait() decides it.
  std::string wait(int w) {
    const auto it = comm_error.find(comm_of.at(w));
    return wait_refusal(it == comm_error.end() ? "" : it->second, recorded.count(w) > 0,
                        "all_reduce 'bucket " + std::to_string(w) + "'");
  }
};

const std::vector<int> kWorks{1, 2, 3, 4};

std::string finish(RecordingGroup& g, const std::string& error) {
  return finish_group<RecordingGroup>(g, kWorks, "ncclGroupEnd", error);
}

/// Position of the first log entry starting with `prefix` (log size if none).
std::size_t first(const std::vector<std::string>& log, const std::string& prefix) {
  const auto it = std::find_if(log.begin(), log.end(),
                               [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
  return static_cast<std::size_t>(it - log.begin());
}

/// Position of the last log entry starting with `prefix` (log size if none).
std::size_t last(const std::vector<std::string>& log, const std::string& prefix) {
  for (std::size_t i = log.size(); i-- > 0;) {
    if (log[i].rfind(prefix, 0) == 0) return i;
  }
  return log.size();
}

TEST(GroupLaunch, ALaunchedGroupTracksEveryWorkAndAbortsNothing) {
  RecordingGroup g;
  EXPECT_EQ(finish(g, ""), "");
  EXPECT_EQ(g.log,
            (std::vector<std::string>{"launched 1", "launched 2", "launched 3", "launched 4"}));
  for (int w : kWorks) EXPECT_EQ(g.wait(w), "") << w;
}

TEST(GroupLaunch, AFailedGroupAbortsEveryCommunicatorBeforeAnyBufferIsReleased) {
  RecordingGroup g;
  const std::string error = finish(g, "unhandled cuda error (run with NCCL_DEBUG=INFO)");
  // Every communicator of the group, with those created together with it (12 took no part).
  std::set<int> aborted;
  for (const auto& [comm, why] : g.comm_error) aborted.insert(comm);
  EXPECT_EQ(aborted, (std::set<int>{10, 11, 12, 20, 21}));
  // All aborts first; then each Work is recorded after the abort and only then released.
  ASSERT_LT(last(g.log, "abort "), first(g.log, "record ")) << ::testing::PrintToString(g.log);
  ASSERT_LT(last(g.log, "abort "), first(g.log, "release ")) << ::testing::PrintToString(g.log);
  EXPECT_EQ(g.released_under_live_comm, 0);
  for (int w : kWorks) {
    const std::string n = std::to_string(w);
    EXPECT_EQ(first(g.log, "release " + n), first(g.log, "record " + n) + 1) << n;
  }
  EXPECT_EQ(first(g.log, "keep "), g.log.size());
  // The error names the failed call, for the caller and for every wait() on the group's Works.
  EXPECT_EQ(error,
            "a collective group failed to launch (ncclGroupEnd: unhandled cuda error (run with "
            "NCCL_DEBUG=INFO))");
  for (int w : kWorks) EXPECT_EQ(g.wait(w), error) << w;
}

TEST(GroupLaunch, AWorkThatCannotBeOrderedKeepsItsBuffers) {
  RecordingGroup g;
  g.fail = {"record 2", "release 3"};
  const std::string error = finish(g, "internal error");
  EXPECT_EQ(
      g.log,
      (std::vector<std::string>{
          "abort 10", "abort 11", "abort 12", "abort 20", "abort 21", "record 1", "release 1",  //
          "record 2", "keep 2: invalid resource handle (record 2)", "record 3", "release 3",
          "keep 3: invalid resource handle (release 3)", "record 4", "release 4"}));
  EXPECT_NE(error.find("ncclGroupEnd: internal error"), std::string::npos) << error;
  // wait() reports the failed launch, not "never launched", also for the unrecorded Work 2.
  EXPECT_EQ(g.wait(2), error);
}

TEST(GroupLaunch, AFailedEmptyGroupStillReportsTheError) {
  RecordingGroup g;
  const std::vector<int> none;
  EXPECT_EQ(finish_group<RecordingGroup>(g, none, "ncclGroupEnd", "invalid usage"),
            "a collective group failed to launch (ncclGroupEnd: invalid usage)");
  EXPECT_TRUE(g.log.empty());
}

TEST(GroupLaunch, WaitingOnAWorkOfAnOpenGroupIsRefusedWithTheRemedy) {
  EXPECT_EQ(wait_refusal("", true, "broadcast"), "");
  const std::string refusal = wait_refusal("", false, "all_reduce 'step 3'");
  EXPECT_NE(refusal.find("NCCL all_reduce 'step 3' was never launched"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("end the group before waiting"), std::string::npos) << refusal;
  // A failed communicator's error comes first: it names the cause.
  EXPECT_EQ(wait_refusal("NCCL communicator on cuda:1 aborted: x", false, "all_reduce"),
            "NCCL communicator on cuda:1 aborted: x");
}

}  // namespace
}  // namespace mirror::dist::detail
