// TensorBoardWriter in a build without protobuf: --tensorboard is a clear error.
#include "mirror/error.h"
#include "mirror/train/tensorboard.h"

namespace mirror::train {

bool TensorBoardWriter::available() { return false; }

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  throw InvalidArgument("--tensorboard " + dir.string() +
                        ": this build of Mirror has no protobuf; install libprotobuf-dev and "
                        "protobuf-compiler (scripts/setup.sh) and build again");
}

void TensorBoardWriter::scalars(std::int64_t, const std::vector<std::pair<std::string, double>>&) {}

}  // namespace mirror::train
