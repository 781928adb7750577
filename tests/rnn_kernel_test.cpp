// Tests of the CPU GRU and LSTM kernels' fast loops (src/cpu/cpu_gru.cpp, cpu_lstm.cpp): the
// vectorised float32 gate loops (Note [Vector gate loops]) at the sizes the models use, whole
// vectors and a remainder, against the float64 kernels (exact math); the row blocks split across
// OpenMP threads against one thread; the zeros row that stands for an absent dy and the scratch
// gates of inference (Note [No null rows]). The op tests (gru_op_test, lstm_op_test) check the
// equations and finite differences on small sizes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mirror/ops.h"
#include "ops_test_util.h"

namespace mirror {
namespace {

using ops_test::expect_close;
using ops_test::random_values;
using ops_test::values;

enum class Cell { kGru, kLstm };

struct Problem {
  Cell cell;
  std::int64_t n, t, f, h;
  std::vector<std::int32_t> lengths;
  std::vector<double> x, w_ih, w_hh, b_ih, b_hh, dy, dh;
  int gates() const { return cell == Cell::kGru ? 3 : 4; }
};

/// Random weights scaled like Glorot / orthogonal init (|w| ~ 1/sqrt(fan in)), so the gates
/// move through their whole range instead of saturating.
Problem random_problem(Cell cell, std::int64_t n, std::int64_t t, std::int64_t f, std::int64_t h,
                       std::vector<std::int32_t> lengths, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem p{cell, n, t, f, h, std::move(lengths), {}, {}, {}, {}, {}, {}, {}};
  const auto g = static_cast<std::size_t>(p.gates() * h);
  p.x = random_values(static_cast<std::size_t>(n * t * f), 1.0, rng);
  p.w_ih = random_values(g * static_cast<std::size_t>(f), 1.5 / std::sqrt(double(f)), rng);
  p.w_hh = random_values(g * static_cast<std::size_t>(h), 1.5 / std::sqrt(double(h)), rng);
  p.b_ih = random_values(g, 0.5, rng);
  p.b_hh = random_values(g, 0.5, rng);
  p.dy = random_values(static_cast<std::size_t>(n * t * h), 1.0, rng);
  p.dh = random_values(static_cast<std::size_t>(n * h), 1.0, rng);
  return p;
}

Tensor make(const std::vector<double>& v, const Shape& shape, DType dtype) {
  const Tensor t = Tensor::from_vector(v, shape);
  return dtype == DType::kFloat64 ? t : ops::cast(t, dtype);
}

/// Everything one forward + backward produces, as doubles, named for messages.
struct Results {
  std::vector<std::string> names;
  std::vector<std::vector<double>> values;
  void add(const std::string& name, const Tensor& t) {
    names.push_back(name);
    values.push_back(ops_test::values(t));
  }
  const std::vector<double>& get(const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return values[i];
    }
    throw std::out_of_range("no result " + name);
  }
};

/// Training forward, then backward with dy (or none: `with_dy` false) and dh_last; without
/// `need_dx` the backward must return no dx, and the results hold none.
Results run(const Problem& p, DType dt, bool with_dy, bool explicit_zero_dy = false,
            bool need_dx = true) {
  const std::int64_t g = p.gates() * p.h;
  const Tensor x = make(p.x, {p.n, p.t, p.f}, dt);
  const Tensor w_ih = make(p.w_ih, {g, p.f}, dt), w_hh = make(p.w_hh, {g, p.h}, dt);
  const Tensor b_ih = make(p.b_ih, {g}, dt), b_hh = make(p.b_hh, {g}, dt);
  Tensor dy;
  if (with_dy) dy = make(p.dy, {p.n, p.t, p.h}, dt);
  if (explicit_zero_dy) dy = Tensor::zeros({p.n, p.t, p.h}, dt);
  const Tensor dh = make(p.dh, {p.n, p.h}, dt);
  Results r;
  if (p.cell == Cell::kGru) {
    const ops::GruWeights w{w_ih, w_hh, b_ih, b_hh};
    ops::GruWeights dw{Tensor::zeros({g, p.f}, dt), Tensor::zeros({g, p.h}, dt),
                       Tensor::zeros({g}, dt), Tensor::zeros({g}, dt)};
    const auto fwd = ops::gru_forward(x, p.lengths, w, true);
    const auto infer = ops::gru_forward(x, p.lengths, w, false);
    const Tensor dx = ops::gru_backward(x, p.lengths, w, fwd, dy, dh, dw, need_dx);
    r.add("y", fwd.y);
    r.add("h_last", fwd.h_last);
    r.add("inference y", infer.y);
    r.add("inference h_last", infer.h_last);
    if (need_dx) r.add("dx", dx);
    EXPECT_EQ(dx.defined(), need_dx);
    r.add("dw_ih", dw.w_ih);
    r.add("dw_hh", dw.w_hh);
    r.add("db_ih", dw.b_ih);
    r.add("db_hh", dw.b_hh);
  } else {
    const ops::LstmWeights w{w_ih, w_hh, b_ih, b_hh};
    ops::LstmWeights dw{Tensor::zeros({g, p.f}, dt), Tensor::zeros({g, p.h}, dt),
                        Tensor::zeros({g}, dt), Tensor::zeros({g}, dt)};
    const auto fwd = ops::lstm_forward(x, p.lengths, w, true);
    const auto infer = ops::lstm_forward(x, p.lengths, w, false);
    const Tensor dx = ops::lstm_backward(x, p.lengths, w, fwd, dy, dh, dw, need_dx);
    r.add("y", fwd.y);
    r.add("h_last", fwd.h_last);
    r.add("c_last", fwd.c_last);
    r.add("inference y", infer.y);
    r.add("inference h_last", infer.h_last);
    if (need_dx) r.add("dx", dx);
    EXPECT_EQ(dx.defined(), need_dx);
    r.add("dw_ih", dw.w_ih);
    r.add("dw_hh", dw.w_hh);
    r.add("db_ih", dw.b_ih);
    r.add("db_hh", dw.b_hh);
  }
  return r;
}

void expect_all_close(const Results& got, const Results& want, double atol, double rtol,
                      const std::string& what) {
  ASSERT_EQ(got.names, want.names);
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    expect_close(got.values[i], want.values[i], atol, rtol, what + ": " + got.names[i]);
  }
}

