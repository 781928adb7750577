// defines: ImageAugment, the random crops and horizontal flips the training loader applies to
// image samples, its flag syntax, and augment_image (one sample, in place).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "mirror/tensor.h"

namespace mirror::data {

/// What torchvision's RandomCrop(size, padding=P) followed by RandomHorizontalFlip() do, or
/// Keras's RandomTranslation and RandomFlip("horizontal"): the standard augmentation of the
/// published image results. Only the training split is augmented; evaluation sees the images
/// as they are.
struct ImageAugment {
  /// Pad P zero pixels on every side and crop back to H x W at a random offset: the image moves
  /// by -P..P pixels along each axis, the uncovered border reads 0. 0 = no crop.
  int crop_padding = 0;
  /// Mirror left-right with probability 1/2.
  bool flip_horizontal = false;

  bool enabled() const { return crop_padding > 0 || flip_horizontal; }
  bool operator==(const ImageAugment&) const = default;
};

/// "none", or a comma-separated list of "crop=P" (1 <= P <= 64) and "flip", e.g. "crop=4,flip".
/// Throws InvalidArgument naming the bad item.
ImageAugment parse_image_augment(std::string_view spec);

/// The canonical spelling: "none", "crop=4", "flip" or "crop=4,flip".
std::string to_string(const ImageAugment& augment);

/// Note [Augmentation draws]: a sample's crop offset and flip are a function of (seed, epoch,
/// sample index) only: never of the replica, the rank count or the thread that assembles the
/// batch. Augmented runs therefore keep exact sharding (Note [Exact sharding], loader.h), and a
/// resumed run draws what the uninterrupted run would have drawn.
///
/// Transforms one [C, H, W] float sample in place. `chw` must have three positive dimensions
/// and crop_padding must be below H and W (the Loader checks both with a clear error).
void augment_image(const ImageAugment& augment, std::uint64_t seed, int epoch,
                   std::int64_t sample, const Shape& chw, float* pixels);

/// The random stream of (seed, epoch, sample) that augment_image draws from; the photograph
/// recipe (photo_transforms.h) draws its crops and flips from the same stream, so they share
/// Note [Augmentation draws].
std::mt19937_64 augment_rng(std::uint64_t seed, int epoch, std::int64_t sample);

}  // namespace mirror::data
