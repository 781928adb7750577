// Runtime: MPI life cycle, node-local ranks, bootstrap collectives, the abort path.
#include "mirror/distributed/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "distributed/runtime_internal.h"
#include "mirror/distributed/device_selection.h"
#include "mirror/error.h"

namespace mirror::dist {

namespace {

std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_created{false};
std::atomic<int> g_world_rank{-1};
/// Note [Liveness probe]: a dup of MPI_COMM_WORLD used only by unanswered_peers().
MPI_Comm g_liveness = MPI_COMM_NULL;

ThreadLevel to_level(int provided) {
  if (provided >= MPI_THREAD_MULTIPLE) return ThreadLevel::kMultiple;
  if (provided >= MPI_THREAD_SERIALIZED) return ThreadLevel::kSerialized;
  if (provided >= MPI_THREAD_FUNNELED) return ThreadLevel::kFunneled;
  return ThreadLevel::kSingle;
}

bool mpi_is_up() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::string host_name() {
  char buf[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  if (MPI_Get_processor_name(buf, &len) == MPI_SUCCESS && len > 0) return std::string(buf, len);
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

std::chrono::milliseconds timeout_from_env() {
  const char* text = std::getenv("MIRROR_COMM_TIMEOUT");
  if (!text || !*text) return std::chrono::seconds(600);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  MIRROR_CHECK(end && *end == '\0' && seconds > 0, InvalidArgument,
               std::string("MIRROR_COMM_TIMEOUT='") + text +
                   "': expected a positive number of seconds, e.g. 600");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

// Note [Open MPI defaults]: Open MPI's non-blocking all-reduce (coll/libnbc) picks, for fewer
// than 4 ranks and for every in-place call, a binomial reduce-then-broadcast that moves the
// whole buffer twice, one direction at a time; its blocking MPI_Allreduce uses a ring. Mirror's
// buckets are large and reduced in place, so the Runtime asks libnbc for its ring algorithm
// (bandwidth-optimal, each block reduced once and forwarded, so every rank gets the same bytes)
// unless the user set the parameter (OMPI_MCA_coll_libnbc_iallreduce_algorithm, or --mca).
// Environment defaults are read by MPI_Init, so this must run before it.
void set_open_mpi_defaults() {
#if defined(OPEN_MPI) && OPEN_MPI
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
#endif
}

/// A thread that runs `expire` (which must end the process) unless disarmed within `timeout`;
/// a timeout of 0 starts nothing. Note [Start-up watchdog] (runtime.h), Note [Finalize watchdog].
class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds timeout, std::function<void()> expire) {
    if (timeout.count() <= 0) return;
    thread_ = std::thread([this, timeout, expire = std::move(expire)] {
      std::unique_lock lock(mutex_);
      if (cv_.wait_for(lock, timeout, [this] { return disarmed_; })) return;
      expire();
    });
  }
  ~Watchdog() { disarm(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void disarm() {
    {
      std::lock_guard lock(mutex_);
      disarmed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

/// The test hook MIRROR_TEST_HANG_BEFORE_FINALIZE=RANK: that rank stops before MPI_Finalize and
/// never answers again, as a rank cut off by a partition at the end of a run does (its own
/// watchdog still ends it). Anything but a whole number is an error naming the variable.
void hang_before_finalize_if_asked(int rank) {
  const char* text = std::getenv("MIRROR_TEST_HANG_BEFORE_FINALIZE");
  if (!text || !*text) return;
  char* end = nullptr;
  const long which = std::strtol(text, &end, 10);
  if (!end || *end != '\0') {
    std::fprintf(stderr,
                 "[mirror rank %d] MIRROR_TEST_HANG_BEFORE_FINALIZE='%s' is ignored: expected "
                 "a rank number, e.g. 1\n",
                 rank, text);
    return;
  }
  if (which != rank) return;
  std::fprintf(stderr,
               "[mirror rank %d] MIRROR_TEST_HANG_BEFORE_FINALIZE: this rank stops before "
               "MPI_Finalize and answers no more, as if cut off by a partition\n",
               rank);
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h ^ s.size();
}

std::string shorten(const std::string& s) {
  if (s.size() <= 160) return s;
  return s.substr(0, 100) + "...(" + std::to_string(s.size()) + " chars)..." +
         s.substr(s.size() - 40);
}

}  // namespace

// ------------------------------------------------------------------ detail

namespace detail {

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return Clock::time_point::max();
  return Clock::now() + timeout;
}

void poll_until_done(MPI_Request& request, Clock::time_point deadline,
                     const std::function<void()>& on_timeout, const std::function<void()>& pause) {
  for (std::uint64_t polls = 0;; ++polls) {
    int flag = 0;
    {
      std::lock_guard lock(mpi_mutex());
      MIRROR_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE));
    }
    if (flag) return;
    if (Clock::now() >= deadline) {
      on_timeout();
      throw CommError("internal: a timeout handler returned");  // on_timeout must not return
    }
    // Open MPI progresses only inside MPI calls, so keep polling; yield lets compute threads
    // run on a busy machine.
    if (polls <= 32) continue;
    if (pause) {
      pause();
    } else {
      std::this_thread::yield();
    }
  }
}

int world_rank_or_unknown() { return g_world_rank.load(); }

void abort_with_line(const std::string& line) {
  // Several threads may time out together; the first one speaks and ends the job, the others
  // wait to be killed with it.
  static std::atomic<bool> aborting{false};
  if (aborting.exchange(true)) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  const int rank = world_rank_or_unknown();
  const std::string text =
      "[mirror rank " + (rank >= 0 ? std::to_string(rank) : std::string("?")) + "] " + line + "\n";
  std::fflush(stdout);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  // No mpi_mutex here: another thread may hold it, and aborting must never wait.
  if (mpi_is_up()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

std::string timeout_line(const std::string& op, const std::string& tag,
                         std::chrono::milliseconds timeout, const std::string& peers) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", static_cast<double>(timeout.count()) / 1000.0);
  return "collective " + op + " '" + tag + "' did not complete within " + secs +
         "s; peers: " + peers + " (a peer died, hangs, or issued a different collective)";
}

// Note [Liveness probe]
// A collective that times out says which peers are gone: every rank that times out sends one
// byte to every other rank on a communicator of its own and listens for theirs for
// kProbeWindow. The survivors of a lost node or a partition are all stuck in the same
// collective and time out within about a step of each other, so they hear each other; a rank
// that is dead, cut off, or busy elsewhere (a hang) stays silent and is named, grouped by node.
// Needs MPI_THREAD_MULTIPLE (the probe runs on a thread that may not take the MPI mutex, see
// abort_with_line); below that level, or with one rank, it says nothing. Runs once per process.
namespace {
std::string unanswered_peers(const Runtime& rt) {
  constexpr auto kProbeWindow = std::chrono::seconds(2);
  constexpr int kProbeTag = 7101;
  static std::once_flag once;
  static std::string verdict;
  std::call_once(once, [&] {
    const int n = rt.world_size(), me = rt.world_rank();
    if (g_liveness == MPI_COMM_NULL || n < 2 || rt.thread_level() != ThreadLevel::kMultiple) return;
    std::vector<char> heard(static_cast<std::size_t>(n), 0);
    const char ping = 1;
    std::vector<MPI_Request> recvs(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
    std::vector<MPI_Request> sends(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      MPI_Irecv(&heard[r], 1, MPI_CHAR, r, kProbeTag, g_liveness, &recvs[r]);
      MPI_Isend(&ping, 1, MPI_CHAR, r, kProbeTag, g_liveness, &sends[r]);
    }
    const auto deadline = Clock::now() + kProbeWindow;
    while (Clock::now() < deadline) {
      int all = 0;
      if (MPI_Testall(n, recvs.data(), &all, MPI_STATUSES_IGNORE) != MPI_SUCCESS || all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto& hosts = rt.impl().hosts;
    std::map<std::string, std::vector<int>> silent, ranks_of;  // by host
    for (int r = 0; r < n; ++r) {
      ranks_of[hosts[r]].push_back(r);
      int done = 1;
      if (r != me && recvs[r] != MPI_REQUEST_NULL) MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE);
      if (!done) silent[hosts[r]].push_back(r);
    }
    verdict = "; liveness probe (" + std::to_string(kProbeWindow.count()) + "s): ";
    if (silent.empty()) {
      verdict += "every rank answered (they are alive: one hangs or issued another collective)";
      return;
    }
    verdict += "no answer from";
    for (const auto& [host, ranks] : silent) {
      std::string list;
      for (int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
      verdict += " rank" + std::string(ranks.size() > 1 ? "s " : " ") + list + " on node " + host;
      verdict += ranks.size() == ranks_of[host].size()
                     ? " (all its ranks: node " + host + " is down or unreachable, or they hang);"
                     : " (dead, or alive outside this collective);";
    }
    verdict.pop_back();
  });
  return verdict;
}
}  // namespace

std::string world_peers() {
  Runtime* rt = g_runtime.load();
  if (!rt) return "";
  const auto& hosts = rt->impl().hosts;
  std::string s = std::to_string(hosts.size()) + " ranks:";
  for (std::size_t r = 0; r < hosts.size() && r < 16; ++r)
    s += " " + std::to_string(r) + "@" + hosts[r];
  if (hosts.size() > 16) s += " ...";
  return s + unanswered_peers(*rt);
}

[[noreturn]] void throw_mpi_error(int code, const char* expression,
                                  const std::source_location& where) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  int error_class = code;
  MPI_Error_class(code, &error_class);
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw ::mirror::detail::located(
      CommError("MPI call failed: " + std::string(expression) + ": " +
                (len ? std::string(text, len) : std::string("unknown MPI error")) +
                " (error class " + std::to_string(error_class) + ")"),
      where);
}

}  // namespace detail

// ------------------------------------------------------------------ Runtime

const char* thread_level_name(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::kSingle:
      return "single";
    case ThreadLevel::kFunneled:
      return "funneled";
    case ThreadLevel::kSerialized:
      return "serialized";
    case ThreadLevel::kMultiple:
      return "multiple";
  }
  return "?";
}

Runtime::Runtime(int& argc, char**& argv) : impl_(std::make_unique<Impl>()) {
  MIRROR_CHECK(!g_created.exchange(true), Error,
               "mirror::dist::Runtime created twice: create one per process, first thing in "
               "main(), and keep it alive (MPI cannot be initialized again after finalizing)");
  default_timeout_ = timeout_from_env();
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MIRROR_MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized) {
    impl_->owns_mpi = false;
    MIRROR_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    set_open_mpi_defaults();
    MIRROR_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  }
  thread_level_ = to_level(provided);
  MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MIRROR_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MIRROR_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  g_world_rank = world_rank_;
  if (thread_level_ < ThreadLevel::kSerialized) {
    if (impl_->owns_mpi) MPI_Finalize();
    throw Unavailable(std::string("MPI provides thread level ") + thread_level_name(thread_level_) +
                      ", Mirror needs at least serialized (its communicators call MPI from a "
                      "communication thread); use an MPI built with thread support");
  }
  MIRROR_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->control));
  MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(impl_->control, MPI_ERRORS_RETURN));
  MIRROR_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_liveness));  // Note [Liveness probe]
  MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(g_liveness, MPI_ERRORS_RETURN));
  MIRROR_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_,
                                       MPI_INFO_NULL, &impl_->local));
  MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(impl_->local, MPI_ERRORS_RETURN));
  MIRROR_MPI_CHECK(MPI_Comm_rank(impl_->local, &local_rank_));
  MIRROR_MPI_CHECK(MPI_Comm_size(impl_->local, &local_size_));
  host_ = host_name();
  impl_->hosts = all_gather_string(host_);
  node_count_ =
      static_cast<int>(std::set<std::string>(impl_->hosts.begin(), impl_->hosts.end()).size());
  g_runtime = this;
}

