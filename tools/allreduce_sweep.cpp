// The all-reduce sweep: Mirror's MpiCommunicator vs raw MPI_Allreduce, or Mirror's
// NcclCommunicator on the ranks' GPUs, nccl-tests style.
#include "tools/allreduce_sweep.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>

#include "backend.h"
#include "distributed/collective_util.h"
#include "distributed/device_collectives.h"
#include "distributed/runtime_internal.h"
#include "math/convert.h"
#include "mirror/distributed/mpi_communicator.h"
#include "mirror/error.h"
#include "mirror/gpu.h"
#include "mirror/tensor.h"
#include "tools/rank_gpu.h"

namespace mirror::dist {

namespace {

using Seconds = std::chrono::duration<double>;

// ---- closed-form data: rank r contributes (r + i) % 4 to element i

double contribution(int rank, std::size_t i) { return static_cast<double>((rank + i) % 4); }

double expected_sum(int size, std::size_t i) {
  double s = 0;
  for (int r = 0; r < size; ++r) s += contribution(r, i);
  return s;
}

void store(Tensor& t, std::size_t i, double v) {
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data<float>()[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      t.data<double>()[i] = v;
      return;
    case DType::kInt32:
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
      return;
    case DType::kInt64:
      t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v);
      return;
    case DType::kFloat16:
      t.data<Half>()[i].bits = math::float_to_half_bits(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      t.data<BFloat16>()[i].bits = math::float_to_bfloat16_bits(static_cast<float>(v));
      return;
    default:
      throw InvalidArgument(std::string("allreduce sweep: unsupported dtype ") +
                            dtype_name(t.dtype()));
  }
}

double load(const Tensor& t, std::size_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data<float>()[i];
    case DType::kFloat64:
      return t.data<double>()[i];
    case DType::kInt32:
      return t.data<std::int32_t>()[i];
    case DType::kInt64:
      return static_cast<double>(t.data<std::int64_t>()[i]);
    case DType::kFloat16:
      return math::half_bits_to_float(t.data<Half>()[i].bits);
    case DType::kBFloat16:
      return math::bfloat16_bits_to_float(t.data<BFloat16>()[i].bits);
    default:
      return 0;
  }
}

void fill(Tensor& t, int rank) {
  for (std::size_t i = 0; i < static_cast<std::size_t>(t.numel()); ++i)
    store(t, i, contribution(rank, i));
}

std::size_t count_wrong(const Tensor& t, int size) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(t.numel()); ++i)
    wrong += load(t, i) != expected_sum(size, i);
  return wrong;
}

// ---- raw MPI, the baseline: blocking MPI_Allreduce on its own communicator

void mpi_add_half(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_half(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), *len);
}
void mpi_add_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  detail::add_bfloat16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout),
                       *len);
}

class RawMpi {
 public:
  explicit RawMpi(DType dtype) {
    std::lock_guard lock(detail::mpi_mutex());
    MIRROR_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MIRROR_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    switch (dtype) {
      case DType::kFloat32:
        type_ = MPI_FLOAT;
        break;
      case DType::kFloat64:
        type_ = MPI_DOUBLE;
        break;
      case DType::kInt32:
        type_ = MPI_INT32_T;
        break;
      case DType::kInt64:
        type_ = MPI_INT64_T;
        break;
      case DType::kFloat16:
      case DType::kBFloat16:
        type_ = MPI_UINT16_T;
        MIRROR_MPI_CHECK(
            MPI_Op_create(dtype == DType::kFloat16 ? &mpi_add_half : &mpi_add_bf16, 1, &user_op_));
        op_ = user_op_;
        break;
      default:
        throw InvalidArgument("allreduce sweep: unsupported dtype");
    }
  }
  ~RawMpi() {
    std::lock_guard lock(detail::mpi_mutex());
    if (user_op_ != MPI_OP_NULL) MPI_Op_free(&user_op_);
    MPI_Comm_free(&comm_);
  }
  void all_reduce(const Tensor& in, Tensor& out) {
    const bool in_place = detail::same_memory(in, out);
    std::lock_guard lock(detail::mpi_mutex());  // Note [MPI mutex]; the comm thread is idle here
    MIRROR_MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : in.raw_data(), out.raw_data(),
                                   static_cast<int>(out.numel()), type_, op_, comm_));
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Datatype type_ = MPI_FLOAT;
  MPI_Op op_ = MPI_SUM, user_op_ = MPI_OP_NULL;
};

// ---- one size

