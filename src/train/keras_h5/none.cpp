// .weights.h5 files in a build without HDF5 (cmake/KerasWeights.cmake): a clear error naming the
// package to install. The conversions themselves (keras_weights.cpp) need no HDF5.
#include "mirror/error.h"
#include "mirror/train/keras_weights.h"

namespace mirror::train {
namespace {

[[noreturn]] void unavailable(const std::filesystem::path& path) {
  throw Unavailable("cannot read or write " + path.string() +
                    ": this build of Mirror has no HDF5, which Keras's .weights.h5 files need; "
                    "install libhdf5-dev (scripts/setup.sh) and build again");
}

}  // namespace

bool keras_weights_file_supported() { return false; }

void write_keras_weights_file(const std::filesystem::path& path,
                              const std::vector<KerasVariables>&) {
  unavailable(path);
}

std::vector<KerasVariables> read_keras_weights_file(const std::filesystem::path& path) {
  unavailable(path);
}

}  // namespace mirror::train
