// defines: the mirror::Error family and MIRROR_CHECK, the one way this project reports failure.
#pragma once

#include <exception>
#include <source_location>
#include <stdexcept>
#include <string>
#include <utility>

namespace mirror {

/// Base of every error Mirror throws. Messages say what was expected, what was found, and
/// what to do about it.
/// what() is the user-facing message only; where() is the "file:line" of the check that threw
/// (empty when thrown directly), shown only in debug mode (see message_for).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  const std::string& where() const noexcept { return where_; }
  void set_where(std::string where) { where_ = std::move(where); }

 private:
  std::string where_;
};

/// A caller passed something unusable: a wrong shape, an unknown flag, a bad device string.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A device allocator could not satisfy a request (see Allocator for the message fields).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

/// Input data is malformed: truncated files, bad headers, labels out of range, bad UTF-8.
class DataError : public Error {
 public:
  using Error::Error;
};

/// A collective failed, timed out, or ranks disagree.
class CommError : public Error {
 public:
  using Error::Error;
};

/// A capability is not available here (no GPU, built without CUDA, ...).
class Unavailable : public Error {
 public:
  using Error::Error;
};

/// Debug mode: fatal-error printers append the thrower's "[file:line]". On when MIRROR_DEBUG is
/// set to anything but "" or "0", or after set_debug_messages(true) (mirror-train --debug).
bool debug_messages();
void set_debug_messages(bool on);

/// The text a fatal-error printer shows for `e`: what(), plus " [file:line]" in debug mode.
std::string message_for(const std::exception& e);

namespace detail {
/// "file:line" of a source location, for check macros.
std::string where(const std::source_location& loc);

/// `error` with its location set (MIRROR_CHECK's throw expression).
template <class E>
E located(E error, const std::source_location& loc) {
  error.set_where(where(loc));
  return error;
}
}  // namespace detail

}  // namespace mirror

/// Throws `Type(message)` (a mirror::Error) carrying file:line when `cond` is false.
/// `message` is any expression convertible to std::string; it is evaluated only on failure.
#define MIRROR_CHECK(cond, Type, message)                               \
  do {                                                                  \
    if (!(cond)) [[unlikely]] {                                         \
      throw ::mirror::detail::located(Type(std::string(message)),       \
                                      std::source_location::current()); \
    }                                                                   \
  } while (0)