/// What is measured: Mirror's communicator, where its buffers live, and the raw MPI baseline
/// (host buffers only; null for NCCL, whose natural baseline would be NCCL itself).
struct Target {
  Communicator& comm;
  Device device;
  RawMpi* raw = nullptr;
};

struct Buffers {
  Tensor in, out;
};

Buffers make_buffers(std::size_t count, DType dtype, Device device, bool in_place) {
  Buffers b;
  b.in = Tensor::zeros({static_cast<std::int64_t>(count)}, dtype, device);
  b.out = in_place ? b.in : Tensor::zeros({static_cast<std::int64_t>(count)}, dtype, device);
  return b;
}

/// Writes this rank's contribution into `t` (through a host copy for a GPU tensor).
void fill_on(Tensor& t, int rank) {
  if (t.device().is_cpu()) return fill(t, rank);
  Tensor host = Tensor::zeros(t.shape(), t.dtype());
  fill(host, rank);
  t.copy_from(host);
}

std::size_t count_wrong_on(const Tensor& t, int size) {
  return count_wrong(t.device().is_cpu() ? t : t.to(Device::cpu()), size);
}

// Seconds per all-reduce on the slowest rank for `iterations` calls of `run_all`.
template <class F>
double timed(Runtime& rt, int iterations, F run_all) {
  rt.barrier();
  const auto start = std::chrono::steady_clock::now();
  run_all(iterations);
  const double mine = Seconds(std::chrono::steady_clock::now() - start).count() / iterations;
  const auto all = rt.all_gather_value<double>(mine);
  return *std::max_element(all.begin(), all.end());
}

void set_bandwidths(AllreduceSweepRow& row, int ranks, double mirror_s, double mpi_s) {
  const double n = ranks, bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  row.mirror_us = mirror_s * 1e6;
  row.mirror_algbw = row.bytes / mirror_s / 1e9;
  row.mirror_busbw = row.mirror_algbw * bus;
  if (mpi_s <= 0) return;
  row.mpi_us = mpi_s * 1e6;
  row.mpi_algbw = row.bytes / mpi_s / 1e9;
  row.mpi_busbw = row.mpi_algbw * bus;
}

AllreduceSweepRow measure_size(Runtime& rt, Target& target, std::size_t count,
                               const AllreduceSweepOptions& o) {
  Buffers b = make_buffers(count, o.dtype, target.device, o.in_place);
  fill_on(b.in, rt.world_rank());
  // Mirror: issue every all-reduce, then wait for all (they run in issue order). On a GPU,
  // wait() only orders the compute stream, so the host then synchronizes the device: the time
  // covers the collectives' completion, not just their launch.
  auto mirror_run = [&](int n) {
    std::vector<std::shared_ptr<Work>> works;
    works.reserve(n);
    for (int k = 0; k < n; ++k)
      works.push_back(target.comm.all_reduce(b.in, b.out, ReduceOp::kSum, "sweep"));
    for (auto& w : works) w->wait();
    if (target.device.is_cuda()) kernels_for(target.device).synchronize(target.device);
  };
  auto raw_run = [&](int n) {
    for (int k = 0; k < n; ++k) target.raw->all_reduce(b.in, b.out);
  };
  if (o.warmup > 0) {
    mirror_run(o.warmup);
    if (target.raw) raw_run(o.warmup);
  }
  double mirror_s = 1e300, mpi_s = target.raw ? 1e300 : 0.0;
  for (int round = 0; round < o.rounds; ++round) {  // alternate, so noise hits both alike
    mirror_s = std::min(mirror_s, timed(rt, o.iterations, mirror_run));
    if (target.raw) mpi_s = std::min(mpi_s, timed(rt, o.iterations, raw_run));
  }
  AllreduceSweepRow row;
  row.count = count;
  row.bytes = count * dtype_size(o.dtype);
  set_bandwidths(row, rt.world_size(), mirror_s, mpi_s);
  // Verification: one fresh all-reduce each, compared with the closed form on every rank.
  fill_on(b.in, rt.world_rank());
  target.comm.all_reduce(b.in, b.out, ReduceOp::kSum, "check")->wait();
  const std::size_t mirror_wrong = count_wrong_on(b.out, rt.world_size());
  for (auto w : rt.all_gather_value<std::size_t>(mirror_wrong)) row.mirror_wrong += w;
  if (target.raw) {
    fill(b.in, rt.world_rank());
    target.raw->all_reduce(b.in, b.out);
    const std::size_t mpi_wrong = count_wrong(b.out, rt.world_size());
    for (auto w : rt.all_gather_value<std::size_t>(mpi_wrong)) row.mpi_wrong += w;
  }
  return row;
}

