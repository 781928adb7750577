// load_csv: the rows are parsed and checked here (so errors can name the line and column), then
// handed to arrays_dataset as a float32 [N, F] feature array and an int64 or float32 label array.
#include "mirror/data/csv.h"

#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "data/text_lines.h"
#include "mirror/data/arrays.h"
#include "mirror/data/idx.h"
#include "mirror/error.h"
#include "mirror/json_input.h"

namespace mirror::data {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// Splits one line into fields; a field in double quotes may hold commas and "" for a quote.
std::vector<std::string> split_fields(std::string_view line, const std::string& where) {
  std::vector<std::string> fields;
  std::size_t pos = 0;
  for (;;) {
    while (pos < line.size() && is_space(line[pos])) ++pos;
    std::string field;
    if (pos < line.size() && line[pos] == '"') {
      ++pos;
      for (;;) {
        MIRROR_CHECK(pos < line.size(), DataError,
                     where + ", column " + std::to_string(fields.size()) +
                         ": unterminated quoted field (a quoted field must end on its line)");
        if (line[pos] == '"') {
          if (pos + 1 < line.size() && line[pos + 1] == '"') {
            field += '"';
            pos += 2;
            continue;
          }
          ++pos;
          break;
        }
        field += line[pos++];
      }
      while (pos < line.size() && is_space(line[pos])) ++pos;
      MIRROR_CHECK(pos == line.size() || line[pos] == ',', DataError,
                   where + ", column " + std::to_string(fields.size()) +
                       ": unexpected text after a closing quote");
    } else {
      const std::size_t end = std::min(line.find(',', pos), line.size());
      field = std::string(trim(line.substr(pos, end - pos)));
      pos = end;
    }
    fields.push_back(std::move(field));
    if (pos >= line.size()) return fields;
    ++pos;  // the comma
  }
}

/// Parses a whole cell as a number (a leading '+' allowed); false when it is not one.
bool parse_number(std::string_view cell, double& value) {
  cell = trim(cell);
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
  return ec == std::errc() && end == cell.data() + cell.size();
}

struct Row {
  std::int64_t line;
  std::vector<std::string> fields;
};

/// The non-blank lines of the file, split into fields.
std::vector<Row> read_rows(std::string_view text, const std::string& name) {
  std::vector<Row> rows;
  detail::TextLines lines(text);
  for (std::string_view line; lines.next(line);) {
    if (trim(line).empty()) continue;
    rows.push_back(
        {lines.number(), split_fields(line, name + ": line " + std::to_string(lines.number()))});
  }
  return rows;
}

bool all_numeric(const Row& row) {
  double v;
  for (const auto& f : row.fields)
    if (!parse_number(f, v)) return false;
  return true;
}

std::string column_list(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i ? ", " : "") + std::to_string(i) + " '" + quote_input(names[i], 40) + "'";
  return s;
}

/// The index of the label column: by header name first, else a 0-based index.
std::size_t label_index(const CsvOptions& options, const std::vector<std::string>& header,
                        std::size_t columns, const std::string& name) {
  const std::string& want = options.label_column;
  if (want.empty()) return columns - 1;
  std::size_t found = columns, matches = 0;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (header[i] == want) {
      found = i;
      ++matches;
    }
  }
  MIRROR_CHECK(matches <= 1, DataError,
               name + ": " + std::to_string(matches) + " columns are named '" + want +
                   "'; give the label column as a 0-based index instead");
  if (matches == 1) return found;
  const bool digits = want.find_first_not_of("0123456789") == std::string::npos;
  if (digits && want.size() < 10) {
    const auto index = static_cast<std::size_t>(std::stoll(want));
    MIRROR_CHECK(index < columns, InvalidArgument,
                 name + ": label column " + quote_input(want) + " is outside the file's " +
                     std::to_string(columns) + " columns (0-based: 0.." +
                     std::to_string(columns - 1) + ")");
    return index;
  }
  throw InvalidArgument(name + ": no column is named '" + quote_input(want) + "'" +
                        (header.empty() ? " (the file has no header row); give the label column "
                                          "as a 0-based index"
                                        : "; the columns are " + column_list(header)));
}

std::string cell_where(const std::string& name, const Row& row, std::size_t col,
                       const std::vector<std::string>& header) {
  return name + ": line " + std::to_string(row.line) + ", column " + std::to_string(col) +
         (header.empty() ? std::string() : " ('" + quote_input(header[col]) + "')");
}

