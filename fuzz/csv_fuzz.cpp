// libFuzzer target: parse_csv on arbitrary text. Byte 0 picks the options (header mode, label
// column, float targets, num_classes); the rest is the file. Checks: only DataError escapes
// (InvalidArgument only for a label column outside the file), and an accepted file gives a
// dataset that keeps its contract (dataset_check.h) with one feature per non-label column.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dataset_check.h"
#include "mirror/data/csv.h"
#include "mirror/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mirror::data;
  if (size < 1) return 0;
  const std::uint8_t mode = data[0];
  CsvOptions options;
  options.header = (mode & 3) == 3 ? -1 : (mode & 3) - 1;
  options.float_targets = mode & 4;
  const int column = (mode >> 3) & 3;  // 0: last column, else index column - 1
  if (column) options.label_column = std::to_string(column - 1);
  if (!options.float_targets) options.num_classes = (mode >> 5) & 7;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto ds = parse_csv(text, "fuzz.csv", options);
    if (ds->sample_shape().size() != 1 || ds->is_sequence()) std::abort();
    mirror::fuzz::check_dataset(*ds);
  } catch (const mirror::DataError&) {
    // expected for malformed input
  } catch (const mirror::InvalidArgument& e) {
    if (std::string_view(e.what()).find("label column") == std::string_view::npos) std::abort();
  }
  return 0;
}