void print_header(Runtime& rt, const AllreduceSweepOptions& o, const std::string& where,
                  bool baseline, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line,
                "# mirror-bench allreduce: %d ranks on %d node(s), %s, %s sum, %s, %d iterations, "
                "best of %d %srounds, %d warmup\n",
                rt.world_size(), rt.node_count(), where.c_str(), dtype_name(o.dtype),
                o.in_place ? "in place" : "out of place", o.iterations, o.rounds,
                baseline ? "alternating " : "", o.warmup);
  out << line;
  out << "# time = per all-reduce on the slowest rank; busbw = algbw * 2(n-1)/n; #wrong = "
         "elements != closed form, all ranks\n";
  std::snprintf(line, sizeof line, "#%41s%-43s%-43s\n", "",
                baseline ? "  --------- Mirror MpiCommunicator --------"
                         : "  -------- Mirror NcclCommunicator --------",
                baseline ? "  ---------- raw MPI_Allreduce ----------" : "");
  out << line;
  if (baseline) {
    std::snprintf(line, sizeof line, "%13s %12s %8s %10s %10s %10s %7s %10s %10s %10s %7s %9s\n",
                  "size(B)", "count", "type", "time(us)", "algbw", "busbw", "#wrong", "time(us)",
                  "algbw", "busbw", "#wrong", "busbw %");
  } else {
    std::snprintf(line, sizeof line, "%13s %12s %8s %10s %10s %10s %7s\n", "size(B)", "count",
                  "type", "time(us)", "algbw", "busbw", "#wrong");
  }
  out << line << std::flush;
}

void print_row(const AllreduceSweepRow& r, DType dtype, bool baseline, std::ostream& out) {
  char line[512];
  if (baseline) {
    std::snprintf(line, sizeof line,
                  "%13zu %12zu %8s %10.1f %10.3f %10.3f %7zu %10.1f %10.3f %10.3f %7zu %8.1f%%\n",
                  r.bytes, r.count, dtype_name(dtype), r.mirror_us, r.mirror_algbw, r.mirror_busbw,
                  r.mirror_wrong, r.mpi_us, r.mpi_algbw, r.mpi_busbw, r.mpi_wrong,
                  100.0 * r.mirror_busbw / r.mpi_busbw);
  } else {
    std::snprintf(line, sizeof line, "%13zu %12zu %8s %10.1f %10.3f %10.3f %7zu\n", r.bytes,
                  r.count, dtype_name(dtype), r.mirror_us, r.mirror_algbw, r.mirror_busbw,
                  r.mirror_wrong);
  }
  out << line << std::flush;
}

/// One NCCL communicator for this rank's GPU (GPU = local rank, Runtime::setup_devices), the
/// unique id carried over MPI as MirroredStrategy does. Throws Unavailable (with the reason)
/// without a usable GPU, CommError when NCCL refuses (e.g. two ranks on one GPU).
std::unique_ptr<Communicator> make_rank_nccl(Runtime& rt, const AllreduceSweepOptions& o,
                                             Device& device) {
  const GpuReport& gpus = discover_gpus();
  if (!gpus.usable()) {
    throw Unavailable("--backend nccl needs a usable GPU on every rank, but " +
                      (gpus.unavailable_reason.empty() ? std::string("none is visible")
                                                       : gpus.unavailable_reason) +
                      "; run mirror-doctor for details, or use --backend mpi");
  }
  device = rank_gpu(rt, o.allow_gpu_sharing, "allreduce sweep");
  NcclBootstrap boot;
  boot.world_size = rt.world_size();
  boot.first_rank = rt.world_rank();
  boot.broadcast_from_root = [&rt](void* bytes, std::size_t n) {
    rt.broadcast_bytes({static_cast<std::byte*>(bytes), n}, 0);
  };
  auto comms = make_nccl_communicators({device}, boot);
  MIRROR_CHECK(comms.size() == 1, Error,
               "make_nccl_communicators returned " + std::to_string(comms.size()) +
                   " communicators for one GPU");
  comms[0]->set_timeout(rt.default_timeout());
  return std::move(comms[0]);
}

