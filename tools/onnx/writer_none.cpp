// serialize() in a build without protobuf: mirror-export then says what to install.
#include "mirror/error.h"
#include "tools/onnx/graph.h"

namespace mirror::onnx {

bool available() { return false; }

std::string serialize(const Graph&, const std::string&) {
  throw Unavailable(
      "mirror-export needs a build with protobuf (this one was configured without it): install "
      "libprotobuf-dev and protobuf-compiler (scripts/setup.sh does) and rebuild");
}

}  // namespace mirror::onnx
