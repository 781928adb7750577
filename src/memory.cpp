#include "mirror/memory.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "backend.h"
#include "mirror/error.h"

namespace mirror {
namespace {

constexpr std::size_t kAlignment = 256;
std::size_t round_up(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

std::string human_bytes(std::size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / (1ull << 10));
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

std::size_t parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  while (pos < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.'))
    ++pos;
  double value = 0;
  try {
    value = std::stod(text.substr(0, pos));
  } catch (...) {
    throw InvalidArgument("bad byte count '" + text + "': expected e.g. 1048576, 512M or 2G");
  }
  std::string unit = text.substr(pos);
  double mult = 1;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else
    throw InvalidArgument("bad byte unit '" + unit + "' in '" + text + "': use K, M or G");
  if (!(value > 0)) throw InvalidArgument("byte count must be positive, got '" + text + "'");
  // Beyond 2^60 (1 EiB) the count is a typo, and past 2^64 the conversion would wrap around.
  constexpr double kMaxBytes = 1152921504606846976.0;
  if (!(value * mult <= kMaxBytes)) {
    throw InvalidArgument("byte count '" + text +
                          "' is more than 1 EiB (2^60 bytes), beyond any machine; e.g. 512M or 2G");
  }
  return static_cast<std::size_t>(value * mult);
}

}  // namespace

// ---------------------------------------------------------------- MemoryPolicy
MemoryPolicy MemoryPolicy::parse(const std::string& text) {
  MemoryPolicy p;
  if (text == "growth") return p;
  auto eq = text.find('=');
  std::string kind = text.substr(0, eq);
  std::string arg = eq == std::string::npos ? "" : text.substr(eq + 1);
  if (kind == "preallocate") {
    p.kind = Kind::kPreallocate;
    try {
      std::size_t used = 0;
      p.fraction = arg.empty() ? 0.9 : std::stod(arg, &used);
      if (!arg.empty() && used != arg.size()) throw std::invalid_argument("trailing");
    } catch (...) {
      throw InvalidArgument("bad memory policy '" + text +
                            "': preallocate takes a fraction, e.g. preallocate=0.9");
    }
    if (!(p.fraction > 0.0 && p.fraction <= 1.0)) {
      throw InvalidArgument("bad memory policy '" + text + "': the fraction must be in (0, 1]");
    }
    return p;
  }
  if (kind == "limit") {
    if (arg.empty())
      throw InvalidArgument("bad memory policy '" + text + "': limit needs bytes, e.g. limit=2G");
    p.kind = Kind::kLimit;
    p.limit_bytes = parse_bytes(arg);
    return p;
  }
  throw InvalidArgument("bad memory policy '" + text +
                        "': expected growth, preallocate=FRACTION or limit=BYTES (e.g. limit=2G)");
}

std::string MemoryPolicy::str() const {
  switch (kind) {
    case Kind::kGrowth:
      return "growth";
    case Kind::kPreallocate: {
      std::ostringstream os;
      os << "preallocate=" << fraction;
      return os.str();
    }
    case Kind::kLimit:
      return "limit=" + std::to_string(limit_bytes);
  }
  return "?";
}

// ---------------------------------------------------------------- CachingAllocator
CachingAllocator::CachingAllocator(Device device, std::unique_ptr<RawMemory> raw,
                                   MemoryPolicy policy)
    : device_(device), raw_(std::move(raw)), policy_(policy) {
  const std::size_t total = raw_->total_bytes();
  if (policy_.kind == MemoryPolicy::Kind::kLimit) {
    if (total != 0 && policy_.limit_bytes > total) {
      throw InvalidArgument("memory limit " + human_bytes(policy_.limit_bytes) + " on " +
                            device_.str() + " is larger than the device (" + human_bytes(total) +
                            "); choose a smaller limit or use --memory growth");
    }
    stats_.limit = policy_.limit_bytes;
  }
  if (policy_.kind == MemoryPolicy::Kind::kGrowth && device_.is_cpu()) {
    available_at_start_ = raw_->free_bytes();
    growth_cap_ =
        static_cast<std::size_t>(static_cast<double>(available_at_start_) * kCpuGrowthCapFraction);
    stats_.limit = growth_cap_;
  }
  if (policy_.kind == MemoryPolicy::Kind::kPreallocate) {
    std::size_t free = raw_->free_bytes();
    if (free == 0) {
      throw InvalidArgument("preallocate needs a device with a known memory size; " +
                            device_.str() + " has none. Use --memory growth or limit=BYTES");
    }
    arena_bytes_ =
        round_up(static_cast<std::size_t>(static_cast<double>(free) * policy_.fraction)) -
        kAlignment;
    arena_ = raw_->allocate(arena_bytes_);
    if (arena_ == nullptr) {
      throw OutOfMemory("could not preallocate " + human_bytes(arena_bytes_) + " (" +
                        std::to_string(policy_.fraction) + " of free memory) on " + device_.str() +
                        "; try a smaller fraction or --memory growth");
    }
    ++stats_.backend_allocs;
    arena_free_[0] = arena_bytes_;
    stats_.limit = arena_bytes_;
    stats_.reserved = arena_bytes_;
  }
}

CachingAllocator::~CachingAllocator() {
  // Live blocks at exit belong to tensors that outlive the allocator (static tensors in tests);
  // their memory goes back with the process.
  for (auto& [size, ptr] : free_blocks_) raw_->deallocate(ptr, size);
  if (arena_) raw_->deallocate(arena_, arena_bytes_);
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t rounded = round_up(bytes == 0 ? 1 : bytes);
  std::lock_guard lock(mutex_);
  ++stats_.requests;
  void* p = allocate_locked(rounded);
  live_blocks_[p] = rounded;
  stats_.in_use += rounded;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return p;
}

void* CachingAllocator::allocate_locked(std::size_t rounded) {
  if (arena_) {  // preallocate: first fit in the arena
    for (auto it = arena_free_.begin(); it != arena_free_.end(); ++it) {
      if (it->second < rounded) continue;
      const std::size_t offset = it->first, size = it->second;
      arena_free_.erase(it);
      if (size > rounded) arena_free_[offset + rounded] = size - rounded;
      return static_cast<char*>(arena_) + offset;
    }
    throw_oom(rounded);
  }
  if (auto it = free_blocks_.find(rounded); it != free_blocks_.end()) {
    void* p = it->second;
    free_blocks_.erase(it);
    stats_.cached -= rounded;
    return p;
  }
  const std::size_t cap =
      policy_.kind == MemoryPolicy::Kind::kLimit ? policy_.limit_bytes : growth_cap_;
  auto over_limit = [&] { return cap != 0 && stats_.reserved + rounded > cap; };
  // Under a limit (or when the backend fails below), cached blocks of other sizes are freed
  // first: fragmentation should never be the reason for an OutOfMemory.
  if (over_limit()) release_cached_locked();
  if (over_limit()) throw_oom(rounded);
  void* p = raw_->allocate(rounded);
  if (p == nullptr && !free_blocks_.empty()) {
    release_cached_locked();
    p = raw_->allocate(rounded);
  }
  if (p == nullptr) throw_oom(rounded);
  ++stats_.backend_allocs;
  stats_.reserved += rounded;
  return p;
}

void CachingAllocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) return;  // not ours: ignore rather than corrupt the cache
  const std::size_t size = it->second;
  live_blocks_.erase(it);
  stats_.in_use -= size;
  if (arena_) {
    std::size_t offset =
        static_cast<std::size_t>(static_cast<char*>(ptr) - static_cast<char*>(arena_));
    auto [pos, inserted] = arena_free_.emplace(offset, size);
    // coalesce with the next and the previous free range
    auto next = std::next(pos);
    if (next != arena_free_.end() && pos->first + pos->second == next->first) {
      pos->second += next->second;
      arena_free_.erase(next);
    }
    if (pos != arena_free_.begin()) {
      auto prev = std::prev(pos);
      if (prev->first + prev->second == pos->first) {
        prev->second += pos->second;
        arena_free_.erase(pos);
      }
    }
    return;
  }
  free_blocks_.emplace(size, ptr);
  stats_.cached += size;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, ptr] : free_blocks_) {
    raw_->deallocate(ptr, size);
    stats_.reserved -= size;
    stats_.cached -= size;
  }
  free_blocks_.clear();
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats s = stats_;
  if (arena_) s.cached = arena_bytes_ - s.in_use;
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
}

