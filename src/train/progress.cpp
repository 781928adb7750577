// Rank 0's console: a redrawn progress bar on a terminal, one line per epoch otherwise.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "train/trainer_impl.h"

namespace mirror::train {

// Note [Progress bar under a launcher]: Open MPI gives each rank a pseudo-terminal for its
// stdout and copies it to mpirun's own stdout, so isatty() is true in a rank even when the user
// sent mpirun's output to a file or a pipe, and the bar's carriage-return redraws would fill the
// log. What the user sees is the launcher's stdout: a rank started by a launcher draws the bar
// only when its parent (mpirun, or mirrorrun's mpirun) writes to a terminal. A rank whose parent
// is a remote daemon (orted, slurmstepd) finds no terminal there and prints plain lines.
bool stdout_shows_a_terminal() {
  if (isatty(STDOUT_FILENO) == 0) return false;
  bool launched = false;
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name); v && *v) launched = true;
  }
  if (!launched) return true;
  const std::string fd = "/proc/" + std::to_string(getppid()) + "/fd/1";
  char target[256];
  const ssize_t n = readlink(fd.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string where(target, static_cast<std::size_t>(n));
  return where.starts_with("/dev/pts/") || where.starts_with("/dev/tty");
}

void Progress::step(int epoch, int epochs, std::int64_t step, std::int64_t steps,
                    double samples_per_s, double eta_s, const MetricSums& metrics) {
  if (!enabled_ || !bar_) return;
  const auto now = std::chrono::steady_clock::now();
  if (step != steps && now - last_draw_ < std::chrono::milliseconds(100)) return;  // ~10 redraws/s
  last_draw_ = now;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * step / std::max<std::int64_t>(steps, 1));
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : '.');
  bar[kWidth] = '\0';
  const long eta = static_cast<long>(eta_s + 0.5);
  std::printf("\repoch %d/%d [%s] %lld/%lld  %.0f samples/s  ETA %ld:%02ld  loss %.4f %s ",
              epoch + 1, epochs, bar, static_cast<long long>(step), static_cast<long long>(steps),
              samples_per_s, eta / 60, eta % 60, metrics.loss(), metrics.text(" ").c_str());
  std::fflush(stdout);
  bar_open_ = true;
}

void Progress::epoch_done(const std::string& line) {
  if (!enabled_) return;
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::message(const std::string& line) {
  if (!enabled_) return;
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace mirror::train