const char* name_of(Cell c) { return c == Cell::kGru ? "gru" : "lstm"; }

// H = 64 is four whole AVX-512 vectors (eight AVX2 ones) per gate; H = 37 adds a remainder.
// Lengths mix full, shorter and length-1 sequences.
TEST(RnnKernels, Float32VectorLoopsMatchFloat64) {
  for (Cell cell : {Cell::kGru, Cell::kLstm}) {
    for (std::int64_t h : {64, 37}) {
      const Problem p = random_problem(cell, 5, 9, 7, h, {9, 4, 9, 1, 6}, 17 + h);
      const std::string what = std::string(name_of(cell)) + " H=" + std::to_string(h);
      const Results f32 = run(p, DType::kFloat32, true);
      const Results f64 = run(p, DType::kFloat64, true);
      expect_all_close(f32, f64, 2e-5, 2e-4, what);
      // Inference writes its gates to scratch: same outputs, bitwise, as training.
      EXPECT_EQ(f32.get("inference y"), f32.get("y")) << what;
      EXPECT_EQ(f32.get("inference h_last"), f32.get("h_last")) << what;
    }
  }
}

// No dy reads a row of zeros (Note [No null rows]): the same gradients, bitwise, as an explicit
// all-zero dy.
TEST(RnnKernels, AbsentDyEqualsZeroDy) {
  for (Cell cell : {Cell::kGru, Cell::kLstm}) {
    const Problem p = random_problem(cell, 4, 6, 5, 48, {6, 2, 5, 6}, 31);
    const Results none = run(p, DType::kFloat32, false);
    const Results zeros = run(p, DType::kFloat32, false, true);
    ASSERT_EQ(none.names, zeros.names);
    for (std::size_t i = 0; i < none.values.size(); ++i) {
      EXPECT_EQ(none.values[i], zeros.values[i]) << name_of(cell) << " " << none.names[i];
    }
    // And the last-state gradient alone still reaches every weight.
    for (std::size_t i = 0; i < none.values.size(); ++i) {
      if (none.names[i].rfind("dw_", 0) != 0) continue;
      double sum = 0;
      for (double v : none.values[i]) sum += std::abs(v);
      EXPECT_GT(sum, 0.0) << name_of(cell) << " " << none.names[i];
    }
  }
}

// N * H = 260 * 64 >= kParallelElements (cpu_rnn.h), so with two threads every step's gate
// loops split the rows into two blocks; the results must be those of one thread.
TEST(RnnKernels, RowBlocksOnTwoThreadsMatchOneThread) {
  std::vector<std::int32_t> lengths(260);
  for (std::size_t s = 0; s < lengths.size(); ++s) lengths[s] = 1 + static_cast<int>(s % 3);
  const int before = omp_get_max_threads();
  for (Cell cell : {Cell::kGru, Cell::kLstm}) {
    const Problem p = random_problem(cell, 260, 3, 4, 64, lengths, 47);
    omp_set_num_threads(1);
    const Results one = run(p, DType::kFloat32, true);
    omp_set_num_threads(2);
    const Results two = run(p, DType::kFloat32, true);
    expect_all_close(two, one, 1e-6, 1e-5, std::string(name_of(cell)) + " 2 threads vs 1");
  }
  omp_set_num_threads(before);
}

// A model's first layer asks for no dx (Layer::input_grad_needed): the weight gradients are
// those of the full backward, bit for bit, and no dx is returned.
TEST(RnnKernels, BackwardWithoutDxKeepsTheWeightGradients) {
  for (Cell cell : {Cell::kGru, Cell::kLstm}) {
    const Problem p = random_problem(cell, 4, 6, 5, 37, {6, 2, 1, 5}, 91);
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      const Results full = run(p, dt, true), skipped = run(p, dt, true, false, false);
      for (std::size_t i = 0; i < skipped.names.size(); ++i) {
        EXPECT_EQ(skipped.values[i], full.get(skipped.names[i]))
            << name_of(cell) << " " << dtype_name(dt) << ": " << skipped.names[i];
      }
      EXPECT_EQ(skipped.names.size() + 1, full.names.size());
    }
  }
}

}  // namespace
}  // namespace mirror
