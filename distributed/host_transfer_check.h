// defines: check_pinned_transfer, what a pinned HostBuffer
// (distributed/cuda/pinned_host_buffer.cpp) checks before each copy, kept free of CUDA so
// tests/dist_host_transfer_test.cpp runs it here.
#pragma once

#include <cstddef>
#include <string>

#include "mirror/device.h"
#include "mirror/error.h"

namespace mirror::dist::detail {

/// A pinned buffer is registered with the CUDA context of `home` and records its transfer event
/// there; a copy enqueued on another device's stream fails with "invalid resource handle". So
/// the tensor (`tensor`, its device `where` and size `nbytes`) must live on `home` and fit in
/// the buffer's `capacity`. Throws InvalidArgument naming both devices and what to do.
inline void check_pinned_transfer(const char* op, const std::string& tensor, Device where,
                                  std::size_t nbytes, Device home, std::size_t capacity) {
  const std::string what = std::string("HostBuffer::") + op + ": ";
  MIRROR_CHECK(
      where == home, InvalidArgument,
      what + "this pinned buffer was made for " + home.str() + " but the tensor " + tensor +
          " is on " + where.str() +
          "; copy through a buffer made for the tensor's device (make_host_buffer(bytes, " +
          where.str() + ")) or move the tensor to " + home.str() + " first");
  MIRROR_CHECK(nbytes <= capacity, InvalidArgument,
               what + "the tensor " + tensor + " has " + std::to_string(nbytes) +
                   " bytes, more than the buffer's " + std::to_string(capacity) +
                   "; make a larger host buffer");
}

}  // namespace mirror::dist::detail
