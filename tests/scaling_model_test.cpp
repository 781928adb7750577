// The scaling predictor's pure functions (tools/scaling_model.h): all-reduce times against
// their closed forms, the step simulation's overlap, the sweep fit, and the profile reader.
#include "tools/scaling_model.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mirror/error.h"

namespace mirror::dist {
namespace {

LinkModel link(double alpha_us, double gbit) { return {"test", alpha_us, gbit, ""}; }

TEST(ScalingModel, RingOnOneNodeIsTheClosedForm) {
  const Cluster c{1, 4, link(10, 8), link(1, 1)};  // 8 Gbit/s = 1e9 bytes/s
  // 2 (P - 1) steps of alpha + bytes / P.
  const double expected = 6 * (10e-6 + 1e6 / 4 / 1e9);
  EXPECT_NEAR(allreduce_seconds(1e6, c, Algorithm::kRing), expected, 1e-12);
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e6, c, Algorithm::kHierarchical),
                   allreduce_seconds(1e6, c, Algorithm::kRing));
  EXPECT_EQ(allreduce_seconds(1e6, Cluster{1, 1, link(10, 8), link(1, 1)}, Algorithm::kRing), 0);
}

TEST(ScalingModel, RingAcrossNodesWaitsForTheSlowestLink) {
  const Cluster c{2, 2, link(1, 800), link(20, 8)};
  const double expected = 6 * (20e-6 + 1e6 / 4 / 1e9);
  EXPECT_NEAR(allreduce_seconds(1e6, c, Algorithm::kRing), expected, 1e-12);
}

TEST(ScalingModel, HierarchicalIsIntraThenInterThenIntra) {
  const Cluster c{4, 8, link(2, 800), link(20, 8)};
  const double bytes = 8e6;
  const double intra_half = 7 * (2e-6 + bytes / 8 / 1e11);  // reduce-scatter among 8 GPUs
  const double inter = 6 * (20e-6 + bytes / 4 / 1e9);       // ring among 4 nodes
  EXPECT_NEAR(allreduce_seconds(bytes, c, Algorithm::kHierarchical), 2 * intra_half + inter, 1e-12);
  // Fewer latency-bound steps across the network: it wins for small buffers on many nodes.
  const Cluster many{64, 8, link(2, 800), link(20, 8)};
  EXPECT_LT(allreduce_seconds(1e4, many, Algorithm::kHierarchical),
            allreduce_seconds(1e4, many, Algorithm::kRing));
}

StepProfile two_buckets() {
  StepProfile p;
  p.compute_ms = 100;
  p.backward_end_ms = 90;
  p.buckets = {{1e6, 40}, {1e6, 90}};
  return p;
}

TEST(ScalingModel, OverlapHidesWhatFinishesBeforeBackwardEnds) {
  // 2 ranks over 8 Gbit/s, no latency: each bucket's all-reduce takes 1 ms.
  const Cluster c{2, 1, link(0, 1e6), link(0, 8)};
  const Prediction on = predict_step(two_buckets(), c, Algorithm::kRing, {true, 1.0});
  EXPECT_NEAR(on.comm_ms, 2.0, 1e-9);
  EXPECT_NEAR(on.exposed_ms, 1.0, 1e-9);  // the first is hidden, the last is not
  EXPECT_NEAR(on.step_ms, 101.0, 1e-9);
  EXPECT_NEAR(on.efficiency, 100.0 / 101.0, 1e-12);
  const Prediction off = predict_step(two_buckets(), c, Algorithm::kRing, {false, 1.0});
  EXPECT_NEAR(off.exposed_ms, 2.0, 1e-9);
  const Prediction fp16 = predict_step(two_buckets(), c, Algorithm::kRing, {false, 0.5});
  EXPECT_NEAR(fp16.exposed_ms, 1.0, 1e-9);
}

TEST(ScalingModel, BucketsRunOneAtATime) {
  // A slow link: the second bucket waits for the first (40 ms + 60 ms), then takes 60 ms.
  const Cluster c{2, 1, link(0, 1e6), link(0, 8.0 / 60)};
  const Prediction p = predict_step(two_buckets(), c, Algorithm::kRing, {true, 1.0});
  EXPECT_NEAR(p.exposed_ms, 40 + 60 + 60 - 90, 1e-6);
  const Prediction alone =
      predict_step(two_buckets(), Cluster{1, 1, c.intra, c.inter}, Algorithm::kRing, {true, 1.0});
  EXPECT_EQ(alone.exposed_ms, 0);
  EXPECT_EQ(alone.efficiency, 1);
}

