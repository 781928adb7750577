// libFuzzer target: parse_token_text on arbitrary text. Byte 0 picks num_classes and vocab
// (0 = from the data); the rest is the file. Checks: only DataError escapes, and an accepted
// file gives sequences of length >= 1 with ids in [1, vocab) and zero padding after them
// (dataset_check.h).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "dataset_check.h"
#include "mirror/data/token_text.h"
#include "mirror/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mirror::data;
  if (size < 1) return 0;
  TokenTextOptions options;
  options.num_classes = data[0] & 7;
  options.vocab = (data[0] >> 3) * 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto ds = parse_token_text(text, "fuzz.txt", options);
    if (!ds->variable_length() || ds->vocab_size() < 2) std::abort();
    mirror::fuzz::check_dataset(*ds);
  } catch (const mirror::DataError&) {
    // expected for malformed input
  }
  return 0;
}
