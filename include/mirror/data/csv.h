// defines: load_csv, a Dataset from a CSV file of numeric columns and one label column.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "mirror/data/dataset.h"

namespace mirror::data {

struct CsvOptions {
  std::string label_column;  // name, or 0-based index as text; empty: the last column
  int header = -1;  // -1 auto (the first row is a header when a cell is not a number), 0 no, 1 yes
  int num_classes = 0;         // 0: max label + 1
  bool float_targets = false;  // else integer labels are classes
};

/// Reads a CSV file: comma-separated numeric columns, one of them the label; fields may be
/// quoted ("1.5", "a ""name"""), blank lines are skipped, a UTF-8 byte-order mark and '\r\n'
/// line ends are accepted. Each sample is a float32 vector [F] of the other columns (not a
/// sequence). The label is a class index (an integer >= 0) or, with float_targets, one float
/// target ([1]). Lines are counted from 1 and columns from 0 in errors. DataError naming the
/// file, line and column for: rows with a different number of fields, cells that are not
/// numbers (or empty), NaN/inf, labels that are not integers >= 0 or are >= a stated
/// num_classes, an unterminated quote, a label column that does not exist, and a file with
/// no data row or fewer than two columns.
std::shared_ptr<const Dataset> load_csv(const std::string& path, const CsvOptions& options);

/// load_csv on text in memory; `name` is used in errors.
std::shared_ptr<const Dataset> parse_csv(std::string_view text, const std::string& name,
                                         const CsvOptions& options);

}  // namespace mirror::data
