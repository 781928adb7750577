// CommGate, take_all and settle_call (distributed/comm_gate.h, Note [Comm gate]) with stand-in
// communicators and real threads: no GPU, no NCCL. A stand-in communicator is "freed" by an
// abort (a flag, so a use after it is observed instead of being undefined behaviour); the tests
// play an abort while another thread is inside a call, an abort while a thread holds several
// gates through an open group, and the poll loop of a non-blocking call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/comm_gate.h"

namespace mirror::dist::detail {
namespace {

using namespace std::chrono_literals;

struct StandInComm {
  std::atomic<bool> freed{false};
};
using Gate = CommGate<StandInComm*>;

/// A one-shot flag threads can wait for.
class Flag {
 public:
  void set() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      set_ = true;
    }
    cv_.notify_all();
  }
  /// Waits for the flag (false when `limit` passed first: a regression, not a hang).
  bool wait(std::chrono::milliseconds limit = 20s) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return set_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool set_ = false;
};

/// The abort: takes the handles of `gates` and frees what it took.
std::vector<StandInComm*> abort_all(std::vector<Gate*> gates) {
  std::vector<StandInComm*> taken = take_all<StandInComm*>(std::span<Gate* const>(gates));
  for (StandInComm* c : taken) c->freed = true;
  return taken;
}

TEST(CommGate, AnAbortWhileAnotherThreadIsInACallWaitsForTheCallToReturn) {
  StandInComm comm;
  Gate gate(&comm);
  Flag in_call, abort_started;
  bool used_after_free = false;
  std::thread enqueuer([&] {
    EXPECT_TRUE(gate.with([&](StandInComm* c) {
      in_call.set();
      abort_started.wait();
      // An abort that did not wait for this call frees the comm about now.
      std::this_thread::sleep_for(20ms);
      used_after_free = c->freed;
    }));
  });
  ASSERT_TRUE(in_call.wait());
  std::vector<StandInComm*> taken;
  std::thread aborter([&] {
    abort_started.set();
    taken = abort_all({&gate});
  });
  enqueuer.join();
  aborter.join();
  EXPECT_FALSE(used_after_free) << "the abort freed the communicator under a running call";
  EXPECT_EQ(taken, std::vector<StandInComm*>{&comm});
  // After the abort no call reaches the freed communicator.
  bool called = false;
  EXPECT_FALSE(gate.with([&](StandInComm*) { called = true; }));
  EXPECT_FALSE(called);
  EXPECT_TRUE(abort_all({&gate}).empty()) << "a second abort finds nothing to free";
}

TEST(CommGate, ManyEnqueuesRacingAnAbortNeverTouchAFreedCommunicator) {
  for (int round = 0; round < 20; ++round) {
    StandInComm comm;
    Gate gate(&comm);
    std::atomic<int> used_after_free{0}, calls{0};
    std::atomic<bool> stop{false};
    std::thread enqueuer([&] {
      while (!stop) {
        gate.with([&](StandInComm* c) {
          ++calls;
          if (c->freed) ++used_after_free;
        });
      }
    });
    while (calls.load() < 50) std::this_thread::yield();
    abort_all({&gate});
    std::this_thread::sleep_for(1ms);  // the enqueuer keeps trying after the abort
    stop = true;
    enqueuer.join();
    EXPECT_EQ(used_after_free.load(), 0) << "round " << round;
  }
}

