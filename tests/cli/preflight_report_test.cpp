// cli/preflight_report: the report's rows (least value with its ranks and hosts, median,
// greatest), the values more than the tolerance below their median, and `megatron plan`'s link
// flags from the median bus bandwidths within and across nodes over the planner's efficiency,
// slow values left out, none from host-staged collectives.
#include "cli/preflight_report.h"

#include <gtest/gtest.h>

#include <string>

namespace megatron::cli {
namespace {

PreflightReport four_ranks_two_nodes() {
  PreflightReport r;
  r.header = "preflight: 4 rank(s) on 2 host(s)";
  r.hosts = {"a", "a", "b", "b"};
  r.rows.push_back({"GEMM bf16", "TFLOP/s", false, {{{0}, 700.0}, {{1}, 690.0}, {{2}, 560.0}, {{3}, 702.0}}});
  r.rows.push_back({"all_reduce [tp]", "GB/s", true, {{{0, 1}, 360.0}, {{2, 3}, 352.0}}});
  r.rows.push_back({"all_reduce [dp]", "GB/s", true, {{{0, 2}, 40.0, true}, {{1, 3}, 0.0421, true}}});
  return r;
}

TEST(PreflightReport, NamesTheSlowAndSuggestsThePlanFlags) {
  int64_t slow = -1;
  const std::string text = format_preflight(four_ranks_two_nodes(), 0.1, &slow);
  EXPECT_EQ(slow, 2);
  EXPECT_EQ(text,
            "preflight: 4 rank(s) on 2 host(s)\n"
            "  GEMM bf16        min 560.0 TFLOP/s (rank 2 on b)  median 695.0  max 702.0  [4 values]\n"
            "  all_reduce [tp]  min 352.0 GB/s (ranks 2,3 on b)  median 356.0  max 360.0  [2 values]\n"
            "  all_reduce [dp]  min 0.0421 GB/s (ranks 1,3 on a,b)  median 20.0  max 40.0  [2 values]\n"
            "2 slow (more than 10% below the median):\n"
            "  rank 2 on b: GEMM bf16 560.0 TFLOP/s, 19.4% below the median\n"
            "  ranks 1,3 on a,b: all_reduce [dp] 0.0421 GB/s, 99.8% below the median\n"
            "for `megatron plan`: --intra-node-bandwidth 445 --inter-node-bandwidth 50  (median bus bandwidths, slow "
            "ones left out, over the planner's 0.80 link efficiency)\n");
  // The 0.0421 GB/s link is left out of the suggestion (50 = 40 / 0.8), unless nothing is slow.
  EXPECT_EQ(plan_link_flags(four_ranks_two_nodes(), 1.0), "--intra-node-bandwidth 445 --inter-node-bandwidth 25");
}

TEST(PreflightReport, NothingSlowWithinTheTolerance) {
  int64_t slow = -1;
  const std::string text = format_preflight(four_ranks_two_nodes(), 1.0, &slow);
  EXPECT_EQ(slow, 0);
  EXPECT_NE(text.find("\nevery rank and group within 100% of its median\n"), std::string::npos) << text;
  PreflightReport one;
  one.header = "h";
  one.hosts = {"a"};
  one.rows.push_back({"GEMM fp32", "TFLOP/s", false, {{{0}, 0.0521}}});
  EXPECT_EQ(plan_link_flags(one, 0.1), "");
  PreflightReport staged = four_ranks_two_nodes();
  staged.host_staged = true;  // MPI through host memory: no link to report
  EXPECT_EQ(plan_link_flags(staged, 0.1), "");
  EXPECT_EQ(format_preflight(staged, 0.1, nullptr).find("megatron plan"), std::string::npos);
  EXPECT_EQ(format_preflight(one, 0.1, nullptr),
            "h\n  GEMM fp32  min 0.0521 TFLOP/s (rank 0 on a)  median 0.0521  max 0.0521  [1 value]\n"
            "every rank and group within 10% of its median\n");
}

TEST(PreflightReport, JsonHoldsEveryValueAndWhetherItIsSlow) {
  const std::string j = preflight_json(four_ranks_two_nodes(), 0.1);
  EXPECT_EQ(j.rfind("{\"header\":\"preflight: 4 rank(s) on 2 host(s)\",\"tolerance\":0.1,\"rows\":[", 0), 0u) << j;
  EXPECT_NE(
      j.find("{\"what\":\"GEMM bf16\",\"unit\":\"TFLOP/s\",\"bus_bandwidth\":false,\"min\":560.0,\"median\":695.0,"
             "\"max\":702.0,\"values\":[{\"ranks\":[0],\"hosts\":[\"a\"],\"value\":700.0,\"slow\":false},"),
      std::string::npos)
      << j;
  EXPECT_NE(j.find("{\"ranks\":[2],\"hosts\":[\"b\"],\"value\":560.0,\"slow\":true}"), std::string::npos) << j;
  EXPECT_NE(j.find("{\"ranks\":[1,3],\"hosts\":[\"a\",\"b\"],\"value\":0.0421,\"slow\":true}"), std::string::npos) << j;
  EXPECT_NE(j.find("],\"slow\":2,\"plan_flags\":\"--intra-node-bandwidth 445 --inter-node-bandwidth 50\"}\n"),
            std::string::npos)
      << j;
}

}  // namespace
}  // namespace megatron::cli
