// defines: the all-reduce bandwidth sweep behind `mirror-bench allreduce`: Mirror's
// MpiCommunicator and raw MPI_Allreduce measured side by side in one run, or Mirror's
// NcclCommunicator on each rank's GPU, nccl-tests style, each result checked against its closed
// form.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "mirror/distributed/runtime.h"
#include "mirror/dtype.h"

namespace mirror::dist {

struct AllreduceSweepOptions {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2.0;
  int iterations = 20;  // timed all-reduces per round
  int warmup = 5;       // untimed all-reduces per size and method
  int rounds = 3;       // alternating Mirror / MPI rounds; the best round of each is reported
  DType dtype = DType::kFloat32;
  bool in_place = false;
  /// "mpi": host buffers, Mirror's MpiCommunicator next to raw MPI_Allreduce. "nccl": each rank
  /// drives one GPU (GPU = local rank) and Mirror's NcclCommunicator reduces device buffers;
  /// no usable GPU is an Unavailable error naming the reason. "auto": nccl when every rank has
  /// a GPU of its own (or may share one), else mpi with a note saying why.
  std::string backend = "auto";
  bool allow_gpu_sharing = false;  // several ranks on one GPU (NCCL itself may refuse it)
};

/// One size of the sweep. Times are per all-reduce on the slowest rank; algbw = bytes / time;
/// busbw = algbw * 2 (n - 1) / n (what each rank's links carry in a ring, nccl-tests' measure).
struct AllreduceSweepRow {
  std::size_t bytes = 0;
  std::size_t count = 0;
  double mirror_us = 0, mirror_algbw = 0, mirror_busbw = 0;
  std::size_t mirror_wrong = 0;  // elements that differ from the closed form (all ranks)
  double mpi_us = 0, mpi_algbw = 0, mpi_busbw = 0;  // 0 when not measured (nccl)
  std::size_t mpi_wrong = 0;
};

/// The backend `run_allreduce_sweep` uses for `options` on this job: "mpi" or "nccl", with the
/// reason when "auto" falls back to mpi (else ""). Collective (auto asks every rank).
struct SweepBackendChoice {
  std::string backend;
  std::string note;
};
SweepBackendChoice choose_sweep_backend(Runtime& runtime, const AllreduceSweepOptions& options);

/// Runs the sweep (collective: every rank calls it). Rank 0 writes the table to `out` row by
/// row as sizes finish; every rank returns the rows. Each rank contributes (rank + i) % 4 to
/// element i, so the exact sum is known and exactly representable in every dtype.
std::vector<AllreduceSweepRow> run_allreduce_sweep(Runtime& runtime,
                                                   const AllreduceSweepOptions& options,
                                                   std::ostream& out);

/// "8", "4K", "64M", "1G" (powers of 1024) -> bytes; throws InvalidArgument otherwise.
std::size_t parse_byte_size(const std::string& text);

}  // namespace mirror::dist
