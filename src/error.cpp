#include "mirror/error.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace mirror {

namespace {
bool debug_from_environment() {
  const char* v = std::getenv("MIRROR_DEBUG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
std::atomic<bool>& debug_flag() {
  static std::atomic<bool> flag{debug_from_environment()};
  return flag;
}
}  // namespace

bool debug_messages() { return debug_flag().load(); }
void set_debug_messages(bool on) { debug_flag().store(on); }

std::string message_for(const std::exception& e) {
  std::string text = e.what();
  if (!debug_messages()) return text;
  if (const auto* error = dynamic_cast<const Error*>(&e); error && !error->where().empty())
    text += " [" + error->where() + "]";
  return text;
}

}  // namespace mirror

namespace mirror::detail {

std::string where(const std::source_location& loc) {
  std::string file = loc.file_name();
  // Keep paths short and stable: from the project's top folders on.
  for (const char* top :
       {"/src/", "/include/", "/distributed/", "/examples/", "/tools/", "/tests/"}) {
    auto pos = file.rfind(top);
    if (pos != std::string::npos) {
      file = file.substr(pos + 1);
      break;
    }
  }
  return file + ":" + std::to_string(loc.line());
}

}  // namespace mirror::detail