// A thread in an open group holds the gates of the communicators it issued collectives on, taken
// one by one (B first, then A), until the group's end. An abort of the clique {A, B} meanwhile
// must neither deadlock with it (an abort holding A while waiting for B would) nor free anything
// before the group's end.
TEST(CommGate, AnAbortOfACliqueWaitsForAnOpenGroupWithoutDeadlock) {
  StandInComm a_comm, b_comm;
  Gate a(&a_comm), b(&b_comm);
  Flag b_held, abort_started;
  bool deadlocked = false, freed_inside_group = false;
  std::thread group([&] {
    std::unique_lock<std::mutex> hold_b(b.calls());
    b_held.set();
    abort_started.wait();
    std::this_thread::sleep_for(20ms);  // the abort is now blocked or backing off
    // The group's next collective is on A: wait for A's gate (bounded, so a regression fails).
    std::unique_lock<std::mutex> hold_a(a.calls(), std::defer_lock);
    const auto limit = std::chrono::steady_clock::now() + 20s;
    while (!hold_a.try_lock()) {
      if (std::chrono::steady_clock::now() > limit) {
        deadlocked = true;
        return;  // lets go of B, so the test ends
      }
      std::this_thread::yield();
    }
    // ncclGroupEnd reads both communicators.
    freed_inside_group = a.get_locked()->freed || b.get_locked()->freed;
  });
  ASSERT_TRUE(b_held.wait());
  std::vector<StandInComm*> taken;
  std::thread aborter([&] {
    abort_started.set();
    taken = abort_all({&a, &b});
  });
  group.join();
  aborter.join();
  EXPECT_FALSE(deadlocked) << "the abort held one gate while waiting for another";
  EXPECT_FALSE(freed_inside_group);
  EXPECT_EQ(taken, (std::vector<StandInComm*>{&a_comm, &b_comm}));
}

// ---- settle_call: the poll loop of a non-blocking call (rule 3)

/// A clock the stand-in moves forward by one second per pause.
struct StepClock {
  using time_point = std::chrono::steady_clock::time_point;
  static inline time_point t{};
  static time_point now() { return t; }
};

struct StandInOps {
  using Comm = StandInComm*;
  std::vector<CallState> script;  // what successive polls see; the last one repeats
  int polls = 0, pauses = 0;
  Gate* abort_during_pause = nullptr;  // an abort between two polls
  CallState state(StandInComm* c) {
    EXPECT_FALSE(c->freed) << "polled a freed communicator";
    const CallState s =
        script.at(std::min<std::size_t>(static_cast<std::size_t>(polls), script.size() - 1));
    ++polls;
    return s;
  }
  void pause() {
    ++pauses;
    StepClock::t += 1s;
    if (abort_during_pause) abort_all({abort_during_pause});
  }
};

std::string settle(Gate& gate, StandInOps& ops, std::chrono::seconds limit) {
  StepClock::t = {};
  return settle_call<StandInOps, StepClock>(gate, ops, StepClock::t + limit, "ncclAllReduce");
}

TEST(CommGateSettle, PollsUntilTheCallFinished) {
  StandInComm comm;
  Gate gate(&comm);
  StandInOps ops;
  ops.script = {{true, ""}, {true, ""}, {true, ""}, {false, ""}};
  EXPECT_EQ(settle(gate, ops, 10s), "");
  EXPECT_EQ(ops.polls, 4);
  EXPECT_EQ(ops.pauses, 3);
}

TEST(CommGateSettle, ReportsTheCommunicatorsError) {
  StandInComm comm;
  Gate gate(&comm);
  StandInOps ops;
  ops.script = {{true, ""}, {false, "remote process exited or there was a network error"}};
  EXPECT_EQ(settle(gate, ops, 10s), "remote process exited or there was a network error");
}

TEST(CommGateSettle, GivesUpAtTheTimeout) {
  StandInComm comm;
  Gate gate(&comm);
  StandInOps ops;
  ops.script = {{true, ""}};  // a peer never arrives
  EXPECT_EQ(settle(gate, ops, 5s),
            "ncclAllReduce did not finish within the communicator's timeout");
  EXPECT_EQ(ops.pauses, 5) << "the timeout counts from the start, one pause per second here";
}

TEST(CommGateSettle, AnAbortBetweenTwoPollsEndsTheLoopWithoutTouchingTheCommunicator) {
  StandInComm comm;
  Gate gate(&comm);
  StandInOps ops;
  ops.script = {{true, ""}};
  ops.abort_during_pause = &gate;
  EXPECT_EQ(settle(gate, ops, 10s), "aborted");
  EXPECT_EQ(ops.polls, 1) << "no poll after the abort";
  EXPECT_TRUE(comm.freed);
}

}  // namespace
}  // namespace mirror::dist::detail
