// RawMemory for host memory: aligned malloc. Free and total come from /proc/meminfo
// (MemAvailable, MemTotal); they bound the growth policy (Note [CPU growth cap], memory.h).
#include <cstdlib>
#include <fstream>
#include <string>

#include "cpu/cpu_backend.h"

namespace mirror {
namespace {

std::size_t meminfo_field(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::size_t kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit) {
    if (name == key) return kb * 1024;
  }
  return 0;
}

class CpuRawMemory final : public RawMemory {
 public:
  void* allocate(std::size_t bytes) override { return std::aligned_alloc(256, bytes); }
  void deallocate(void* ptr, std::size_t) noexcept override { std::free(ptr); }
  std::size_t free_bytes() const override { return meminfo_field("MemAvailable:"); }
  std::size_t total_bytes() const override { return meminfo_field("MemTotal:"); }
};

}  // namespace

std::size_t host_available_bytes() { return meminfo_field("MemAvailable:"); }

std::unique_ptr<RawMemory> make_cpu_raw_memory() { return std::make_unique<CpuRawMemory>(); }

}  // namespace mirror