Runtime::~Runtime() {
  if (std::uncaught_exceptions() > 0 && world_size_ > 1) {
    detail::abort_with_line(
        "fatal: an exception is unwinding through mirror::dist::Runtime; aborting the job so "
        "the other ranks do not hang (wrap main in mirror::dist::run_main to see its message)");
  }
  g_runtime = nullptr;
  if (!mpi_is_up()) return;
  // Note [Finalize watchdog]: MPI_Finalize waits for every rank (Open MPI's closing fence), so
  // a rank that a partition cut off at the end of a run, or one that hangs, keeps every other
  // rank in it forever: no collective timeout applies any more, and after a partition mpirun
  // itself may wait for its lost daemon. The run's work is done by then (the last checkpoint
  // is written), so after --comm-timeout (default_timeout()) the rank says why and ends with
  // the program's own exit code (set_exit_code), without finishing MPI_Finalize; mpirun then
  // reports a rank that exited without finalizing and ends the job. One rank: nothing to wait
  // for, no watchdog.
  const int code = exit_code_, rank = world_rank_;
  const std::chrono::milliseconds limit = default_timeout_;
  Watchdog watchdog(impl_->owns_mpi && world_size_ > 1 ? limit : std::chrono::milliseconds(0),
                    [code, rank, limit] {
                      std::fprintf(stderr,
                                   "[mirror rank %d] MPI_Finalize did not finish within %g s: "
                                   "another rank is unreachable (a network partition) or hangs, "
                                   "and finalizing waits for every rank; this rank ends with "
                                   "exit code %d without it (--comm-timeout sets this limit)\n",
                                   rank, static_cast<double>(limit.count()) / 1000.0, code);
                      std::fflush(stderr);
                      std::fflush(stdout);
                      std::_Exit(code);
                    });
  if (impl_->owns_mpi) hang_before_finalize_if_asked(world_rank_);
  std::lock_guard lock(detail::mpi_mutex());
  if (impl_->local != MPI_COMM_NULL) MPI_Comm_free(&impl_->local);
  if (impl_->control != MPI_COMM_NULL) MPI_Comm_free(&impl_->control);
  if (g_liveness != MPI_COMM_NULL) MPI_Comm_free(&g_liveness);
  if (impl_->owns_mpi) MPI_Finalize();
}

