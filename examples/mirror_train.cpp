// mirror-train: trains the built-in models, or a model spec on the user's own data files, with
// mirrored data parallelism.
//   mpirun -np 2 build/bin/mirror-train --model cnn --epochs 5
//   mpirun -np 2 build/bin/mirror-train --model-spec m.json --train-x x.npy --train-y y.npy
// Every rank runs the same command; rank 0 prints progress and the summary.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "mirror/distributed/preemption.h"
#include "mirror/distributed/runtime.h"
#include "mirror/error.h"
#include "mirror/train/trainer.h"
#include "tools/train_flags.h"

using mirror::train::TrainConfig;

int main(int argc, char** argv) {
  // First: before MPI start-up and before any thread exists, so that every thread inherits the
  // block (Note [Stop signals], preemption.cpp); a stop signal during start-up, or one that
  // launch/mirrorrun held back (Note [Stop hand-off]), stops the run after step 1.
  mirror::dist::install_stop_handlers();
  TrainConfig config;
  // Flags are checked before MPI starts, so a typo fails fast with exit code 2 on every rank.
  try {
    const mirror::train::TrainFlags flags =
        mirror::train::parse_train_flags(std::vector<std::string>(argv + 1, argv + argc));
    if (flags.help) {
      std::cout << "mirror-train: mirrored data-parallel training of the built-in models or of "
                   "a model spec on your own data\n\n"
                << "  mpirun -np 2 mirror-train --model cnn --epochs 5\n"
                << "  mpirun -np 2 mirror-train --model-spec model.json --train-x x.npy "
                   "--train-y y.npy --test-x tx.npy --test-y ty.npy\n\n"
                << mirror::train::train_flags_help() << "\n";
      return 0;
    }
    config = flags.config;
  } catch (const std::exception& e) {
    std::cerr << "mirror-train: error: " << mirror::message_for(e) << " (see --help)\n";
    return 2;
  }
  mirror::dist::RunOptions run_options;
  run_options.startup_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(config.startup_timeout_s * 1000));
  return mirror::dist::run_main(
      argc, argv,
      [&](mirror::dist::Runtime& runtime) {
        // Again after MPI start-up, in case MPI replaced the fallback handler (Note [Preemption]).
        mirror::dist::install_stop_handlers();
        // Every rank installed its handlers before MPI start-up, which has now ended on every
        // rank: mirrorrun may forward stop signals (Note [Stop hand-off]).
        mirror::dist::report_stop_handlers_ready();
        auto stop = [&](const std::exception& e, int code, bool speaker) {
          if (speaker) {
            std::cerr << "[mirror rank " << runtime.world_rank()
                      << "] fatal: " << mirror::message_for(e) << std::endl;
          }
          return code;
        };
        std::optional<mirror::train::Trainer> trainer;
        try {
          trainer.emplace(runtime, config);
          return trainer->fit().preempted ? mirror::dist::kExitPreempted : 0;
        } catch (const mirror::train::JobStopped& e) {
          // Note [Agreed errors]: every rank stops here together; no MPI_Abort needed.
          return stop(e, e.exit_code(), e.speaker());
        } catch (const mirror::Error& e) {
          // Alone, any error of the set-up is a set-up error; with several ranks only the agreed
          // ones are (the others abort the job, in run_main).
          if (runtime.world_size() > 1 || trainer) throw;
          return stop(e, mirror::train::kExitSetupFailed, true);
        }
      },
      run_options);
}
