// defines: PhotoRecipe, the transforms of photographs (torchvision's ImageNet recipe: random
// resized crops, horizontal flips and per-channel normalisation for training; resize the short
// side and centre-crop for evaluation), their flag syntax, the crop geometry, and
// resample_to_chw, the one-pass antialiased resize that writes the model's input.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "mirror/data/image_decode.h"

namespace mirror::data {

/// What `--crop random-resized[=MIN,MAX] --flip --normalize ... --eval-resize R --eval-crop C`
/// ask for. The training split gets the random crop and the flip; the test split the resize and
/// centre crop; both the normalisation. Output size = the model's image size (--image-size).
struct PhotoRecipe {
  /// torchvision's RandomResizedCrop(size, scale=(scale_min, scale_max), ratio=(3/4, 4/3)).
  bool random_resized_crop = false;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  /// RandomHorizontalFlip(p=0.5), after the crop.
  bool flip = false;
  /// Normalize(mean, std) on values in [0, 1]: one value each (every channel) or one per
  /// channel; empty = none.
  std::vector<float> mean, std;
  /// Evaluation: Resize(eval_resize) (the short side) then CenterCrop to the output size.
  /// 0 = resize the whole image to the output size (as without the recipe).
  int eval_resize = 0;

  bool training_random() const { return random_resized_crop || flip; }
  bool enabled() const { return training_random() || !mean.empty() || eval_resize > 0; }
  bool operator==(const PhotoRecipe&) const = default;
};

/// "none", "random-resized" or "random-resized=MIN,MAX" (0 < MIN <= MAX <= 1) into `recipe`;
/// InvalidArgument naming --crop and the problem.
void parse_crop(std::string_view spec, PhotoRecipe& recipe);
/// "none", "imagenet" (mean 0.485,0.456,0.406, std 0.229,0.224,0.225) or "MEAN,STD" lists:
/// 2 numbers (one mean and std for every channel) or 2C (C means, then C stds); every std > 0.
/// InvalidArgument naming --normalize.
void parse_normalize(std::string_view spec, PhotoRecipe& recipe);
/// InvalidArgument when the normalisation has neither 1 nor `channels` values per list.
void check_normalize_channels(const PhotoRecipe& recipe, int channels);
/// For logs: "crop random-resized=0.08,1, flip, normalize 0.485,...; eval resize 256".
std::string describe(const PhotoRecipe& recipe);

/// A source region in pixels of the full image (fractional for the evaluation crop).
struct CropBox {
  double top = 0, left = 0, height = 0, width = 0;
};

/// Note [Random resized crop]: torchvision's RandomResizedCrop.get_params, draw for draw: up to
/// 10 attempts of area scale U(scale_min, scale_max) and log-uniform aspect in (ratio_min,
/// ratio_max), w = round(sqrt(area * aspect)), h = round(sqrt(area / aspect)); the first that
/// fits gets a uniform top-left corner; after 10 misses the centre crop of the whole image
/// clamped to the aspect range. Uniform reals take the top 53 bits of one mt19937_64 draw and
/// integers detail::uniform_below, so the boxes are the same on every platform.
CropBox random_resized_crop(int height, int width, const PhotoRecipe& recipe,
                            std::mt19937_64& rng);
/// Resize(resize) of the short side then a centre crop of out_h x out_w, as a box in the source
/// image (torchvision's sizes: the long side int(resize * long / short), the crop's corner
/// round((side - crop) / 2)). resize 0: the whole image.
CropBox eval_crop_box(int height, int width, int resize, int out_h, int out_w);

/// Resamples `box` of an interleaved uint8 image (h x w x c) to [c, out_h, out_w] floats,
/// mirrored left-right when `flip`, each channel k written as value * scale[k] + bias[k].
/// Bilinear (triangle filter) with half-pixel centres, its support widened by the scale factor
/// when shrinking (antialiased, as PIL's and torchvision's antialias=True): one separable pass
/// with precomputed weights (Note [Resample order]).
void resample_to_chw(const std::uint8_t* pixels, int h, int w, int c, const CropBox& box,
                     int out_h, int out_w, bool flip, const float* scale, const float* bias,
                     float* dst);

/// The rows and columns of an h x w image that resample_to_chw reads for `box` (the crop and the
/// reach of its filter, clamped to the image): what a region decode must deliver (Note [Region
/// decode], image_decode.h).
PixelRegion resample_source_region(int h, int w, const CropBox& box, int out_h, int out_w);

/// resample_to_chw of an h x w image of which only `window` was decoded: `pixels` holds
/// window.height x window.width x c bytes. The result is the same as from the whole image;
/// InvalidArgument when the window lacks a pixel the resample reads.
void resample_window_to_chw(const std::uint8_t* pixels, const PixelRegion& window, int h, int w,
                            int c, const CropBox& box, int out_h, int out_w, bool flip,
                            const float* scale, const float* bias, float* dst);

}  // namespace mirror::data
