// The .npy reader and load_arrays on .npy files: every dtype read back, headers NumPy writes in
// each format version, and the bad inputs that must be DataErrors naming the file and problem.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "data_test_util.h"
#include "mirror/data/arrays.h"
#include "mirror/data/idx.h"
#include "mirror/data/npy.h"
#include "temp_dir.h"

namespace mirror::data {
namespace {

using test::Bytes;
using test::expect_data_error;
using test::make_array;

/// A .npy file with a hand-written header dict (version 1: 2-byte length; 2 and 3: 4 bytes).
Bytes npy_file(const std::string& dict, const Bytes& payload, int major = 1) {
  Bytes f = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  const std::uint32_t len = static_cast<std::uint32_t>(dict.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
    f.push_back(static_cast<std::uint8_t>(len >> (8 * i)));
  f.insert(f.end(), dict.begin(), dict.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

Bytes floats(std::vector<float> v) { return make_array(v, {}).bytes; }

template <class T>
void expect_round_trip(std::vector<T> values) {
  const NumericArray a = make_array(values, {2, static_cast<std::int64_t>(values.size() / 2)});
  const Bytes file = encode_npy(a);
  EXPECT_EQ((file.size() - a.bytes.size()) % 64, 0u);  // NumPy aligns the data to 64 bytes
  const NumericArray b = parse_npy(file, "rt.npy");
  EXPECT_EQ(b.type, a.type);
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.bytes, a.bytes);
}

TEST(DataNpy, EveryDtypeRoundTrips) {
  expect_round_trip<std::uint8_t>({0, 1, 254, 255});
  expect_round_trip<std::int8_t>({-128, -1, 0, 127});
  expect_round_trip<std::int16_t>({-30000, 1, 2, 30000});
  expect_round_trip<std::uint16_t>({0, 1, 2, 65535});
  expect_round_trip<std::int32_t>({-5, 0, 7, 1 << 30});
  expect_round_trip<std::int64_t>({-5, 0, 7, std::int64_t{1} << 40});
  expect_round_trip<float>({-1.5f, 0.0f, 2.25f, 1e30f});
  expect_round_trip<double>({-1.5, 0.0, 2.25, 1e300});
}

TEST(DataNpy, HeadersAsNumpyAndOthersWriteThem) {
  const Bytes payload = floats({1, 2, 3, 4, 5, 6});
  // Versions 2.0 and 3.0 (4-byte header length), key order, quotes, spacing, Python 2 longs.
  for (int major : {1, 2, 3}) {
    const NumericArray a = parse_npy(
        npy_file("{\"shape\": (2L, 3L), 'fortran_order':False,'descr':'<f4'}  \n", payload, major),
        "v.npy");
    EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
    EXPECT_EQ(a.type, ElementType::kFloat32);
    EXPECT_EQ(a.value(5), 6.0);
  }
  EXPECT_EQ(
      parse_npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }\n", payload),
                "1d")
          .shape,
      (std::vector<std::int64_t>{6}));
  const NumericArray scalar = parse_npy(
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", floats({7})), "s");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.value(0), 7.0);
  EXPECT_EQ(
      parse_npy(npy_file("{'descr': '<u1', 'fortran_order': False, 'shape': (2,)}", Bytes{3, 4}),
                "u1")
          .type,
      ElementType::kUInt8);
  // An empty array is a valid file (load_arrays rejects it later for having no samples).
  EXPECT_EQ(
      parse_npy(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5)}", {}), "empty")
          .numel(),
      0);
}

TEST(DataNpy, MalformedHeadersAreDataErrors) {
  const Bytes p6 = floats({1, 2, 3, 4, 5, 6});
  auto parse = [](const Bytes& f) { return [f] { parse_npy(f, "bad.npy"); }; };
  const std::string shape = "'shape': (2, 3)}";
  expect_data_error(parse(Bytes{'N', 'U', 'M', 'P', 'Y', 1, 0}), {"bad.npy", "not a .npy"});
  expect_data_error(parse(Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1}), {"bad.npy", "preamble"});
  expect_data_error(parse(Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 5}), {"truncated"});
  expect_data_error(parse(npy_file("{}", {}, 4)), {"version 4.0"});
  Bytes long_header = npy_file("{'descr': '<f4'}", {});
  long_header[8] = 200;  // announces 200 header bytes, 16 present
  expect_data_error(parse(long_header), {"bad.npy", "truncated inside its header"});
  expect_data_error(parse(npy_file("{'descr': '<f4', " + shape, p6)),
                    {"'fortran_order' is missing"});
  expect_data_error(
      parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'x': 1, " + shape, p6)),
      {"unexpected or repeated key 'x'"});
  expect_data_error(parse(npy_file("{'descr': '<f4', 'descr': '<f4', " + shape, p6)),
                    {"repeated key 'descr'"});
  expect_data_error(parse(npy_file("{'descr': '<f4, 'fortran_order': False, " + shape, p6)),
                    {"malformed .npy header"});
  expect_data_error(parse(npy_file("{'descr': '<f4', 'fortran_order': Flase, " + shape, p6)),
                    {"expected True or False"});
  expect_data_error(
      parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", p6)),
      {"non-negative integer"});
  expect_data_error(
      parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", p6)),
      {"expected '('"});
  expect_data_error(parse(npy_file("{'descr': '<f4', 'fortran_order': False, " + shape + " x", p6)),
                    {"unexpected text after the dict"});
  expect_data_error(parse(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", p6)),
                    {"found the end of the header"});
}

TEST(DataNpy, UnsupportedLayoutsAndDtypesAreDataErrors) {
  const Bytes p6 = floats({1, 2, 3, 4, 5, 6});
  auto with = [&](const std::string& descr, const std::string& fortran = "False") {
    const Bytes f = npy_file(
        "{'descr': " + descr + ", 'fortran_order': " + fortran + ", 'shape': (2, 3), }", p6);
    return [f] { parse_npy(f, "d.npy"); };
  };
  expect_data_error(with("'<f4'", "True"), {"d.npy", "Fortran", "ascontiguousarray"});
  expect_data_error(with("'|O'"), {"d.npy", "'|O'", "object"});
  expect_data_error(with("'>f4'"), {"d.npy", "'>f4'", "big-endian"});
  expect_data_error(with("'>i8'"), {"big-endian"});
  expect_data_error(with("'<c8'"), {"'<c8'", "not supported"});
  expect_data_error(with("'<U3'"), {"'<U3'", "not supported"});
  expect_data_error(with("'|b1'"), {"'|b1'", "not supported"});
  expect_data_error(with("[('a', '<f4')]"), {"structured"});
  // One-byte types have no byte order: '|u1', '<u1' and '>u1' are the same.
  for (const char* d : {"'|u1'", "'<u1'", "'>u1'", "'|i1'"}) {
    const Bytes f =
        npy_file(std::string("{'descr': ") + d + ", 'fortran_order': False, 'shape': (6,), }",
                 Bytes{1, 2, 3, 4, 5, 6});
    EXPECT_EQ(parse_npy(f, "b").numel(), 6) << d;
  }
}

TEST(DataNpy, SizeDisagreeingWithShapeIsDataError) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const Bytes p6 = floats({1, 2, 3, 4, 5, 6});
  Bytes short_payload(p6.begin(), p6.end() - 1);
  expect_data_error([&] { parse_npy(npy_file(dict, short_payload), "t.npy"); },
                    {"t.npy", "truncated", "needs 24 bytes", "found 23"});
  Bytes long_payload = p6;
  long_payload.push_back(0);
  expect_data_error([&] { parse_npy(npy_file(dict, long_payload), "l.npy"); },
                    {"l.npy", "1 bytes after the data"});
  // 2^62 x 2^62 elements: the byte count overflows 64 bits; rejected before any allocation.
  const std::string huge =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, "
      "4611686018427387904)}";
  expect_data_error([&] { parse_npy(npy_file(huge, p6), "h.npy"); },
                    {"h.npy", "describes more than"});
  // An empty array whose other dims multiply past 2^63: numel of a sample would overflow.
  const std::string zero_huge =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4)}";
  expect_data_error([&] { parse_npy(npy_file(zero_huge, {}), "z.npy"); }, {"z.npy", "describes"});
  expect_data_error(
      [&] {
        parse_npy(
            npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,)}",
                     p6),
            "o.npy");
      },
      {"does not fit 64 bits"});
}

