// array_files and shard_pairs: what a --train-x / --train-y argument names (a file, a folder of
// shards or a glob), and the x / y pairing of shards.
#include <glob.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "data/array_file.h"
#include "mirror/data/arrays.h"
#include "mirror/error.h"

namespace mirror::data {
namespace fs = std::filesystem;
namespace {

/// Natural order: runs of digits compare as numbers (x-2 < x-10), the rest byte by byte.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      std::string_view da(a.data() + i, ei - i), db(b.data() + j, ej - j);
      while (da.size() > 1 && da[0] == '0') da.remove_prefix(1);
      while (db.size() > 1 && db[0] == '0') db.remove_prefix(1);
      if (da.size() != db.size()) return da.size() < db.size();
      if (da != db) return da < db;
      i = ei, j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j || (a.size() - i == b.size() - j && a < b);
}

bool is_pattern(const std::string& spec) {
  return spec.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  for (std::size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
    std::error_code ec;
    if (fs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  MIRROR_CHECK(!out.empty(), DataError,
               "no file matches " + pattern +
                   (rc == GLOB_ABORTED ? " (a folder on the way cannot be read)" : "") +
                   "; check the pattern (quote it, so the shell does not expand it)");
  return out;
}

std::vector<std::string> folder_files(const std::string& dir, char role) {
  const std::string prefix = std::string(1, role) + "-";
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() < 4 || name.substr(name.size() - 4) != ".npy")
      continue;
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) out.push_back(it->path().string());
  }
  MIRROR_CHECK(!ec, DataError, "cannot list the folder " + dir + ": " + ec.message());
  MIRROR_CHECK(!out.empty(), DataError,
               "the folder " + dir + " holds no " + prefix +
                   "*.npy file; a folder of shards holds x-00000.npy, x-00001.npy, ... and "
                   "y-00000.npy, y-00001.npy, ... (or give a glob, e.g. '" + dir +
                   "/images-*.npy')");
  return out;
}

/// A shard's number and what follows it ("00003.npy" of "x-00003.npy"): the names of a pair
/// must agree in it. Empty when the name has no digit.
std::string shard_key(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const std::size_t digit = name.find_first_of("0123456789");
  return digit == std::string::npos ? "" : name.substr(digit);
}

}  // namespace

std::vector<std::string> array_files(const std::string& spec, char role) {
  std::error_code ec;
  std::vector<std::string> out;
  if (fs::is_directory(spec, ec))
    out = folder_files(spec, role);
  else if (is_pattern(spec) && !fs::exists(spec, ec))
    out = glob_files(spec);
  else
    return {spec};  // one file (missing or unreadable: its reader says so)
  std::sort(out.begin(), out.end(), natural_less);
  return out;
}

namespace detail {

std::vector<std::pair<std::string, std::string>> shard_pairs(const std::string& x_spec,
                                                             const std::string& y_spec) {
  const std::vector<std::string> xs = array_files(x_spec, 'x'), ys = array_files(y_spec, 'y');
  if (xs.size() != ys.size()) {
    // Name the first shard without a partner, by number where the names have one.
    std::set<std::string> x_keys, y_keys;
    for (const auto& f : xs) x_keys.insert(shard_key(f));
    for (const auto& f : ys) y_keys.insert(shard_key(f));
    std::string lonely;
    for (const auto& f : xs)
      if (lonely.empty() && !y_keys.count(shard_key(f))) lonely = f;
    for (const auto& f : ys)
      if (lonely.empty() && !x_keys.count(shard_key(f))) lonely = f;
    throw DataError(x_spec + " names " + std::to_string(xs.size()) + " x file(s) but " + y_spec +
                    " names " + std::to_string(ys.size()) +
                    " y file(s); shards come in pairs (x-00000.npy with y-00000.npy, ...)" +
                    (lonely.empty() ? "" : ": " + lonely + " has no partner"));
  }
  // Two plain files pair whatever their names; listed shards pair by number.
  const bool files = xs.size() == 1 && xs[0] == x_spec && ys[0] == y_spec;
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    MIRROR_CHECK(files || shard_key(xs[i]) == shard_key(ys[i]), DataError,
                 "shard " + std::to_string(i) + " pairs " + xs[i] + " with " + ys[i] +
                     ", whose numbers differ; name the pairs alike (x-00003.npy with "
                     "y-00003.npy)");
    out.emplace_back(xs[i], ys[i]);
  }
  return out;
}

}  // namespace detail
}  // namespace mirror::data