void CachingAllocator::throw_oom(std::size_t requested) const {
  std::ostringstream os;
  os << "out of memory on " << device_.str() << ": tried to allocate " << human_bytes(requested)
     << " with " << human_bytes(stats_.in_use) << " in use, "
     << human_bytes(arena_ ? arena_bytes_ - stats_.in_use : stats_.cached) << " cached";
  if (growth_cap_)
    os << ", cap " << human_bytes(growth_cap_) << " (growth on the host holds at most "
       << static_cast<int>(kCpuGrowthCapFraction * 100) << "% of the "
       << human_bytes(available_at_start_)
       << " MemAvailable when it started; --memory limit=BYTES sets the cap)";
  else if (stats_.limit)
    os << ", limit " << human_bytes(stats_.limit) << " (policy " << policy_.str() << ")";
  const std::size_t total = raw_->total_bytes();
  if (total) os << ", device total " << human_bytes(total);
  os << ". Try: a smaller --batch-per-replica, --on-oom split (micro-batches)";
  if (policy_.kind == MemoryPolicy::Kind::kLimit) os << ", a larger --memory limit=BYTES";
  if (policy_.kind == MemoryPolicy::Kind::kPreallocate) os << ", a larger preallocate fraction";
  os << ", or more replicas to shard the batch.";
  throw OutOfMemory(os.str());
}

// ---------------------------------------------------------------- registry
namespace {
struct Registry {
  std::mutex mutex;
  std::map<Device, MemoryPolicy> policies;
  std::map<Device, std::unique_ptr<CachingAllocator>> allocators;
};
Registry& registry() {
  static Registry* r = new Registry;  // leaked on purpose: tensors may be freed at exit
  return *r;
}
}  // namespace

void set_memory_policy(Device device, const MemoryPolicy& policy) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (auto it = r.allocators.find(device); it != r.allocators.end()) {
    if (it->second->policy() == policy) return;
    throw InvalidArgument("memory policy for " + device.str() +
                          " must be set before its first allocation (it is already " +
                          it->second->policy().str() + ")");
  }
  // Validate now (e.g. a limit larger than the device) rather than at first allocation.
  r.allocators[device] =
      std::make_unique<CachingAllocator>(device, make_raw_memory(device), policy);
  r.policies[device] = policy;
}

CachingAllocator& allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.allocators.find(device);
  if (it == r.allocators.end()) {
    it = r.allocators
             .emplace(device, std::make_unique<CachingAllocator>(device, make_raw_memory(device),
                                                                 MemoryPolicy{}))
             .first;
  }
  return *it->second;
}

}  // namespace mirror