// ---------------------------------------------------------------- load_arrays on .npy files

class NpyArrays : public ::testing::Test {
 protected:
  template <class T>
  std::string save(const std::string& name, const std::vector<T>& values,
                   std::vector<std::int64_t> shape, bool gz = false) {
    Bytes f = encode_npy(make_array(values, std::move(shape)));
    return test::write_bytes(tmp_.path() / name, gz ? gzip_compress(f) : f);
  }
  testing_util::TempDir tmp_{"mirror-npy"};
};

TEST_F(NpyArrays, FloatImagesWithClassLabels) {
  std::vector<float> x(4 * 2 * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const auto xp = save("x.npy", x, {4, 2, 3});
  const auto yp = save<std::int64_t>("y.npy", {2, 0, 1, 2}, {4});
  const auto ds = load_arrays(xp, yp);
  EXPECT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->num_classes(), 3);  // max label + 1
  EXPECT_EQ(ds->target_kind(), TargetKind::kClass);
  EXPECT_EQ(ds->input_dtype(), DType::kFloat32);
  EXPECT_EQ(ds->sample_shape(), (Shape{2, 3}));
  EXPECT_TRUE(ds->is_sequence());  // rank-2 samples are [T, F] sequences
  EXPECT_EQ(ds->length(1), 2);
  EXPECT_EQ(ds->label(0), 2);
  EXPECT_EQ(ds->label(3), 2);
  float s[6];
  ds->decode_float(2, s);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s[i], x[12 + i]);
  ArrayOptions o;
  o.num_classes = 10;
  o.sample_shape = {1, 2, 3};
  const auto reshaped = load_arrays(xp, yp, o);
  EXPECT_EQ(reshaped->num_classes(), 10);
  EXPECT_EQ(reshaped->sample_shape(), (Shape{1, 2, 3}));
  EXPECT_FALSE(reshaped->is_sequence());
  o.sample_shape = {7};
  EXPECT_THROW(load_arrays(xp, yp, o), InvalidArgument);
  EXPECT_THROW(ds->label(4), InvalidArgument);
  EXPECT_THROW(ds->decode_target(0, s), InvalidArgument);
}

