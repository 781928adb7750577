// defines: the stop request (Note [Preemption]): SIGTERM/SIGINT/SIGUSR1 set a flag that the
// training loop turns into "every rank stops after the same step, rank 0 checkpoints, exit 5".
#pragma once

namespace mirror::dist {

/// Exit code of a job stopped by a signal after checkpointing: a requeued job resumes from the
/// checkpoint (mirror-train, launch/mirrorrun; see docs/checkpoint.md).
inline constexpr int kExitPreempted = 5;

// Note [Preemption]: Slurm (and mpirun, when it is signalled) sends SIGTERM to the ranks, often
// to one rank first. The handler only sets a flag. MirroredStrategy::train_step carries the flag
// in the step's metrics all-reduce (Note [Metrics first]), so every rank learns, at the same
// step, that some rank was asked to stop; the fit loop then ends after that step, rank 0 writes
// a checkpoint and the program exits with kExitPreempted. A second SIGINT to the same rank
// restores the default action and re-raises it (Ctrl-C twice kills at once); repeated SIGTERMs
// are expected (Slurm signals every process, mpirun forwards) and change nothing. Open MPI's
// mpirun, when signalled itself, sends SIGTERM to the ranks and SIGKILL 1 s later unless
// `--mca odls_base_sigkill_timeout S` says otherwise, and exits 1; SIGUSR1 sent to mpirun is
// forwarded to the ranks without any SIGKILL and mpirun exits 5, so launch/mirrorrun turns its
// first SIGTERM/SIGINT into SIGUSR1 for mpirun (Slurm: `--signal=USR1@60` does the same).

/// Routes SIGTERM, SIGINT and SIGUSR1 to one thread of their own that sets the flag, and blocks
/// them in the calling thread and so in every thread created after it (Note [Stop signals],
/// preemption.cpp): call it first in main(), before any thread exists. Idempotent. Sets the flag
/// when mirrorrun's stop file exists (Note [Stop hand-off]).
void install_stop_handlers();
/// Note [Stop hand-off]: a stop that launch/mirrorrun received before the ranks could take it.
/// mirrorrun names a file in MIRROR_STOP_FILE and creates it when it is signalled;
/// install_stop_handlers() sets the flag when that file exists, and report_stop_handlers_ready()
/// creates MIRROR_STOP_FILE.ready, after which mirrorrun forwards its signal (as SIGUSR1 through
/// mpirun) instead of holding it back. Without MIRROR_STOP_FILE both do nothing.
inline constexpr const char* kStopFileVariable = "MIRROR_STOP_FILE";
/// Tells launch/mirrorrun that every rank of the job has its stop handlers (Note [Stop
/// hand-off]): call it on any rank once that is true, e.g. after the Runtime's start-up in a
/// program that called install_stop_handlers() before creating the Runtime (mirror-train).
/// Failures are ignored (a rank on another node may not see mirrorrun's folder).
void report_stop_handlers_ready();

/// True once a stop signal arrived at this process (or request_stop() was called).
bool stop_requested();
/// Sets the flag as a signal would (tests; programs with their own handlers).
void request_stop();
/// Clears the flag (tests).
void clear_stop_request();

}  // namespace mirror::dist
