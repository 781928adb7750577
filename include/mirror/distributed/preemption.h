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
/// preemption.cpp): call it first in main(), before any thread exists. Idempotent.
void install_stop_handlers();
/// True once a stop signal arrived at this process (or request_stop() was called).
bool stop_requested();
/// Sets the flag as a signal would (tests; programs with their own handlers).
void request_stop();
/// Clears the flag (tests).
void clear_stop_request();

}  // namespace mirror::dist