/// A label cell: an integer class >= 0 (below num_classes when stated) or a finite float.
double parse_label(const std::string& cell, const std::string& where, const CsvOptions& options) {
  double v = 0;
  MIRROR_CHECK(parse_number(cell, v), DataError,
               where + ": label '" + quote_input(cell) + "' is not a number");
  MIRROR_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(), DataError,
               where + ": label " + quote_input(cell) + " is not a finite float32 value");
  if (options.float_targets) return v;
  MIRROR_CHECK(v == std::floor(v) && v >= 0 && v < INT32_MAX, DataError,
               where + ": label " + quote_input(cell) +
                   " is not a class index (an integer >= 0); for regression targets set "
                   "float_targets (--loss mse)");
  MIRROR_CHECK(options.num_classes == 0 || v < options.num_classes, DataError,
               where + ": label " + quote_input(cell) + " is >= the " +
                   std::to_string(options.num_classes) +
                   " classes stated; raise num_classes or fix the label");
  return v;
}

}  // namespace

std::shared_ptr<const Dataset> parse_csv(std::string_view text, const std::string& name,
                                         const CsvOptions& options) {
  MIRROR_CHECK(
      options.header >= -1 && options.header <= 1, InvalidArgument,
      "CSV header must be -1 (auto), 0 (no) or 1 (yes), got " + std::to_string(options.header));
  MIRROR_CHECK(options.num_classes >= 0 && !(options.float_targets && options.num_classes > 0),
               InvalidArgument,
               "num_classes " + std::to_string(options.num_classes) +
                   " does not apply: it must be >= 0, and 0 with float targets");
  const std::vector<Row> rows = read_rows(text, name);
  MIRROR_CHECK(!rows.empty(), DataError, name + ": the CSV file has no rows");
  const bool has_header = options.header == 1 || (options.header == -1 && !all_numeric(rows[0]));
  const std::vector<std::string> header = has_header ? rows[0].fields : std::vector<std::string>{};
  const std::size_t columns = rows[0].fields.size();
  MIRROR_CHECK(columns >= 2, DataError,
               name + ": line " + std::to_string(rows[0].line) + " has " + std::to_string(columns) +
                   " column; expected at least one feature column and a label column, "
                   "separated by commas");
  const std::size_t label_col = label_index(options, header, columns, name);
  const std::size_t first = has_header ? 1 : 0;
  const std::int64_t n = static_cast<std::int64_t>(rows.size() - first);
  MIRROR_CHECK(n > 0, DataError, name + ": the CSV file has a header but no data row");
  const auto features = static_cast<std::int64_t>(columns - 1);
  std::vector<float> x;
  x.reserve(static_cast<std::size_t>(n * features));
  std::vector<double> labels;
  for (std::size_t r = first; r < rows.size(); ++r) {
    const Row& row = rows[r];
    MIRROR_CHECK(row.fields.size() == columns, DataError,
                 name + ": line " + std::to_string(row.line) + " has " +
                     std::to_string(row.fields.size()) + " fields, expected " +
                     std::to_string(columns) + " (as on line " + std::to_string(rows[0].line) +
                     ")");
    for (std::size_t c = 0; c < columns; ++c) {
      if (c == label_col) {
        labels.push_back(parse_label(row.fields[c], cell_where(name, row, c, header), options));
        continue;
      }
      double v = 0;
      MIRROR_CHECK(parse_number(row.fields[c], v), DataError,
                   cell_where(name, row, c, header) + ": '" + quote_input(row.fields[c]) +
                       "' is not a number; every column but the label must be numeric");
      MIRROR_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(), DataError,
                   cell_where(name, row, c, header) + ": " + quote_input(row.fields[c]) +
                       " is not a finite float32 value (NaN/inf are not allowed)");
      x.push_back(static_cast<float>(v));
    }
  }
  NumericArray xs{ElementType::kFloat32, {n, features}, {}};
  xs.bytes.resize(x.size() * sizeof(float));
  std::memcpy(xs.bytes.data(), x.data(), xs.bytes.size());
  NumericArray ys{options.float_targets ? ElementType::kFloat32 : ElementType::kInt64, {n}, {}};
  ys.bytes.resize(static_cast<std::size_t>(n) * element_size(ys.type));
  for (std::int64_t i = 0; i < n; ++i) {
    if (options.float_targets) {
      const auto v = static_cast<float>(labels[static_cast<std::size_t>(i)]);
      std::memcpy(ys.bytes.data() + i * 4, &v, 4);
    } else {
      const auto v = static_cast<std::int64_t>(labels[static_cast<std::size_t>(i)]);
      std::memcpy(ys.bytes.data() + i * 8, &v, 8);
    }
  }
  ArrayOptions array_options;
  array_options.num_classes = options.num_classes;
  const std::string label_name =
      header.empty() ? "column " + std::to_string(label_col) : "column '" + header[label_col] + "'";
  return arrays_dataset(std::move(xs), std::move(ys), array_options, name + " features",
                        name + " " + label_name);
}

std::shared_ptr<const Dataset> load_csv(const std::string& path, const CsvOptions& options) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  return parse_csv(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                   path, options);
}

}  // namespace mirror::data
