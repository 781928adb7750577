// defines: image folders as a Dataset (the Keras image_dataset_from_directory / torchvision
// ImageFolder convention: one subfolder per class), lists of image files for prediction, and the
// --color modes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mirror/data/dataset.h"
#include "mirror/data/image_decode.h"
#include "mirror/data/photo_transforms.h"

namespace mirror::data {

/// --color: the channels a sample gets. kAuto takes the first image's mode (grayscale or RGB)
/// and refuses an image of the other mode; the explicit modes convert every image.
enum class ColorMode { kAuto, kGrayscale, kRgb };
ColorMode parse_color_mode(const std::string& text);  // InvalidArgument naming --color
const char* color_mode_name(ColorMode mode);

struct ImageFolderOptions {
  int height = 0, width = 0;  // --image-size; 0, 0: the first image's size
  ColorMode color = ColorMode::kAuto;
  /// The training split's classes, for the test split (every class folder must be one of them,
  /// and labels follow their order); empty: the folder's own classes.
  std::vector<std::string> classes;
  std::shared_ptr<const ImageDecoder> decoder;  // null: cpu_image_decoder()
  int check_threads = 1;                        // threads reading the headers at load
  /// Note [Bad samples] (loader.h): a file that fails the header check is remembered as bad (and
  /// replaced when batched) instead of stopping the load.
  bool skip_bad_samples = false;
  /// Pixels divided by 255 (values in [0, 1]); false: 0..255 as stored, what a model that starts
  /// with Keras's Rescaling or Normalization reads (Note [Raw values], nn/models.h).
  bool scale_to_unit = true;
  /// The photograph recipe (photo_transforms.h): the training split crops and flips at random
  /// (decode_float_drawn), the test split (`evaluation`) resizes and centre-crops; both
  /// normalise. Needs height and width. JPEGs are decoded at a reduced scale when the crop
  /// still covers the output size at that scale (Note [Reduced decode], image_decode.h).
  PhotoRecipe photo;
  bool evaluation = false;
  /// false: decode every JPEG whole (loader-bench --full-decode measures what the reduced
  /// decode saves).
  bool reduced_decode = true;
  /// false: decode the whole (reduced) image instead of the region the crop reads (Note [Region
  /// decode], image_decode.h); the batches are the same (loader-bench --whole-image measures
  /// what the region saves).
  bool region_decode = true;
};

/// An image folder: DIR/<class>/.../<image>. Classes are the subfolders of DIR in sorted (byte)
/// order, label = position; images are the .jpg/.jpeg/.png files below each class folder
/// (recursively, not following symbolic links to folders), in sorted path order. Other files are
/// ignored (a note counts them). Each file's header is read at load (format by content, size,
/// mode); the pixels are decoded when a batch needs them, in the loader's worker threads, and
/// resized to height x width ([C, H, W] floats in [0, 1]). A rank holds the file names and
/// labels (about 12 bytes plus the name's length per image), never the pixels of more than its
/// batches in flight. DataError naming the folder or file (and the sample index) for: a missing
/// or unreadable folder, no class folder, an empty class folder, a test class the training split
/// does not have, an empty or unreadable file, a file that is not JPEG or PNG, a corrupt header,
/// and (--color auto) an image of the other mode; BadSample at the batch for a file that fails
/// to decode.
std::shared_ptr<const Dataset> load_image_folder(const std::string& dir,
                                                 const ImageFolderOptions& options = {});

/// Images to predict on: `paths` are files or folders (a folder: every image below it, in
/// sorted path order), decoded as load_image_folder does; every label is 0 and there is one
/// class. sample_name(i) of the dataset is its file (image_file_of).
std::shared_ptr<const Dataset> load_image_files(const std::vector<std::string>& paths,
                                                const ImageFolderOptions& options = {});

/// The file of sample `index` of a dataset made by load_image_folder or load_image_files;
/// InvalidArgument for another dataset.
std::string image_file_of(const Dataset& dataset, std::int64_t index);

}  // namespace mirror::data