TEST_F(NpyArrays, Uint8ScaledFloat64AndGzip) {
  const auto xp = save<std::uint8_t>("x.npy.gz", {0, 51, 255, 102}, {2, 2}, true);
  const auto yp = save<std::uint8_t>("y.npy", {1, 0}, {2});
  float s[2];
  auto ds = load_arrays(xp, yp);
  EXPECT_FALSE(ds->is_sequence());
  ds->decode_float(0, s);
  EXPECT_FLOAT_EQ(s[1], 0.2f);
  ArrayOptions raw;
  raw.scale_uint8 = false;
  load_arrays(xp, yp, raw)->decode_float(1, s);
  EXPECT_EQ(s[0], 255.0f);
  const auto dp = save<double>("x64.npy", {0.25, -1e10, 3, 4}, {2, 2});
  load_arrays(dp, yp)->decode_float(0, s);
  EXPECT_EQ(s[1], -1e10f);
  const auto one_d = load_arrays(save<float>("x1.npy", {5, 6}, {2}), yp);
  EXPECT_EQ(one_d->sample_shape(), (Shape{1}));
}

TEST_F(NpyArrays, FloatTargets) {
  const auto xp = save<float>("x.npy", {1, 2, 3}, {3, 1});
  const auto scalar = load_arrays(xp, save<float>("y.npy", {0.5f, -2, 9}, {3}));
  EXPECT_EQ(scalar->target_kind(), TargetKind::kFloat);
  EXPECT_EQ(scalar->target_shape(), (Shape{1}));
  EXPECT_EQ(scalar->num_classes(), 0);
  float t[2];
  scalar->decode_target(1, t);
  EXPECT_EQ(t[0], -2.0f);
  EXPECT_THROW(scalar->label(0), InvalidArgument);
  const auto multi = load_arrays(xp, save<double>("yk.npy", {0, 1, 1, 0, 1, 1}, {3, 2}));
  EXPECT_EQ(multi->target_shape(), (Shape{2}));
  multi->decode_target(1, t);
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], 0.0f);
  ArrayOptions o;
  o.num_classes = 2;
  EXPECT_THROW(load_arrays(xp, save<float>("y2.npy", {0, 1, 1}, {3}), o), InvalidArgument);
}

TEST_F(NpyArrays, TokenIds) {
  const auto xp = save<std::int32_t>("x.npy", {3, 1, 0, 0, 5, 0, 2, 0, 7, 7, 7, 7}, {3, 4});
  const auto yp = save<std::int32_t>("y.npy", {0, 1, 0}, {3});
  const auto ds = load_arrays(xp, yp);
  EXPECT_EQ(ds->input_dtype(), DType::kInt32);
  EXPECT_TRUE(ds->is_sequence());
  EXPECT_TRUE(ds->variable_length());
  EXPECT_EQ(ds->vocab_size(), 8);
  EXPECT_EQ(ds->sample_shape(), (Shape{4}));
  EXPECT_EQ(ds->length(0), 2);
  EXPECT_EQ(ds->length(1), 3);  // an inner 0 is kept; the length ends at the last non-zero id
  EXPECT_EQ(ds->length(2), 4);
  std::int32_t ids[5];
  ds->decode_tokens(1, ids, 5);
  EXPECT_EQ(std::vector<std::int32_t>(ids, ids + 5), (std::vector<std::int32_t>{5, 0, 2, 0, 0}));
  EXPECT_THROW(ds->decode_tokens(2, ids, 3), InvalidArgument);
  const auto x64 = load_arrays(save<std::int64_t>("x64.npy", {1, 2, 0, 3, 0, 1}, {3, 2}), yp);
  EXPECT_EQ(x64->length(1), 2);
  EXPECT_EQ(x64->vocab_size(), 4);
}

