// CachingAllocator policies and OutOfMemory messages, on a fake RawMemory with a fixed
// capacity so the tests are exact and independent of the host's memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "mirror/error.h"
#include "mirror/memory.h"
#include "mirror/tensor.h"

namespace mirror {
namespace {

/// A device with `capacity` bytes that counts backend calls.
class FakeMemory final : public RawMemory {
 public:
  explicit FakeMemory(std::size_t capacity, int* allocs = nullptr, int* frees = nullptr)
      : capacity_(capacity), allocs_(allocs), frees_(frees) {}
  void* allocate(std::size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    used_ += bytes;
    if (allocs_) ++*allocs_;
    return std::aligned_alloc(256, bytes);
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    used_ -= bytes;
    if (frees_) ++*frees_;
    std::free(p);
  }
  std::size_t free_bytes() const override { return capacity_ - used_; }
  std::size_t total_bytes() const override { return capacity_; }

 private:
  std::size_t capacity_, used_ = 0;
  int *allocs_, *frees_;
};

constexpr std::size_t kMiB = 1 << 20;

TEST(MemoryPolicy, ParsesAllForms) {
  EXPECT_EQ(MemoryPolicy::parse("growth").kind, MemoryPolicy::Kind::kGrowth);
  auto p = MemoryPolicy::parse("preallocate=0.5");
  EXPECT_EQ(p.kind, MemoryPolicy::Kind::kPreallocate);
  EXPECT_DOUBLE_EQ(p.fraction, 0.5);
  EXPECT_EQ(MemoryPolicy::parse("limit=2G").limit_bytes, 2ull << 30);
  EXPECT_EQ(MemoryPolicy::parse("limit=512M").limit_bytes, 512ull << 20);
  EXPECT_EQ(MemoryPolicy::parse("limit=4096").limit_bytes, 4096u);
  for (const char* bad : {"grow", "limit=", "limit=-1", "limit=3X", "preallocate=1.5",
                          "preallocate=0", "preallocate=abc", ""}) {
    EXPECT_THROW(MemoryPolicy::parse(bad), InvalidArgument) << bad;
  }
}

TEST(CachingAllocator, GrowthReusesFreedBlocks) {
  int allocs = 0;
  CachingAllocator a(Device::cpu(7), std::make_unique<FakeMemory>(64 * kMiB, &allocs), {});
  void* p = a.allocate(1000);
  a.deallocate(p);
  EXPECT_EQ(a.stats().cached, 1024u);  // rounded to 256 bytes
  void* q = a.allocate(1000);
  EXPECT_EQ(q, p) << "a freed block of the same size must be reused";
  EXPECT_EQ(allocs, 1);
  auto s = a.stats();
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.backend_allocs, 1u);
  EXPECT_EQ(s.requests, 2u);
  a.deallocate(q);
}

TEST(CachingAllocator, PeakAndRelease) {
  int allocs = 0, frees = 0;
  CachingAllocator a(Device::cpu(7), std::make_unique<FakeMemory>(64 * kMiB, &allocs, &frees), {});
  void* p = a.allocate(kMiB);
  void* q = a.allocate(2 * kMiB);
  a.deallocate(p);
  a.deallocate(q);
  auto s = a.stats();
  EXPECT_EQ(s.peak_in_use, 3 * kMiB);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.cached, 3 * kMiB);
  a.release_cached();
  EXPECT_EQ(frees, 2);
  EXPECT_EQ(a.stats().reserved, 0u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_in_use, 0u);
}

TEST(CachingAllocator, LimitFreesCacheBeforeFailing) {
  auto policy = MemoryPolicy::parse("limit=4M");
  CachingAllocator a(Device::cpu(7), std::make_unique<FakeMemory>(64 * kMiB), policy);
  void* p = a.allocate(3 * kMiB);
  a.deallocate(p);  // 3 MiB cached
  // 2 MiB does not fit next to the cached 3 MiB under a 4 MiB limit: the cache is released.
  void* q = a.allocate(2 * kMiB);
  EXPECT_EQ(a.stats().reserved, 2 * kMiB);
  EXPECT_EQ(a.stats().cached, 0u);
  a.deallocate(q);
}