Runtime& Runtime::get() {
  Runtime* rt = g_runtime.load();
  MIRROR_CHECK(rt != nullptr, Error,
               "no mirror::dist::Runtime exists: create one at the start of main() (or use "
               "mirror::dist::run_main) before creating MPI communicators");
  return *rt;
}

bool Runtime::active() { return g_runtime.load() != nullptr; }

std::string Runtime::describe() const {
  return "rank " + std::to_string(world_rank_) + "/" + std::to_string(world_size_) + " (local " +
         std::to_string(local_rank_) + "/" + std::to_string(local_size_) + " on " + host_ + ")";
}

void Runtime::set_default_timeout(std::chrono::milliseconds timeout) {
  MIRROR_CHECK(
      timeout.count() > 0, InvalidArgument,
      "communicator timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  default_timeout_ = timeout;
}

// ------------------------------------------------------------------ bootstrap collectives

namespace {

// Runs a started bootstrap request to completion or aborts the job after the timeout.
void finish_bootstrap(MPI_Request& request, const char* op, std::chrono::milliseconds timeout) {
  detail::poll_until_done(request, detail::deadline_after(timeout), [&] {
    detail::abort_with_line(detail::timeout_line(op, "bootstrap", timeout, detail::world_peers()));
  });
}

}  // namespace

void Runtime::barrier() {
  MPI_Request request;
  {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(MPI_Ibarrier(impl_->control, &request));
  }
  finish_bootstrap(request, "barrier", default_timeout_);
}

void Runtime::broadcast_bytes(std::span<std::byte> bytes, int root) {
  MIRROR_CHECK(root >= 0 && root < world_size_, InvalidArgument,
               "broadcast root " + std::to_string(root) + " is not a rank of a world of " +
                   std::to_string(world_size_));
  MIRROR_CHECK(bytes.size() <= static_cast<std::size_t>(detail::kMaxMpiCount), InvalidArgument,
               "broadcast_bytes: " + std::to_string(bytes.size()) +
                   " bytes is too large for "
                   "a bootstrap broadcast; use a Communicator");
  if (world_size_ == 1 || bytes.empty()) return;
  MPI_Request request;
  {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(MPI_Ibcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root,
                                impl_->control, &request));
  }
  finish_bootstrap(request, "broadcast", default_timeout_);
}