TEST_F(NpyArrays, BadArraysAreDataErrors) {
  const auto x4 = save<float>("x.npy", {1, 2, 3, 4}, {4});
  const auto y4 = save<std::int64_t>("y.npy", {0, 1, 2, 3}, {4});
  expect_data_error(
      [&] {
        load_arrays(x4, save<std::int64_t>("y3.npy", {0, 1, 2}, {3}));
      },
      {"4 samples in", "x.npy", "but 3 in", "y3.npy"});
  ArrayOptions three;
  three.num_classes = 3;
  expect_data_error([&] { load_arrays(x4, y4, three); },
                    {"y.npy", "label 3 of sample 3", "3 classes"});
  expect_data_error(
      [&] {
        load_arrays(x4, save<std::int64_t>("neg.npy", {0, -1, 0, 0}, {4}));
      },
      {"neg.npy", "label -1 of sample 1"});
  expect_data_error(
      [&] {
        load_arrays(x4, save<std::int64_t>("big.npy", {0, std::int64_t{1} << 33, 0, 0}, {4}));
      },
      {"big.npy", "label 8589934592"});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  expect_data_error(
      [&] {
        load_arrays(save<float>("nan.npy", {1, 2, 3, nan, 5, 6, 7, 8}, {4, 2}), y4);
      },
      {"nan.npy", "flat index 3", "sample 1", "not finite"});
  expect_data_error(
      [&] {
        load_arrays(x4, save<float>("inf.npy", {1, 2, -inf, 4}, {4}));
      },
      {"inf.npy", "target", "flat index 2"});
  expect_data_error(
      [&] {
        load_arrays(save<double>("d.npy", {1, 1e300, 0, 0}, {4}), y4);
      },
      {"d.npy", "float32 range"});
  expect_data_error(
      [&] {
        load_arrays(save<std::int32_t>("pad.npy", {1, 0, 0, 0, 2, 0, 3, 0}, {4, 2}), y4);
      },
      {"pad.npy", "sample 1 has no token"});
  expect_data_error(
      [&] {
        load_arrays(save<std::int32_t>("neg_id.npy", {1, 0, 1, -4, 2, 0, 3, 0}, {4, 2}), y4);
      },
      {"neg_id.npy", "token id -4 of sample 1, step 1"});
  expect_data_error(
      [&] {
        load_arrays(save<std::int32_t>("r3.npy", {1, 1, 1, 1}, {4, 1, 1}), y4);
      },
      {"r3.npy", "[N, T]"});
  expect_data_error(
      [&] {
        // [N, T] and [N, H, W] are per-step and per-pixel labels (Note [Dense labels]); more
        // axes are not labels of anything.
        load_arrays(x4, save<std::int64_t>("y4d.npy", std::vector<std::int64_t>(32, 1), {4, 2, 2, 2}));
      },
      {"y4d.npy", "class labels"});
  expect_data_error(
      [&] {
        load_arrays(save<float>("e.npy", {}, {0, 3}), y4);
      },
      {"e.npy", "N >= 1"});
  expect_data_error(
      [&] { load_arrays(test::write_text(tmp_.path() / "fake.npy.gz", "hello"), y4); },
      {"fake.npy.gz", "not gzip"});
  expect_data_error([&] { load_arrays(test::write_text(tmp_.path() / "t.npy", "a,b\n1,2\n"), y4); },
                    {"t.npy", "neither a NumPy .npy file", "61 2c 62"});
  expect_data_error([&] { load_arrays((tmp_.path() / "missing.npy").string(), y4); },
                    {"cannot open", "missing.npy"});
  Bytes cut = gzip_compress(encode_npy(make_array<float>({1, 2, 3, 4}, {4})));
  cut.resize(cut.size() - 5);
  expect_data_error([&] { load_arrays(test::write_bytes(tmp_.path() / "cut.npy.gz", cut), y4); },
                    {"cut.npy.gz", "truncated"});
}

}  // namespace
}  // namespace mirror::data
