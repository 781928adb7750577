// mirror-bench train's plot: both panels from 0 and autoscaled over every curve (nothing
// clipped), a scaling-efficiency panel with the no-comm ceiling under --baseline (drawn at
// most at 1, a higher measurement named in its key), the run's
// settings in the title, and one model name per model (gru-rows, gru as its alias). When
// gnuplot is installed the script is also run and must draw a PNG.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "mirror/error.h"
#include "temp_dir.h"
#include "tools/train_bench.h"

namespace mirror::dist {
namespace {

std::vector<TrainBenchRow> rows() {
  TrainBenchRow one, two;
  one.replicas = 1;
  one.samples_per_s = 1000;
  one.scaling_efficiency = 1;
  two.replicas = 2;
  two.samples_per_s = 1700;
  two.scaling_efficiency = 0.85;
  two.compute_only_efficiency = 0.95;
  return {one, two};
}

TEST(BenchPlot, DataHasIdealEfficiencyAndCeiling) {
  EXPECT_EQ(train_bench_plot_data(rows()), "1 1000 1000 1 1\n2 1700 2000 0.85 0.95\n");
  auto no_baseline = rows();
  no_baseline[1].compute_only_efficiency = 0;
  EXPECT_EQ(train_bench_plot_data(no_baseline), "1 1000 1000 1 NaN\n2 1700 2000 0.85 NaN\n");
}

TEST(BenchPlot, ACeilingAboveOneIsDrawnAtOneAndExplained) {
  auto noisy = rows();
  EXPECT_EQ(ceiling_note(noisy), "") << "0.95 needs no comment";
  noisy[1].compute_only_efficiency = 1.511;
  EXPECT_EQ(train_bench_plot_data(noisy), "1 1000 1000 1 1\n2 1700 2000 0.85 1\n");
  const std::string note = ceiling_note(noisy);
  EXPECT_NE(note.find("measured 1.511 at 2 replicas, drawn at 1"), std::string::npos) << note;
  EXPECT_NE(note.find("noise"), std::string::npos) << note;
  TrainBenchOptions o;
  o.baseline = true;
  const std::string g = train_bench_gnuplot(o, "out.png", "out.dat", note);
  EXPECT_NE(g.find("title 'no-comm ceiling (" + note + ")'"), std::string::npos) << g;
}

TEST(BenchPlot, TwoPanelsFromZeroWithTheSettingsInTheTitle) {
  TrainBenchOptions o;
  o.model = "gru-rows";
  o.batch_per_replica = 32;
  o.threads = 2;
  o.compression = "bf16";
  const std::string g = train_bench_gnuplot(o, "out.png", "out.dat");
  EXPECT_NE(g.find("set multiplot layout 2,1"), std::string::npos);
  for (const char* part :
       {"gru-rows", "batch 32 per replica", "2 thread(s)", "compression bf16", "overlap on"}) {
    EXPECT_NE(g.find(part), std::string::npos) << part << " not in the title:\n" << g;
  }
  std::size_t from_zero = 0;
  for (auto at = g.find("set yrange [0:*]"); at != std::string::npos;
       at = g.find("set yrange [0:*]", at + 1)) {
    ++from_zero;
  }
  EXPECT_EQ(from_zero, 2u) << g;
  EXPECT_NE(g.find("scaling efficiency"), std::string::npos);
  EXPECT_EQ(g.find("no-comm ceiling"), std::string::npos) << "not measured without --baseline";
  o.baseline = true;
  EXPECT_NE(train_bench_gnuplot(o, "out.png", "out.dat").find("using 1:5"), std::string::npos);
}

TEST(BenchPlot, GnuplotDrawsIt) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot is not installed";
  }
  testing_util::TempDir dir("mirror-plot");
  TrainBenchOptions o;
  o.baseline = true;
  const auto png = dir.path() / "p.png", dat = dir.path() / "p.dat", gp = dir.path() / "p.gp";
  auto noisy = rows();
  noisy[1].compute_only_efficiency = 1.2;
  std::ofstream(dat) << train_bench_plot_data(noisy);
  std::ofstream(gp) << train_bench_gnuplot(o, png.string(), dat.string(), ceiling_note(noisy));
  ASSERT_EQ(std::system(("gnuplot " + gp.string()).c_str()), 0);
  EXPECT_GT(std::filesystem::file_size(png), 1000u);
}

TEST(BenchPlot, ModelNamesAreMirrorTrains) {
  TrainBenchOptions o;
  for (const char* name : {"cnn", "gru-rows", "gru", "resnet", "inception"}) {
    o.model = name;
    EXPECT_NO_THROW(check_train_bench_options(o)) << name;
  }
  o.model = "lstm";
  try {
    check_train_bench_options(o);
    FAIL() << "lstm accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("resnet, inception or gru-rows"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mirror::dist
