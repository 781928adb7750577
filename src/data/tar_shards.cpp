// Tar shards in WebDataset's layout: the shard set a path names, the index of (shard, offset,
// size) built from the tar headers at load, the labels and classes, and the per-sample reads.
#include "mirror/data/tar_shards.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <thread>
#include <unordered_map>

#include "data/image_samples.h"
#include "data/tar_file.h"
#include "mirror/error.h"

namespace mirror::data {
namespace fs = std::filesystem;
namespace {

// Note [Tar shards read at random]: WebDataset streams each shard from its start and gives
// each rank (and each worker) its own shards. Mirror indexes the shards instead (the 512-byte
// headers only, at load) and reads each image with one pread when a batch needs it. Then a
// tar shard set is one random-access dataset like a folder: the epoch's order is a permutation
// of all samples, a global batch is the same at every rank count (Note [Exact sharding],
// loader.h), a run resumed at step k reads exactly the samples the uninterrupted run read, and
// the bad-sample policy replaces a sample by the next one in dataset order, as it does for
// folders. Streaming per rank would make the samples a rank sees, and so the weights, depend on
// the number of ranks and shards, and resuming mid-shard would need the stream position. The
// cost is that reads are not sequential: on local disks and the page cache a pread of a
// 100 KB member costs what reading a 100 KB file does (without the open: up to kKeepOpen shards
// stay open), and the index holds about 28 bytes plus the member's name per sample.

constexpr std::int64_t kMaxIntegerClass = 1'000'000;  // "class 4000000000" is an id, not a class
constexpr std::size_t kMaxLabelBytes = 256;
constexpr std::size_t kKeepOpen = 256;  // more shards than this are opened per read

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

bool is_tar_name(const std::string& name) {
  return name.size() > 4 && lower(name.substr(name.size() - 4)) == ".tar";
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const std::size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

/// WebDataset's split of a member name into key and extension: the extension starts at the
/// first dot of the last path component (`a/b/0001.seg.png`: key `a/b/0001`, extension
/// `seg.png`); a component with no dot or starting with one has no key.
bool split_key(const std::string& name, std::string& key, std::string& ext) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  const std::size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  key = name.substr(0, dot);
  ext = lower(name.substr(dot + 1));
  return true;
}

/// What a label text says: an integer (digits, optionally after '-') or a name.
bool is_integer(const std::string& text) {
  const std::size_t digits = text[0] == '-' ? 1 : 0;
  return text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos;
}

struct Pending {             // a sample of one shard, before the classes are known
  std::string image, label;  // member names
  std::uint64_t offset = 0, size = 0;
  std::string text;  // the label, trimmed
};

/// One shard's samples, found from its members; `left_out` counts the incomplete groups that
/// options.skip_bad_samples leaves out (else their error is thrown).
struct ShardIndex {
  std::vector<Pending> samples;
  std::int64_t ignored = 0, left_out = 0;
  std::string ignored_example, left_out_first;
};

/// How a shard's members become samples: the bad-sample policy for incomplete groups, or (for
/// prediction) every image alone, its label members ignored.
struct IndexRules {
  bool skip_bad_samples = false;
  bool images_only = false;
};

ShardIndex index_shard(const std::string& path, IndexRules rules) {
  const std::vector<TarMember> members = list_tar_members(path);
  const detail::ReadOnlyFile file(path);
  ShardIndex out;
  std::string key;
  const TarMember *image = nullptr, *label = nullptr;
  auto finish = [&] {  // the group of `key` ends
    if (rules.images_only) {
      if (image) out.samples.push_back({image->name, "", image->offset, image->size, ""});
      image = nullptr;
      return;
    }
    std::string problem;
    if (image && !label)
      problem = "the image " + image->name + " has no label member (" + key + ".cls)";
    if (label && !image)
      problem =
          "the label " + label->name + " has no image member (" + key + ".jpg, .jpeg or .png)";
    if (!problem.empty()) {
      MIRROR_CHECK(rules.skip_bad_samples, DataError,
                   path + ": " + problem +
                       "; every sample needs both (WebDataset's layout: members with the same "
                       "key, one after the other), or pass --skip-bad-samples to leave such "
                       "samples out");
      if (out.left_out++ == 0) out.left_out_first = path + ": " + problem;
    } else if (image && label) {
      MIRROR_CHECK(label->size <= kMaxLabelBytes, DataError,
                   path + ": the label " + label->name + " is " + std::to_string(label->size) +
                       " bytes; a .cls member holds one class (an integer or a name)");
      const std::vector<std::uint8_t> bytes =
          file.read_at(label->offset, static_cast<std::size_t>(label->size));
      const std::string text = trim(std::string(bytes.begin(), bytes.end()));
      MIRROR_CHECK(!text.empty() && text.find('\0') == std::string::npos, DataError,
                   path + ": the label " + label->name +
                       (text.empty() ? " is empty" : " holds a NUL byte") +
                       "; a .cls member holds one class (an integer or a name)");
      out.samples.push_back({image->name, label->name, image->offset, image->size, text});
    }
    image = label = nullptr;
  };
  for (const TarMember& m : members) {
    std::string k, ext;
    if (!split_key(m.name, k, ext)) {
      if (out.ignored++ == 0) out.ignored_example = path + ":" + m.name;
      continue;
    }
    if (k != key) finish();
    key = k;
    const bool is_image = ext == "jpg" || ext == "jpeg" || ext == "png";
    if (rules.images_only && ext == "cls") continue;
    if (!is_image && ext != "cls") {
      if (out.ignored++ == 0) out.ignored_example = path + ":" + m.name;
      continue;
    }
    const TarMember*& slot = is_image ? image : label;
    MIRROR_CHECK(slot == nullptr, DataError,
                 path + ": the key " + key + " has two " + (is_image ? "images" : "labels") + " (" +
                     slot->name + " and " + m.name +
                     "); a sample has one image and one .cls label");
    slot = &m;
  }
  finish();
  return out;
}

/// Every shard indexed on up to `threads` threads; the first error in shard order is thrown,
/// so the message does not depend on the thread count.
std::vector<ShardIndex> index_shards(const std::vector<std::string>& shards, int threads,
                                     IndexRules rules) {
  std::vector<ShardIndex> out(shards.size());
  std::vector<std::exception_ptr> errors(shards.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t s; (s = next++) < shards.size();) {
      try {
        out[s] = index_shard(shards[s], rules);
      } catch (...) {
        errors[s] = std::current_exception();
      }
    }
  };
  const int n = static_cast<int>(
      std::clamp<std::int64_t>(threads, 1, static_cast<std::int64_t>(shards.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

std::string shard_member(const std::string& shard, const std::string& member) {
  return shard + ":" + member;
}

/// File identity at load, for check_unchanged.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  std::int64_t mtime_ns = 0;
};

FileStamp stamp_of(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size,
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

class TarShards : public detail::ImageSamples {
 public:
  TarShards(std::string spec, std::vector<std::string> shards, std::vector<std::string> classes,
            const ImageFolderOptions& o)
      : ImageSamples(std::move(spec), std::move(classes), o), shards_(std::move(shards)) {
    for (const std::string& s : shards_) {
      struct stat st {};
      MIRROR_CHECK(::stat(s.c_str(), &st) == 0, DataError, "cannot read " + s);
      stamps_.push_back(stamp_of(st));
      if (shards_.size() <= kKeepOpen) open_.push_back(std::make_unique<detail::ReadOnlyFile>(s));
    }
  }
  void begin_shard() { shard_begin_.push_back(static_cast<std::int64_t>(offsets_.size())); }
  void add(const Pending& p, std::int32_t label) {
    names_ += p.image;
    ends_.push_back(names_.size());
    offsets_.push_back(p.offset);
    sizes_.push_back(p.size);
    add_label(label);
  }
  std::string sample_name(std::int64_t index) const override {
    check_index(index);
    const std::size_t i = static_cast<std::size_t>(index);
    const std::size_t begin = i == 0 ? 0 : ends_[i - 1];
    return shard_member(shards_[shard_of(index)], names_.substr(begin, ends_[i] - begin));
  }
  void check_unchanged() const override;

 private:
  std::size_t shard_of(std::int64_t index) const {
    const auto it = std::upper_bound(shard_begin_.begin(), shard_begin_.end(), index);
    return static_cast<std::size_t>(it - shard_begin_.begin()) - 1;
  }
  std::vector<std::uint8_t> read_sample(std::int64_t index, std::size_t limit) const override {
    check_index(index);
    const std::size_t i = static_cast<std::size_t>(index);
    const std::uint64_t want = std::min<std::uint64_t>(sizes_[i], limit);
    const std::size_t shard = shard_of(index);
    std::unique_ptr<detail::ReadOnlyFile> opened;
    if (open_.empty()) opened = std::make_unique<detail::ReadOnlyFile>(shards_[shard]);
    const detail::ReadOnlyFile& file = open_.empty() ? *opened : *open_[shard];
    std::vector<std::uint8_t> bytes = file.read_at(offsets_[i], static_cast<std::size_t>(want));
    MIRROR_CHECK(bytes.size() == want, DataError,
                 sample_name(index) + ": the shard ends before the member's " +
                     std::to_string(sizes_[i]) +
                     " bytes: it was cut or rewritten after it was indexed");
    return bytes;
  }
  std::string what_it_holds() const override {
    return std::to_string(size()) + " images in " + std::to_string(shards_.size()) +
           " tar shard(s)";
  }

  std::vector<std::string> shards_;
  std::vector<FileStamp> stamps_;
  std::vector<std::unique_ptr<detail::ReadOnlyFile>> open_;  // every shard, when few enough
  std::vector<std::int64_t> shard_begin_;                    // the first sample of each shard
  std::vector<std::uint64_t> offsets_, sizes_;
  std::string names_;              // every image member's name, one after the other
  std::vector<std::size_t> ends_;  // where each name ends in names_
};

void TarShards::check_unchanged() const {
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    struct stat st {};
    MIRROR_CHECK(::stat(shards_[s].c_str(), &st) == 0, DataError,
                 shards_[s] +
                     " is gone since training started; the shards of a dataset must "
                     "stay in place while it trains");
    const FileStamp now = stamp_of(st), then = stamps_[s];
    MIRROR_CHECK(now.device == then.device && now.inode == then.inode && now.size == then.size &&
                     now.mtime_ns == then.mtime_ns,
                 DataError,
                 shards_[s] +
                     " was modified or replaced since training started; the shards "
                     "of a dataset must not change while it trains (their index of "
                     "members would be wrong): write new shards to a new folder");
  }
}

/// The classes of a training split (none given): 0..max when every label is an integer, else
/// the sorted names; DataError for integers and names mixed or a negative class.
std::vector<std::string> classes_of(const std::vector<ShardIndex>& shards,
                                    const std::vector<std::string>& files) {
  const Pending *integer = nullptr, *name = nullptr;
  std::size_t integer_shard = 0, name_shard = 0;
  std::int64_t max = -1;
  std::vector<std::string> names;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    for (const Pending& p : shards[s].samples) {
      if (!is_integer(p.text)) {
        if (!name) name = &p, name_shard = s;
        names.push_back(p.text);
        continue;
      }
      if (!integer) integer = &p, integer_shard = s;
      const std::string where = shard_member(files[s], p.label);
      MIRROR_CHECK(p.text[0] != '-', DataError,
                   where + " holds the class " + p.text + "; classes are 0 or more");
      MIRROR_CHECK(p.text.size() <= 7 && std::stoll(p.text) <= kMaxIntegerClass, DataError,
                   where + " holds the class " + p.text + ", more than " +
                       std::to_string(kMaxIntegerClass) +
                       ": integer classes count from 0 (relabel ids as 0..K-1), or write the "
                       "classes as names");
      max = std::max<std::int64_t>(max, std::stoll(p.text));
    }
  }
  MIRROR_CHECK(!(integer && name), DataError,
               "the labels mix integer classes (" +
                   shard_member(files[integer_shard], integer->label) + ": " + integer->text +
                   ") and class names (" + shard_member(files[name_shard], name->label) + ": '" +
                   name->text + "'); a shard set labels every sample one way");
  if (name) {
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }
  std::vector<std::string> out;
  for (std::int64_t k = 0; k <= max; ++k) out.push_back(std::to_string(k));
  return out;
}

/// The label of `p` among `classes`: a name is looked up; when the classes are 0..K-1 (integer
/// labels) an integer must be below K. DataError naming the member otherwise.
std::int32_t label_of(const Pending& p, const std::string& where,
                      const std::vector<std::string>& classes,
                      const std::unordered_map<std::string, std::int32_t>& lookup,
                      bool integer_classes) {
  const std::string have = std::to_string(classes.size()) + " classes";
  if (integer_classes) {
    MIRROR_CHECK(is_integer(p.text), DataError,
                 where + " holds '" + p.text +
                     "', not an integer class; the training labels "
                     "are integers (" +
                     have + ", 0.." + std::to_string(classes.size() - 1) + ")");
    const bool in_range = p.text[0] != '-' && p.text.size() <= 7 &&
                          std::stoll(p.text) < static_cast<std::int64_t>(classes.size());
    MIRROR_CHECK(in_range, DataError,
                 where + " holds the class " + p.text + ", but the training labels have " + have +
                     " (0.." + std::to_string(classes.size() - 1) + ")");
    return static_cast<std::int32_t>(std::stoll(p.text));
  }
  const auto it = lookup.find(p.text);
  MIRROR_CHECK(it != lookup.end(), DataError,
               where + " holds the class '" + p.text + "', which the training labels do not " +
                   "have (their " + have + ": " + classes.front() +
                   (classes.size() > 1 ? ", " + classes[1] : "") +
                   (classes.size() > 2 ? ", ..." : "") + ")");
  return it->second;
}

void counted_notes(const std::vector<ShardIndex>& shards, const std::string& spec,
                   std::vector<std::string>& notes) {
  std::int64_t ignored = 0, left_out = 0;
  std::string ignored_example, left_out_first;
  for (const ShardIndex& s : shards) {
    if (ignored == 0 && s.ignored > 0) ignored_example = s.ignored_example;
    if (left_out == 0 && s.left_out > 0) left_out_first = s.left_out_first;
    ignored += s.ignored;
    left_out += s.left_out;
  }
  if (ignored > 0)
    notes.push_back(spec + ": passed over " + std::to_string(ignored) +
                    " member(s) that are not .jpg/.jpeg/.png images or .cls labels (e.g. " +
                    ignored_example + ")");
  if (left_out > 0)
    notes.push_back(spec + ": left out " + std::to_string(left_out) +
                    " sample(s) without a label or without an image (--skip-bad-samples); the "
                    "first: " +
                    left_out_first);
}

}  // namespace

std::vector<std::string> tar_shard_files(const std::string& spec) {
  std::vector<std::string> out;
  std::error_code ec;
  if (has_glob_chars(spec) && !fs::exists(spec, ec)) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    MIRROR_CHECK(rc == 0 || rc == GLOB_NOMATCH, DataError,
                 "cannot expand the shard pattern " + spec + " (a read error)");
    MIRROR_CHECK(!out.empty(), DataError,
                 "the shard pattern " + spec + " matches no file; give the shards' folder or a " +
                     "pattern such as shards/train-*.tar (quoted, so the shell leaves it alone)");
  } else if (fs::is_directory(spec, ec)) {
    for (fs::directory_iterator it(spec, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (is_tar_name(it->path().filename().string()) && it->is_regular_file(type_ec))
        out.push_back(it->path().string());
    }
    MIRROR_CHECK(!ec, DataError, "cannot list the folder " + spec + ": " + ec.message());
    MIRROR_CHECK(!out.empty(), DataError, spec + " holds no .tar shard");
  } else {
    MIRROR_CHECK(fs::exists(spec, ec), DataError,
                 spec +
                     " does not exist; give a .tar shard, a folder of shards or a pattern "
                     "such as shards/train-*.tar");
    out.push_back(spec);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

/// The shards of `spec` indexed under `rules`; DataError when they hold no sample.
std::vector<ShardIndex> indexed(const std::string& spec, const std::vector<std::string>& files,
                                const ImageFolderOptions& options, IndexRules rules) {
  std::vector<ShardIndex> shards = index_shards(files, options.check_threads, rules);
  std::int64_t total = 0;
  for (const ShardIndex& s : shards) total += static_cast<std::int64_t>(s.samples.size());
  MIRROR_CHECK(total > 0, DataError,
               spec + " (" + std::to_string(files.size()) + " shard(s), the first " +
                   files.front() + ") holds no sample: no key with an image member (.jpg, " +
                   ".jpeg or .png)" + (rules.images_only ? "" : " and a .cls label member") +
                   ", as WebDataset's layout has them");
  return shards;
}

/// Headers checked, notes gathered: the dataset ready.
std::shared_ptr<const Dataset> finished(std::shared_ptr<TarShards> ds,
                                        const std::vector<ShardIndex>& shards,
                                        const std::string& spec) {
  ds->check_headers();
  std::vector<std::string> notes;
  counted_notes(shards, spec, notes);
  for (const std::string& n : ds->notes()) notes.push_back(n);
  ds->set_notes(std::move(notes));
  return ds;
}

}  // namespace

std::shared_ptr<const Dataset> load_tar_shards(const std::string& spec,
                                               const ImageFolderOptions& options) {
  const std::vector<std::string> files = tar_shard_files(spec);
  const std::vector<ShardIndex> shards =
      indexed(spec, files, options, {.skip_bad_samples = options.skip_bad_samples});
  std::vector<std::string> classes =
      options.classes.empty() ? classes_of(shards, files) : options.classes;
  bool integer_classes = true;
  std::unordered_map<std::string, std::int32_t> lookup;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    integer_classes = integer_classes && classes[k] == std::to_string(k);
    lookup.emplace(classes[k], static_cast<std::int32_t>(k));
  }
  auto ds = std::make_shared<TarShards>(spec, files, classes, options);
  for (std::size_t s = 0; s < shards.size(); ++s) {
    ds->begin_shard();
    for (const Pending& p : shards[s].samples)
      ds->add(p, label_of(p, shard_member(files[s], p.label), classes, lookup, integer_classes));
  }
  return finished(ds, shards, spec);
}

std::shared_ptr<const Dataset> load_tar_shard_images(const std::string& spec,
                                                     const ImageFolderOptions& options) {
  const std::vector<std::string> files = tar_shard_files(spec);
  const std::vector<ShardIndex> shards = indexed(spec, files, options, {.images_only = true});
  auto ds = std::make_shared<TarShards>(spec, files, std::vector<std::string>{"images"}, options);
  for (const ShardIndex& shard : shards) {
    ds->begin_shard();
    for (const Pending& p : shard.samples) ds->add(p, 0);
  }
  return finished(ds, shards, spec);
}

bool is_tar_shards(const std::string& path) {
  std::error_code ec;
  if (has_glob_chars(path) && !fs::exists(path, ec)) return true;
  if (!fs::is_directory(path, ec)) return is_tar_name(path);
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (is_tar_name(it->path().filename().string()) && it->is_regular_file(type_ec)) return true;
  }
  return false;
}

std::shared_ptr<const Dataset> load_image_input(const std::string& path,
                                                const ImageFolderOptions& options) {
  if (!is_tar_shards(path)) return load_image_folder(path, options);
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      MIRROR_CHECK(!it->is_directory(type_ec), DataError,
                   path + " holds both .tar shards and the folder " +
                       it->path().filename().string() +
                       ": is it an image folder (one subfolder per class) or a folder of "
                       "shards? Give the shards as " +
                       path + "/*.tar, or move them");
    }
  }
  return load_tar_shards(path, options);
}

}  // namespace mirror::data
