// defines: load_token_text, a Dataset of labelled token-id sequences from a text file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mirror/data/dataset.h"

namespace mirror::data {

struct TokenTextOptions {
  int num_classes = 0;     // 0: max label + 1
  std::int64_t vocab = 0;  // 0: max id + 1
};

/// One sequence per line: "label id id id ..." (ids >= 1; 0 is the padding id), fields
/// separated by spaces or tabs; blank lines are skipped, '\r\n' line ends accepted. The label
/// is a class index (an integer >= 0). Samples are int32 ids [max_len], variable length (the
/// number of ids on the line). DataError naming the file and line for: a field that is not a
/// decimal integer, a label >= a stated num_classes, an id < 1 or >= a stated vocab (naming
/// the id), a line with a label but no id, and a file with no sequence.
std::shared_ptr<const Dataset> load_token_text(const std::string& path,
                                               const TokenTextOptions& options = {});

/// load_token_text on text in memory; `name` is used in errors.
std::shared_ptr<const Dataset> parse_token_text(std::string_view text, const std::string& name,
                                                const TokenTextOptions& options = {});

}  // namespace mirror::data
