// defines: MemoryPolicy, RawMemory (a backend's malloc/free), CachingAllocator (the policy
// logic, shared by every backend so the CPU tests exercise it), and the per-device registry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "mirror/device.h"

namespace mirror {

/// How a device's allocator obtains memory.
///  - growth: allocate on demand, cache freed blocks for reuse (default); on the CPU at most
///    kCpuGrowthCapFraction of the host's available memory (Note [CPU growth cap]);
///  - preallocate: reserve `fraction` of the device's free memory at first use, serve from it;
///  - limit: like growth, but never hold more than `limit_bytes`.
struct MemoryPolicy {
  enum class Kind { kGrowth, kPreallocate, kLimit };
  Kind kind = Kind::kGrowth;
  double fraction = 0.0;        // kPreallocate
  std::size_t limit_bytes = 0;  // kLimit

  /// Parses "growth", "preallocate=0.9", "limit=2G" / "limit=512M" / "limit=1048576".
  static MemoryPolicy parse(const std::string& text);
  std::string str() const;
  bool operator==(const MemoryPolicy&) const = default;
};

// Note [CPU growth cap]: malloc on Linux overcommits, so a host allocation never says no: a
// runaway batch grows the process until the kernel's OOM killer ends it without a message. The
// CPU allocator under `growth` therefore holds at most this fraction of MemAvailable (read when
// the allocator is made) and throws OutOfMemory naming the cap beyond it; `--memory
// limit=BYTES` replaces the cap.
inline constexpr double kCpuGrowthCapFraction = 0.9;

/// The host's available memory (MemAvailable in /proc/meminfo), 0 when unknown.
std::size_t host_available_bytes();

struct MemoryStats {
  std::size_t in_use = 0;            // bytes handed out and not yet freed
  std::size_t peak_in_use = 0;       // high-water mark of in_use
  std::size_t cached = 0;            // bytes held by the allocator but free for reuse
  std::size_t reserved = 0;          // in_use + cached: what the allocator holds from the backend
  std::size_t limit = 0;             // 0 = none (the CPU growth cap counts as a limit)
  std::uint64_t backend_allocs = 0;  // calls into RawMemory::allocate (cache misses)
  std::uint64_t requests = 0;        // calls to allocate()
};

/// The backend's raw allocation primitive (malloc for the CPU, cudaMalloc for CUDA).
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  /// Returns nullptr when the backend is out of memory (never throws for that case).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  /// Free bytes on the device right now (used by preallocate and by limit validation);
  /// 0 means "unknown / unbounded" (the CPU).
  virtual std::size_t free_bytes() const = 0;
  virtual std::size_t total_bytes() const = 0;
};

/// Thread-safe caching allocator implementing MemoryPolicy on top of a RawMemory.
/// Block sizes are rounded up to 256 bytes; freed blocks are cached by exact rounded size.
class CachingAllocator {
 public:
  CachingAllocator(Device device, std::unique_ptr<RawMemory> raw, MemoryPolicy policy);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Throws OutOfMemory naming the device, the request, in-use, cached and limit bytes, and
  /// what to change. Zero-byte requests return a unique non-null dummy.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr) noexcept;
  /// Returns cached (free) blocks to the backend. Not possible under preallocate.
  void release_cached();
  MemoryStats stats() const;
  void reset_peak();
  const MemoryPolicy& policy() const { return policy_; }
  Device device() const { return device_; }

 private:
  void* allocate_locked(std::size_t rounded);
  void release_cached_locked();
  [[noreturn]] void throw_oom(std::size_t requested) const;

  Device device_;
  std::unique_ptr<RawMemory> raw_;
  MemoryPolicy policy_;
  std::size_t growth_cap_ = 0;          // Note [CPU growth cap]; 0 = none
  std::size_t available_at_start_ = 0;  // the MemAvailable the cap came from
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_blocks_;  // size -> block
  std::map<void*, std::size_t> live_blocks_;       // block -> size
  // preallocate: one arena carved by a simple first-fit free list
  void* arena_ = nullptr;
  std::size_t arena_bytes_ = 0;
  std::map<std::size_t, std::size_t> arena_free_;  // offset -> size
  MemoryStats stats_;
};

/// Sets the policy for a device; must happen before the device's first allocation (throws
/// InvalidArgument otherwise, or when the limit exceeds the device's memory).
void set_memory_policy(Device device, const MemoryPolicy& policy);
/// The allocator of a device, created on first use with its policy.
CachingAllocator& allocator_for(Device device);

}  // namespace mirror