std::vector<std::byte> Runtime::all_gather_bytes(std::span<const std::byte> mine) {
  std::vector<std::byte> out(mine.size() * static_cast<std::size_t>(world_size_));
  MIRROR_CHECK(out.size() <= static_cast<std::size_t>(detail::kMaxMpiCount), InvalidArgument,
               "all_gather_bytes: too large for a bootstrap collective; use a Communicator");
  if (mine.empty()) return out;
  MPI_Request request;
  {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE,
                                    out.data(), static_cast<int>(mine.size()), MPI_BYTE,
                                    impl_->control, &request));
  }
  finish_bootstrap(request, "all_gather", default_timeout_);
  return out;
}

std::vector<std::string> Runtime::all_gather_string(const std::string& mine) {
  const auto lengths = all_gather_value<std::int64_t>(static_cast<std::int64_t>(mine.size()));
  std::vector<int> counts(lengths.size()), displs(lengths.size());
  std::int64_t total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    counts[r] = static_cast<int>(lengths[r]);
    displs[r] = static_cast<int>(total);
    total += lengths[r];
  }
  MIRROR_CHECK(total <= detail::kMaxMpiCount, InvalidArgument,
               "all_gather_string: " + std::to_string(total) + " bytes in all is too large");
  std::string all(static_cast<std::size_t>(total), '\0');
  if (total > 0) {
    MPI_Request request;
    {
      std::lock_guard lock(detail::mpi_mutex());
      MIRROR_MPI_CHECK(MPI_Iallgatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR,
                                       all.data(), counts.data(), displs.data(), MPI_CHAR,
                                       impl_->control, &request));
    }
    finish_bootstrap(request, "all_gather", default_timeout_);
  }
  std::vector<std::string> out(lengths.size());
  for (std::size_t r = 0; r < out.size(); ++r) out[r] = all.substr(displs[r], counts[r]);
  return out;
}

