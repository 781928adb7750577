// defines: tar shards in WebDataset's layout as an image Dataset, the tar member listing they
// are indexed by, and load_image_input, which picks image folder or tar shards for a path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/data/image_folder.h"

namespace mirror::data {

/// One regular-file member of a tar: its full name (ustar prefix, GNU long name or pax path
/// applied) and where its data lies in the file.
struct TarMember {
  std::string name;
  std::uint64_t offset = 0, size = 0;
};

/// The regular-file members of the tar file `path`, in archive order, found by reading the
/// 512-byte headers and seeking past the data (nothing else is read but GNU long names and pax
/// headers). Understands ustar (name prefix), GNU long names ('L') and sizes in base 256, and pax
/// extended headers ('x': path and size); directories, links and other entries are passed over.
/// DataError naming the file and the byte offset for: a header whose checksum does not match
/// (a corrupt file, or not a tar), a member whose data runs past the end of the file or a file
/// that ends without the end-of-archive block (truncated), a malformed size or pax record.
std::vector<TarMember> list_tar_members(const std::string& path);

/// The shard files `spec` names, sorted by path: a .tar file, a folder (the .tar files directly
/// in it), or a glob pattern (`shards/train-*.tar`; a path that exists as written is never read
/// as a pattern). DataError for a glob matching nothing, a
/// folder holding no .tar file, a path that does not exist.
std::vector<std::string> tar_shard_files(const std::string& spec);

/// Tar shards in WebDataset's layout as image samples: members are grouped by key (the name up
/// to the first dot of its last path component: `a/b/0001.jpg` and `a/b/0001.cls` are one
/// sample), consecutive in the archive, as WebDataset reads them. A sample is an image member
/// (.jpg, .jpeg or .png) and a label member (.cls: an integer class, or a class name; text,
/// whitespace trimmed); members of other extensions are passed over (a note counts them).
/// Samples follow shard order (sorted paths), then archive order, which is what
/// scripts/images_to_shards.py writes from the sorted folder, so the shards of a folder are the
/// same dataset, sample for sample.
///
/// Classes: when every label is an integer, classes are 0..max (named "0", "1", ...); when
/// they are names, classes are their sorted set, as a folder's subfolders are. A split given
/// `options.classes` (the test split) takes them: names are looked up, integers must be below
/// their count. Everything else is as load_image_folder: the same decoders, --color,
/// --image-size, photograph recipe and bad-sample policy; the images are read from the shards
/// with pread when a batch needs them (Note [Tar shards read at random], tar_shards.cpp).
///
/// DataError naming the shard and the member for: everything list_tar_members refuses, an image
/// without a label or a label without an image (with options.skip_bad_samples such a sample is
/// left out and counted in a note instead), two images or two labels under one key, an empty
/// or overlong label, integer and named labels mixed, a negative class, a class the training
/// split does not have, and no sample at all; headers and decoding fail as folders' do.
std::shared_ptr<const Dataset> load_tar_shards(const std::string& spec,
                                               const ImageFolderOptions& options = {});

/// Images to predict on (mirror-predict --input-images): every image member of the shards, in
/// order, whether or not a .cls member goes with it (labels are not read); every label is 0 and
/// there is one class, as load_image_files. image_file_of(dataset, i) is "SHARD:MEMBER".
std::shared_ptr<const Dataset> load_tar_shard_images(const std::string& spec,
                                                     const ImageFolderOptions& options = {});

/// What --train-images, --test-images and loader-bench --images read: tar shards when `path`
/// is a .tar file, a glob pattern or a folder holding .tar files, else an image folder.
/// DataError for a folder holding both class subfolders and .tar files.
std::shared_ptr<const Dataset> load_image_input(const std::string& path,
                                                const ImageFolderOptions& options = {});

/// True when load_image_input reads `path` as tar shards.
bool is_tar_shards(const std::string& path);

}  // namespace mirror::data