std::vector<AllreduceSweepRow> sweep_sizes(Runtime& rt, Target& target,
                                           const AllreduceSweepOptions& o, std::ostream& out) {
  const std::size_t elem = dtype_size(o.dtype);
  std::vector<AllreduceSweepRow> rows;
  std::size_t last_count = 0;
  for (double bytes = static_cast<double>(o.min_bytes); bytes <= static_cast<double>(o.max_bytes);
       bytes *= o.factor) {
    const std::size_t count = static_cast<std::size_t>(bytes) / elem;
    if (count == 0 || count == last_count) continue;  // below one element, or a repeat
    last_count = count;
    rows.push_back(measure_size(rt, target, count, o));
    if (rt.world_rank() == 0) print_row(rows.back(), o.dtype, target.raw != nullptr, out);
  }
  return rows;
}

}  // namespace

SweepBackendChoice choose_sweep_backend(Runtime& rt, const AllreduceSweepOptions& o) {
  MIRROR_CHECK(o.backend == "auto" || o.backend == "mpi" || o.backend == "nccl", InvalidArgument,
               "allreduce sweep: --backend must be auto, mpi or nccl, got '" + o.backend + "'");
  if (o.backend != "auto") return {o.backend, ""};
  // Every rank must take the same side, so each says why it cannot use NCCL ("" = it can).
  const GpuReport& gpus = discover_gpus();
  std::string why;
  if (!gpus.usable()) {
    why =
        "no usable GPU (" +
        (gpus.unavailable_reason.empty() ? std::string("none visible") : gpus.unavailable_reason) +
        ")";
  } else if (rt.local_size() > static_cast<int>(gpus.devices.size()) && !o.allow_gpu_sharing) {
    why = std::to_string(rt.local_size()) + " ranks on this node but " +
          std::to_string(gpus.devices.size()) + " GPU(s), and no --allow-gpu-sharing";
  }
  const std::vector<std::string> all = rt.all_gather_string(why);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r].empty()) return {"mpi", "rank " + std::to_string(r) + ": " + all[r]};
  }
  return {"nccl", ""};
}

std::vector<AllreduceSweepRow> run_allreduce_sweep(Runtime& runtime, const AllreduceSweepOptions& o,
                                                   std::ostream& out) {
  MIRROR_CHECK(o.min_bytes >= 1 && o.max_bytes >= o.min_bytes, InvalidArgument,
               "allreduce sweep: need 1 <= min bytes (-b) <= max bytes (-e)");
  MIRROR_CHECK(o.factor > 1.0, InvalidArgument, "allreduce sweep: the factor (-f) must be > 1");
  MIRROR_CHECK(o.iterations >= 1 && o.warmup >= 0 && o.rounds >= 1, InvalidArgument,
               "allreduce sweep: need iterations >= 1, warmup >= 0, rounds >= 1");
  const std::size_t elem = dtype_size(o.dtype);
  MIRROR_CHECK(o.max_bytes / elem <= static_cast<std::size_t>(detail::kMaxMpiCount),
               InvalidArgument, "allreduce sweep: max bytes (-e) is too large");
  const SweepBackendChoice choice = choose_sweep_backend(runtime, o);
  if (choice.backend == "nccl") {
    Device device = Device::cpu(0);
    std::unique_ptr<Communicator> nccl = make_rank_nccl(runtime, o, device);
    Target target{*nccl, device, nullptr};
    std::string where = "NCCL on " + device.str();
    if (runtime.world_size() > 1) where += " (rank 0; one GPU per rank)";
    if (runtime.world_rank() == 0) print_header(runtime, o, where, false, out);
    return sweep_sizes(runtime, target, o, out);
  }
  MpiCommunicator comm(runtime);
  RawMpi raw(o.dtype);
  Target target{comm, Device::cpu(0), &raw};
  if (runtime.world_rank() == 0) {
    if (!choice.note.empty()) out << "# backend mpi (auto: " << choice.note << ")\n";
    print_header(runtime, o, "MPI on host memory", true, out);
  }
  return sweep_sizes(runtime, target, o, out);
}

std::size_t parse_byte_size(const std::string& text) {
  std::size_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  std::size_t scale = 1;
  if (ec == std::errc() && ptr != last && ptr + 1 == last) {
    switch (*ptr) {
      case 'K':
      case 'k':
        scale = std::size_t{1} << 10;
        ++ptr;
        break;
      case 'M':
      case 'm':
        scale = std::size_t{1} << 20;
        ++ptr;
        break;
      case 'G':
      case 'g':
        scale = std::size_t{1} << 30;
        ++ptr;
        break;
      default:
        break;
    }
  }
  MIRROR_CHECK(ec == std::errc() && ptr == last && first != last, InvalidArgument,
               "bad size '" + text + "': expected bytes like 8, 4K, 64M or 1G");
  return value * scale;
}

}  // namespace mirror::dist