namespace {

/// The part of a long `s` around character `pos` (where two values first differ), so the
/// difference is never cut away.
std::string excerpt_at(const std::string& s, std::size_t pos) {
  if (s.size() <= 160) return s;
  const std::size_t from = pos > 60 ? pos - 60 : 0;
  const std::size_t to = std::min(s.size(), from + 120);
  return (from > 0 ? "..." : "") + s.substr(from, to - from) + (to < s.size() ? "..." : "") + " (" +
         std::to_string(s.size()) + " chars)";
}

/// When both values are JSON objects (configurations): "key 'lr' is 0.001 on rank 0 and 0.01
/// on rank 2", naming the first differing key in key order; empty otherwise.
std::string first_differing_key(const std::string& a, const std::string& b, std::size_t rank_b) {
  const auto ja = nlohmann::json::parse(a, nullptr, false);
  const auto jb = nlohmann::json::parse(b, nullptr, false);
  if (!ja.is_object() || !jb.is_object()) return "";
  std::set<std::string> keys;
  for (const auto& [k, v] : ja.items()) keys.insert(k);
  for (const auto& [k, v] : jb.items()) keys.insert(k);
  auto text = [](const nlohmann::json& j, const std::string& k) {
    return j.contains(k) ? shorten(j.at(k).dump()) : std::string("(absent)");
  };
  for (const auto& k : keys) {
    if (ja.contains(k) && jb.contains(k) && ja.at(k) == jb.at(k)) continue;
    return "key '" + k + "' is " + text(ja, k) + " on rank 0 and " + text(jb, k) + " on rank " +
           std::to_string(rank_b);
  }
  return "";
}

}  // namespace