TEST(ScalingModel, FitRecoversAlphaAndBandwidth) {
  const LinkModel truth = link(50, 2);
  std::vector<std::pair<double, double>> points;
  for (double bytes : {1e4, 1e5, 1e6, 1e7}) {
    points.emplace_back(
        bytes, 1e6 * allreduce_seconds(bytes, Cluster{4, 1, truth, truth}, Algorithm::kRing));
  }
  const LinkModel fit = fit_ring_sweep(points, 4, "fit");
  EXPECT_NEAR(fit.alpha_us, 50, 1e-6);
  EXPECT_NEAR(fit.gbit_s, 2, 1e-9);
  EXPECT_THROW(fit_ring_sweep({{1e4, 10}}, 4, "one point"), InvalidArgument);
  EXPECT_THROW(fit_ring_sweep({{1e4, 10}, {1e5, 5}}, 2, "decreasing"), InvalidArgument);
}

TEST(ScalingModel, ParsesASavedSweepTable) {
  const std::string text =
      "# mirror-bench allreduce: 2 ranks on 2 node(s), MPI on host memory\n"
      "#   size(B)  count  type  time(us) ...\n"
      "     65536  16384  float32  3515.2  0.019  0.019  0  541.6  0.121  0.121  0  15.4%\n"
      "    262144  65536  float32  4233.9  0.062  0.062  0  21580.8  0.012  0.012  0  509.7%\n";
  const SweepTable t = parse_sweep_table(text);
  EXPECT_EQ(t.ranks, 2);
  ASSERT_EQ(t.points.size(), 2u);
  EXPECT_EQ(t.points[1].first, 262144);
  EXPECT_DOUBLE_EQ(t.points[1].second, 4233.9);
  EXPECT_THROW(parse_sweep_table("hello\n"), DataError);
}

TEST(ScalingModel, LinksByPresetOrFigures) {
  EXPECT_EQ(parse_link("ib-ndr").gbit_s, 400);
  EXPECT_EQ(parse_link("25gbe").gbit_s, 25);
  const LinkModel custom = parse_link("5:100");
  EXPECT_EQ(custom.alpha_us, 5);
  EXPECT_EQ(custom.gbit_s, 100);
  try {
    parse_link("infiniband");
    FAIL() << "accepted an unknown link";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("nvlink4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_link("5:0"), InvalidArgument);
  EXPECT_THROW(parse_link("x:10"), InvalidArgument);
}

TEST(ScalingModel, ReadsTheTrainBenchProfile) {
  const auto list = nlohmann::json::parse(R"([
    {"replicas": 1, "step_ms": 10},
    {"replicas": 2, "model": "cnn", "batch_per_replica": 64, "devices": "cpu", "overlap": true,
     "step_ms": 110, "exposed_comm_ms": 10, "forward_ms": 30, "backward_ms": 60,
     "bucket_timings": [{"bytes": 1000, "launch_ms": 50, "done_ms": 60},
                        {"bytes": 2000, "launch_ms": 90, "done_ms": 99}]}])");
  const StepProfile p = profile_from_bench_row(pick_bench_row(list, 0));
  EXPECT_EQ(p.compute_ms, 100);
  EXPECT_EQ(p.backward_end_ms, 90);
  ASSERT_EQ(p.buckets.size(), 2u);
  EXPECT_EQ(p.buckets[1].bytes, 2000);
  EXPECT_EQ(p.buckets[1].ready_ms, 90);
  const StepProfile half = scale_profile(p, 0.5);
  EXPECT_EQ(half.compute_ms, 50);
  EXPECT_EQ(half.buckets[0].ready_ms, 25);
  EXPECT_THROW(scale_profile(p, 0), InvalidArgument);
  EXPECT_THROW(pick_bench_row(list, 4), DataError);
  // One replica has no buckets; overlap off has no ready times.
  EXPECT_THROW(profile_from_bench_row(list[0]), DataError);
  auto off = list[1];
  off["overlap"] = false;
  EXPECT_THROW(profile_from_bench_row(off), DataError);
}

TEST(ScalingModel, TableHasOneByOneAndEveryNodeCount) {
  const auto rows =
      predict_scaling(two_buckets(), link(3, 3600), link(2, 400), 8, {1, 2, 128}, {true, 1.0});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].nodes * rows[0].gpus_per_node, 1);
  EXPECT_EQ(rows[3].nodes, 128);
  // More nodes never make the step faster.
  for (std::size_t i = 1; i < rows.size(); ++i)
    EXPECT_GE(rows[i].ring.step_ms, rows[i - 1].ring.step_ms);
  const std::string table =
      format_scaling_table(two_buckets(), link(3, 3600), link(2, 400), {true, 1.0}, rows);
  EXPECT_NE(table.find("   128 x 8       1024 |"), std::string::npos) << table;
  EXPECT_THROW(predict_scaling(two_buckets(), link(3, 3600), link(2, 400), 0, {1}, {}),
               InvalidArgument);
}

}  // namespace
}  // namespace mirror::dist
