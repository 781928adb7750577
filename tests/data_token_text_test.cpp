// load_token_text / parse_token_text: "label id id ..." lines read back as variable-length
// int32 sequences, stated or inferred classes and vocabulary, and the errors naming the line.
#include <gtest/gtest.h>

#include "data_test_util.h"
#include "mirror/data/loader.h"
#include "mirror/data/token_text.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using test::expect_data_error;

TEST(DataTokenText, ReadsVariableLengthSequences) {
  const auto ds = parse_token_text("1 5 3 9\n\n0\t2 2\r\n  3 7 1 1 1 4  \n", "t.txt");
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->num_classes(), 4);
  EXPECT_EQ(ds->vocab_size(), 10);
  EXPECT_EQ(ds->input_dtype(), DType::kInt32);
  EXPECT_TRUE(ds->is_sequence());
  EXPECT_TRUE(ds->variable_length());
  EXPECT_EQ(ds->sample_shape(), (Shape{5}));
  EXPECT_EQ(ds->length(0), 3);
  EXPECT_EQ(ds->length(1), 2);
  EXPECT_EQ(ds->length(2), 5);
  EXPECT_EQ(ds->label(2), 3);
  std::int32_t ids[6];
  ds->decode_tokens(0, ids, 6);
  EXPECT_EQ(std::vector<std::int32_t>(ids, ids + 6), (std::vector<std::int32_t>{5, 3, 9, 0, 0, 0}));
  ds->decode_tokens(1, ids, 2);
  EXPECT_EQ(ids[1], 2);
  EXPECT_THROW(ds->decode_tokens(2, ids, 4), InvalidArgument);
  EXPECT_THROW(ds->label(3), InvalidArgument);
  EXPECT_THROW(ds->decode_float(0, nullptr), InvalidArgument);
}

TEST(DataTokenText, StatedClassesAndVocab) {
  TokenTextOptions o;
  o.num_classes = 7;
  o.vocab = 100;
  const auto ds = parse_token_text("0 1\n1 99\n", "s.txt", o);
  EXPECT_EQ(ds->num_classes(), 7);
  EXPECT_EQ(ds->vocab_size(), 100);
  testing_util::TempDir tmp("mirror-tokens");
  const auto path = test::write_text(tmp.path() / "seq.txt", "2 4 5\n0 1\n");
  const auto disk = load_token_text(path);
  EXPECT_EQ(disk->size(), 2);
  EXPECT_NE(disk->describe().find("seq.txt"), std::string::npos);
}

TEST(DataTokenText, BatchesPadToTheLongestSequence) {
  LoaderOptions o;
  o.global_batch = 4;
  o.shuffle = false;
  o.prefetch_depth = 0;
  Loader loader(parse_token_text("1 5 3 9\n0 2\n2 4 4\n", "b.txt"), {}, o);
  const Batch b = loader.make_batch(0, 0);
  EXPECT_EQ(b.inputs.shape(), (Shape{4, 3}));
  EXPECT_EQ(b.lengths, (std::vector<std::int32_t>{3, 1, 2, 1}));
  EXPECT_EQ(b.labels.data<std::int32_t>()[2], 2);
  EXPECT_EQ(b.inputs.data<std::int32_t>()[3 + 1], 0);  // sample 1 padded after its one id
  EXPECT_EQ(b.weights.data<float>()[3], 0.0f);         // a padding sample fills the batch
}

TEST(DataTokenText, BadInputNamesLineAndId) {
  auto parse = [](std::string text, TokenTextOptions o = {}) {
    return [text, o] { parse_token_text(text, "bad.txt", o); };
  };
  expect_data_error(parse("1 2 3\n\n2\n"), {"bad.txt", "line 3", "no token id"});
  expect_data_error(parse("1 2 0 3\n"), {"line 1", "token id 0 is the padding id"});
  expect_data_error(parse("1 2 -3\n"), {"line 1", "token id -3"});
  expect_data_error(parse("1 2 x\n"), {"line 1", "token id 'x' is not a decimal integer"});
  expect_data_error(parse("1 2 3.5\n"), {"'3.5'"});
  expect_data_error(parse("a 2 3\n"), {"line 1", "label 'a'"});
  expect_data_error(parse("1 99999999999\n"), {"99999999999", "outside"});
  expect_data_error(parse(""), {"bad.txt", "no sequence"});
  expect_data_error(parse("\n  \n"), {"no sequence"});
  TokenTextOptions o;
  o.num_classes = 2;
  o.vocab = 10;
  expect_data_error(parse("0 1\n2 1\n", o), {"line 2", "label 2", "2 classes"});
  expect_data_error(parse("0 1\n1 4 10\n", o), {"line 2", "token id 10", "vocabulary size 10"});
  expect_data_error([] { load_token_text("/nonexistent/seq.txt"); }, {"/nonexistent/seq.txt"});
}

}  // namespace
}  // namespace mirror::data