void Runtime::check_same_across_ranks(const std::string& what, const std::string& value) {
  const auto hashes = all_gather_value<std::uint64_t>(fnv1a(value));
  bool same = true;
  for (auto h : hashes) same = same && h == hashes[0];
  if (same) return;
  const auto values = all_gather_string(value);
  std::size_t r = 1;
  while (r < values.size() && values[r] == values[0]) ++r;
  if (r == values.size()) return;  // hash differed only by collision of lengths; values agree
  const std::string advice =
      "; every rank must run the same program with the same flags, model and data";
  if (const std::string key = first_differing_key(values[0], values[r], r); !key.empty())
    throw CommError(what + " differs across ranks: " + key + advice);
  std::size_t pos = 0;
  while (pos < values[0].size() && pos < values[r].size() && values[0][pos] == values[r][pos])
    ++pos;
  throw CommError(what + " differs across ranks: rank 0 has '" + excerpt_at(values[0], pos) +
                  "', rank " + std::to_string(r) + " has '" + excerpt_at(values[r], pos) +
                  "' (first difference at character " + std::to_string(pos) + ")" + advice);
}

// ------------------------------------------------------------------ devices, start-up line

NodeGpuViews Runtime::node_gpu_views(const GpuReport& gpus) {
  // Note [Per-rank GPU binding] (device_selection.h): what every local rank sees, by identity.
  std::string mine;
  for (const GpuDevice& d : gpus.devices) mine += gpu_identity(d) + "\n";
  const auto all = all_gather_string(mine);
  MPI_Group local_group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MIRROR_MPI_CHECK(MPI_Comm_group(impl_->local, &local_group));
  MIRROR_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  std::vector<int> local_ranks(static_cast<std::size_t>(local_size_)), world(local_ranks.size());
  for (int r = 0; r < local_size_; ++r) local_ranks[static_cast<std::size_t>(r)] = r;
  const int status = MPI_Group_translate_ranks(local_group, local_size_, local_ranks.data(),
                                               world_group, world.data());
  MPI_Group_free(&local_group);
  MPI_Group_free(&world_group);
  MIRROR_MPI_CHECK(status);
  NodeGpuViews node;
  for (int w : world) {
    std::vector<std::string> ids;
    const std::string& text = all.at(static_cast<std::size_t>(w));
    for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
         start = end + 1)
      ids.push_back(text.substr(start, end - start));
    node.push_back(std::move(ids));
  }
  return node;
}

DeviceSelection Runtime::setup_devices(const DeviceRequest& request) {
  check_same_across_ranks("--devices", request.devices);
  check_same_across_ranks("memory policy", request.memory_policy);
  const GpuReport& gpus = discover_gpus();
  DeviceSelection selection =
      select_devices(request, local_rank_, local_size_, gpus, node_gpu_views(gpus));
  print_fallback_warnings(selection.warning);
  for (const Device& d : selection.devices) set_memory_policy(d, selection.memory_policy);
  const Device first = selection.devices.front();
  check_same_across_ranks("replicas per rank", std::to_string(selection.devices.size()) + " x " +
                                                   (first.is_cpu() ? "cpu" : "cuda"));
  log_startup(selection.devices, selection.cpu_fallback ? "CPU fallback" : "");
  return selection;
}

