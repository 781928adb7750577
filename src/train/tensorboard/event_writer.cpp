// TensorBoardWriter's events, as protobuf messages of the vendored schema subset
// (src/train/proto/tensorboard_event.proto). Built only when CMake finds protobuf.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "mirror/error.h"
#include "mirror/train/tensorboard.h"
#include "tensorboard_event.pb.h"

namespace mirror::train {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char host[256] = "";
  if (::gethostname(host, sizeof host - 1) != 0) return "localhost";
  return host;
}

}  // namespace

bool TensorBoardWriter::available() { return true; }

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const double now = unix_seconds();
  // TensorBoard finds files by "tfevents" in the name; the pid keeps two runs apart.
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<std::int64_t>(now)) + "." +
                 host_name() + "." + std::to_string(::getpid()));
  file_ = std::fopen(path_.c_str(), "wb");
  MIRROR_CHECK(file_ != nullptr, InvalidArgument,
               "cannot create an event file in '" + dir.string() + "': " + std::strerror(errno) +
                   " (check --tensorboard)");
  tensorboard::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
}

void TensorBoardWriter::scalars(std::int64_t step,
                                const std::vector<std::pair<std::string, double>>& values) {
  if (!file_) return;
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

}  // namespace mirror::train