TEST(CachingAllocator, OutOfMemoryMessageNamesEverything) {
  auto policy = MemoryPolicy::parse("limit=4M");
  CachingAllocator a(Device::cpu(3), std::make_unique<FakeMemory>(64 * kMiB), policy);
  void* p = a.allocate(3 * kMiB);
  try {
    a.allocate(2 * kMiB);
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cpu:3"), std::string::npos) << m;
    EXPECT_NE(m.find("tried to allocate 2.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("3.00 MiB in use"), std::string::npos) << m;
    EXPECT_NE(m.find("0 B cached"), std::string::npos) << m;
    EXPECT_NE(m.find("limit 4.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit=BYTES"), std::string::npos) << m;  // what to change
    EXPECT_NE(m.find("--batch-per-replica"), std::string::npos) << m;
  }
  a.deallocate(p);
}

TEST(CachingAllocator, BackendExhaustionIsOutOfMemoryNotNull) {
  // A GPU: growth there has no cap of its own (the CPU's is tested below).
  CachingAllocator a(Device::cuda(7), std::make_unique<FakeMemory>(2 * kMiB), {});
  void* p = a.allocate(kMiB);
  EXPECT_THROW(a.allocate(2 * kMiB), OutOfMemory);
  a.deallocate(p);
  // After freeing, the cached 1 MiB block is released to make room for a different size.
  void* q = a.allocate(2 * kMiB - 256);
  EXPECT_NE(q, nullptr);
  a.deallocate(q);
}

TEST(CachingAllocator, CpuGrowthIsCappedBelowAvailableMemory) {
  // 100 MiB "available": the cap is kCpuGrowthCapFraction of it, and the message names it.
  CachingAllocator a(Device::cpu(5), std::make_unique<FakeMemory>(100 * kMiB), {});
  const auto cap = static_cast<std::size_t>(100 * kMiB * kCpuGrowthCapFraction);
  EXPECT_EQ(a.stats().limit, cap);
  void* p = a.allocate(cap / 2);
  try {
    a.allocate(cap / 2 + kMiB);
    FAIL() << "expected OutOfMemory at the cap";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cap "), std::string::npos) << m;
    EXPECT_NE(m.find("100.00 MiB MemAvailable"), std::string::npos) << m;
    EXPECT_NE(m.find("--memory limit=BYTES"), std::string::npos) << m;
  }
  a.deallocate(p);
  // An explicit limit replaces the cap (up to the device's total).
  CachingAllocator b(Device::cpu(5), std::make_unique<FakeMemory>(100 * kMiB),
                     MemoryPolicy::parse("limit=99M"));
  void* q = b.allocate(98 * kMiB);
  EXPECT_NE(q, nullptr);
  b.deallocate(q);
}

TEST(HostMemory, AvailableBytesAreKnownOnLinux) { EXPECT_GT(host_available_bytes(), 0u); }

TEST(CachingAllocator, LimitLargerThanDeviceIsRejected) {
  try {
    CachingAllocator a(Device::cpu(7), std::make_unique<FakeMemory>(8 * kMiB),
                       MemoryPolicy::parse("limit=16M"));
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the device"), std::string::npos) << e.what();
  }
}

TEST(CachingAllocator, PreallocateServesFromOneArenaAndCoalesces) {
  int allocs = 0;
  CachingAllocator a(Device::cpu(7), std::make_unique<FakeMemory>(16 * kMiB, &allocs),
                     MemoryPolicy::parse("preallocate=0.5"));
  EXPECT_EQ(allocs, 1);
  const std::size_t arena = a.stats().reserved;
  EXPECT_GE(arena, 8 * kMiB - 512);
  EXPECT_LE(arena, 8 * kMiB);
  void* p = a.allocate(3 * kMiB);
  void* q = a.allocate(3 * kMiB);
  EXPECT_THROW(a.allocate(3 * kMiB), OutOfMemory);
  a.deallocate(p);
  a.deallocate(q);
  // Both halves coalesced back: a 6 MiB block fits again without touching the backend.
  void* r = a.allocate(6 * kMiB);
  EXPECT_EQ(r, p);
  EXPECT_EQ(allocs, 1);
  a.deallocate(r);
}

TEST(MemoryRegistry, PolicyMustPrecedeFirstUse) {
  const Device d = Device::cpu(41);
  set_memory_policy(d, MemoryPolicy::parse("limit=64M"));
  EXPECT_EQ(allocator_for(d).policy().limit_bytes, 64u * kMiB);
  set_memory_policy(d, MemoryPolicy::parse("limit=64M"));  // same policy again is fine
  { Tensor t = Tensor::empty({16}, DType::kFloat32, d); }
  EXPECT_THROW(set_memory_policy(d, MemoryPolicy::parse("growth")), InvalidArgument);
}

TEST(MemoryRegistry, TensorsReturnMemoryToTheirDeviceAllocator) {
  const Device d = Device::cpu(42);
  auto& alloc = allocator_for(d);
  {
    Tensor t = Tensor::empty({1024}, DType::kFloat32, d);
    EXPECT_EQ(alloc.stats().in_use, 4096u);
    Tensor v = t.view(10, {10});  // a view keeps the storage alive
    t = Tensor();
    EXPECT_EQ(alloc.stats().in_use, 4096u);
  }
  EXPECT_EQ(alloc.stats().in_use, 0u);
  const auto before = alloc.stats().backend_allocs;
  for (int i = 0; i < 10; ++i) Tensor::empty({1024}, DType::kFloat32, d);
  EXPECT_EQ(alloc.stats().backend_allocs, before) << "steady-state allocations must hit the cache";
}

}  // namespace
}  // namespace mirror