// Note [One fallback banner]: the CPU-fallback warning is loud (a framed banner) so that nobody
// misses it, but printed by every rank it became 6 lines times the ranks. Rank 0 prints each
// distinct warning once, with the ranks (grouped by host) that it is about: ranks on hosts with
// and without GPUs, or with different reasons, still get a banner each.
void Runtime::print_fallback_warnings(const std::string& mine) {
  const auto all = all_gather_string(host_ + "\n" + mine);
  if (world_rank_ != 0) return;
  std::vector<std::string> order;  // distinct warnings, by their first rank
  std::map<std::string, std::vector<std::pair<std::string, int>>> who;  // -> (host, rank)
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::size_t nl = all[r].find('\n');
    const std::string warning = all[r].substr(nl + 1);
    if (warning.empty()) continue;
    if (!who.count(warning)) order.push_back(warning);
    who[warning].emplace_back(all[r].substr(0, nl), static_cast<int>(r));
  }
  std::string text;
  for (const std::string& warning : order) {
    std::string ranks;  // "0, 1 on host a; 2 on host b"
    std::string host;
    for (const auto& [h, r] : who[warning]) {
      if (h != host && !host.empty())
        ranks += " on host " + host + "; ";
      else if (!host.empty())
        ranks += ", ";
      ranks += std::to_string(r);
      host = h;
    }
    ranks += " on host " + host;
    const std::size_t n = who[warning].size();
    std::string lines = warning;
    if (lines.back() != '\n') lines += '\n';
    // The ranks go right under the WARNING line (the banner's second).
    std::size_t at = lines.find('\n', lines.find('\n') + 1);
    at = at == std::string::npos ? 0 : at + 1;
    lines.insert(at, std::string(n == 1 ? "  rank: " : "  ranks: ") + ranks + " (" +
                         std::to_string(n) + " of " + std::to_string(all.size()) + ")\n");
    for (std::size_t start = 0, end; (end = lines.find('\n', start)) != std::string::npos;
         start = end + 1)
      text += "[mirror] " + lines.substr(start, end - start) + "\n";
  }
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void Runtime::log_startup(const std::vector<Device>& devices, const std::string& note) {
  std::string line = "[mirror] rank " + std::to_string(world_rank_) + "/" +
                     std::to_string(world_size_) + " local " + std::to_string(local_rank_) + "/" +
                     std::to_string(local_size_) + " host " + host_ + " devices ";
  for (std::size_t i = 0; i < devices.size(); ++i) line += (i ? "," : "") + devices[i].str();
  line += std::string(" (MPI thread level ") + thread_level_name(thread_level_) + ")";
  if (!note.empty()) line += " " + note;
  const auto lines = all_gather_string(line + "\n");
  if (world_rank_ != 0) return;
  std::string text;
  for (const auto& l : lines) text += l;
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void Runtime::abort_job(const std::string& message) {
  detail::abort_with_line("fatal: " + message);
}

// ------------------------------------------------------------------ run_main

namespace {

/// The rank before MPI knows it: the launcher's variable (Open MPI, PMIx, MPICH/Slurm PMI).
std::string launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name); v && *v) return v;
  }
  return "?";
}

}  // namespace

int run_main(int& argc, char**& argv, const std::function<int(Runtime&)>& body,
             const RunOptions& options) {
  auto fatal = [](const std::string& message) {
    const int rank = detail::world_rank_or_unknown();
    const std::string text =
        "[mirror rank " + (rank >= 0 ? std::to_string(rank) : "?") + "] fatal: " + message + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
    return 1;
  };
  std::unique_ptr<Runtime> runtime;
  {
    // The Runtime's constructor ends with an all-gather: once it returns, every rank is up.
    const std::chrono::milliseconds timeout = options.startup_timeout;
    Watchdog watchdog(timeout, [timeout] {
      const std::string rank = launcher_rank();
      std::fprintf(stderr,
                   "[mirror rank %s] fatal: rank %s did not finish start-up within %g s: it was "
                   "still in MPI start-up (MPI_Init_thread and the first all-gather), which "
                   "waits for every rank; another rank may be stopped, crashed or unreachable "
                   "(--startup-timeout sets this limit)\n",
                   rank.c_str(), rank.c_str(), static_cast<double>(timeout.count()) / 1000.0);
      std::fflush(stderr);
      std::_Exit(kExitStartupTimeout);
    });
    try {
      runtime = std::make_unique<Runtime>(argc, argv);
    } catch (const std::exception& e) {
      watchdog.disarm();
      return fatal(message_for(e));
    }
  }
  std::string failure;
  int code = 0;
  try {
    code = body(*runtime);
  } catch (const std::exception& e) {
    failure = message_for(e);
  } catch (...) {
    failure = "unknown exception";
  }
  if (failure.empty()) {
    runtime->set_exit_code(code);  // should MPI_Finalize hang (Note [Finalize watchdog])
    return code;
  }
  if (runtime->world_size() > 1) Runtime::abort_job(failure);
  return fatal(failure);  // one rank: finalize normally (runtime's destructor), exit code 1
}

}  // namespace mirror::dist
