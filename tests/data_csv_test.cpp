// load_csv / parse_csv: headers (auto, forced, absent), label columns by name and index, quoted
// fields, class labels and float targets, and the bad inputs that must name line and column.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "mirror/data/csv.h"
#include "mirror/data/loader.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using test::expect_data_error;

std::vector<float> sample(const Dataset& ds, std::int64_t i) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(ds.sample_shape())));
  ds.decode_float(i, v.data());
  return v;
}

TEST(DataCsv, HeaderAutoDetectedLabelLastByDefault) {
  const auto ds = parse_csv("a,b,label\n1,2.5,0\n\n-3,+4e1,2\r\n0.5,6,1\n", "t.csv", {});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->num_classes(), 3);
  EXPECT_EQ(ds->sample_shape(), (Shape{2}));
  EXPECT_FALSE(ds->is_sequence());
  EXPECT_EQ(ds->input_dtype(), DType::kFloat32);
  EXPECT_EQ(ds->label(1), 2);
  EXPECT_EQ(sample(*ds, 1), (std::vector<float>{-3.0f, 40.0f}));
  EXPECT_NE(ds->describe().find("t.csv"), std::string::npos);
}

TEST(DataCsv, NoHeaderAndLabelColumnByIndexOrName) {
  CsvOptions first;
  first.label_column = "0";
  const auto ds = parse_csv("1,0.5,0.25\n0,1,2\n", "n.csv", first);
  EXPECT_EQ(ds->size(), 2);  // no header: every cell is a number
  EXPECT_EQ(ds->label(0), 1);
  EXPECT_EQ(sample(*ds, 1), (std::vector<float>{1.0f, 2.0f}));
  CsvOptions named;
  named.label_column = "y";
  named.num_classes = 5;
  const auto byname = parse_csv("x1,y,x2\n1,4,3\n", "h.csv", named);
  EXPECT_EQ(byname->num_classes(), 5);
  EXPECT_EQ(byname->label(0), 4);
  EXPECT_EQ(sample(*byname, 0), (std::vector<float>{1.0f, 3.0f}));
  CsvOptions forced;
  forced.header = 1;  // a numeric first row taken as the header
  EXPECT_EQ(parse_csv("1,2\n3,0\n", "f.csv", forced)->size(), 1);
  // Column named "1" wins over index 1.
  CsvOptions digit;
  digit.label_column = "1";
  EXPECT_EQ(parse_csv("a,b,1\n5,6,0\n", "d.csv", digit)->label(0), 0);
}

TEST(DataCsv, QuotedFieldsAndFloatTargets) {
  CsvOptions o;
  o.float_targets = true;
  const auto ds =
      parse_csv("\xEF\xBB\xBF\"size, m\",\"the \"\"target\"\"\"\n\"1.5\", -0.25\n", "q.csv", o);
  EXPECT_EQ(ds->target_kind(), TargetKind::kFloat);
  EXPECT_EQ(ds->target_shape(), (Shape{1}));
  float t;
  ds->decode_target(0, &t);
  EXPECT_EQ(t, -0.25f);
  EXPECT_EQ(sample(*ds, 0), (std::vector<float>{1.5f}));
}

TEST(DataCsv, FloatTargetsBatchAsFloatTensors) {
  CsvOptions o;
  o.float_targets = true;
  LoaderOptions lo;
  lo.global_batch = 2;
  lo.shuffle = false;
  lo.prefetch_depth = 0;
  Loader loader(parse_csv("1,2,0.5\n3,4,-1\n", "r.csv", o), {}, lo);
  const Batch b = loader.make_batch(0, 0);
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 2}));
  EXPECT_EQ(b.labels.shape(), (Shape{2, 1}));
  EXPECT_EQ(b.labels.dtype(), DType::kFloat32);
  EXPECT_EQ(b.labels.data<float>()[1], -1.0f);
  EXPECT_TRUE(b.lengths.empty());
}

TEST(DataCsv, FileOnDisk) {
  testing_util::TempDir tmp("mirror-csv");
  const auto path = test::write_text(tmp.path() / "iris.csv", "f1,f2,class\n1,2,0\n3,4,1\n");
  EXPECT_EQ(load_csv(path, {})->size(), 2);
  expect_data_error([&] { load_csv((tmp.path() / "none.csv").string(), {}); }, {"none.csv"});
}

TEST(DataCsv, BadInputNamesLineAndColumn) {
  auto parse = [](std::string text, CsvOptions o = {}) {
    return [text, o] { parse_csv(text, "bad.csv", o); };
  };
  expect_data_error(parse("a,b,c\n1,2,0\n\n3,4\n"), {"bad.csv", "line 4 has 2 fields, expected 3"});
  expect_data_error(parse("a,b,c\n1,x,0\n"), {"line 2, column 1 ('b')", "'x' is not a number"});
  expect_data_error(parse("1,2,0\n1,,0\n"), {"line 2, column 1", "'' is not a number"});
  expect_data_error(parse("a,b,c\n1,nan,0\n"), {"line 2, column 1", "NaN/inf"});
  expect_data_error(parse("a,b,c\n1,2,0\n-inf,2,0\n"), {"line 3, column 0"});
  expect_data_error(parse("a,b,c\n1,1e39,0\n"), {"line 2, column 1"});
  expect_data_error(parse("a,b,c\n1,2,1.5\n"), {"line 2, column 2 ('c')", "not a class index"});
  expect_data_error(parse("a,b,c\n1,2,-1\n"), {"line 2, column 2", "not a class index"});
  expect_data_error(parse("a,b,c\n1,2,cat\n"), {"line 2, column 2", "'cat' is not a number"});
  CsvOptions three;
  three.num_classes = 3;
  expect_data_error(parse("a,b,c\n1,2,0\n1,2,3\n", three),
                    {"line 3, column 2", "label 3", "3 classes"});
  CsvOptions floats;
  floats.float_targets = true;
  expect_data_error(parse("a,b\n1,nan\n", floats), {"line 2, column 1", "not a finite"});
  expect_data_error(parse("a,b\n\"1,2\n"), {"line 2, column 0", "unterminated"});
  expect_data_error(parse("a,b\n\"1\"x,2\n"), {"line 2, column 0", "after a closing quote"});
  expect_data_error(parse(""), {"bad.csv", "no rows"});
  expect_data_error(parse("\n \n"), {"no rows"});
  expect_data_error(parse("a,b\n"), {"no data row"});
  expect_data_error(parse("a\n1\n"), {"at least one feature column"});
  CsvOptions missing;
  missing.label_column = "z";
  EXPECT_THROW(parse("a,b\n1,2\n", missing)(), InvalidArgument);
  missing.label_column = "7";
  EXPECT_THROW(parse("a,b\n1,2\n", missing)(), InvalidArgument);
  CsvOptions twice;
  twice.label_column = "a";
  expect_data_error(parse("a,a,b\n1,2,3\n", twice), {"2 columns are named 'a'"});
}

}  // namespace
}  // namespace mirror::data
