// defines: TempDir, a fresh directory under the system temp dir for one test, removed with it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "mirror/error.h"

namespace mirror::testing_util {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "mirror-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    MIRROR_CHECK(::mkdtemp(tmpl.data()) != nullptr, Error, "mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace mirror::testing_util
