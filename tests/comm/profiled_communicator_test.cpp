// ProfiledCommunicator over the one-rank group with the CPU backend: every collective becomes a
// row "<op> [<group>]" of the ProfilingBackend's op table (started ones as "start <op>" and
// "wait <op>"), with one call per call made, nothing while the profiler is disabled, groups
// split from it named by their own name, and the results those of the wrapped group.
#include "comm/profiled_communicator.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/profiling_backend.h"
#include "comm/self_communicator.h"
#include "support/deferred_communicator.h"

namespace megatron::comm {
namespace {

std::map<std::string, int64_t> calls_by_row(backend::ProfilingBackend& profiler) {
  std::map<std::string, int64_t> out;
  for (const backend::OpProfileRow& r : profiler.report().ops) out[r.op] = r.calls;
  return out;
}

TEST(ProfiledCommunicator, EveryCollectiveIsARowOfTheOpTable) {
  backend::ProfilingBackend profiler(backend::make_cpu_backend());
  ProfiledCommunicator world(std::make_unique<SelfCommunicator>(profiler.inner(), "world"), profiler);
  Tensor x = Tensor::cpu({4});
  for (int64_t i = 0; i < 4; ++i) x.data_as<float>()[i] = static_cast<float>(i) + 0.5f;
  Tensor gathered = Tensor::cpu({4});

  profiler.set_enabled(false);
  world.all_reduce(x, ReduceOp::kSum);
  EXPECT_TRUE(calls_by_row(profiler).empty()) << "nothing is timed while the profiler is disabled";

  profiler.set_enabled(true);
  world.all_reduce(x, ReduceOp::kSum);
  world.all_reduce(x, ReduceOp::kMax);
  all_gather(world, x, gathered);
  double host[1] = {2.0};
  world.all_reduce_host(host, ReduceOp::kSum);
  const std::vector<int64_t> counts = {4};
  world.start_all_gather(x, gathered, counts)->wait();
  std::unique_ptr<Communicator> tp = world.split(0, 0, "tp");
  ASSERT_NE(tp, nullptr);
  tp->all_reduce(x, ReduceOp::kSum);
  EXPECT_EQ(world.split(-1, 0, "none"), nullptr);

  const std::map<std::string, int64_t> rows = calls_by_row(profiler);
  const std::map<std::string, int64_t> expected = {{"all_reduce [world]", 2},      {"all_gather [world]", 1},
                                                   {"all_reduce_host [world]", 1}, {"start all_gather [world]", 1},
                                                   {"wait all_gather [world]", 1}, {"all_reduce [tp]", 1}};
  EXPECT_EQ(rows, expected);
  // The wrapped group's results: one rank's sums and gathers are the identity.
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(x.data_as<float>()[i], static_cast<float>(i) + 0.5f);
    EXPECT_EQ(gathered.data_as<float>()[i], static_cast<float>(i) + 0.5f);
  }
  EXPECT_EQ(host[0], 2.0);
  EXPECT_EQ(world.name(), "world");
  EXPECT_EQ(world.size(), 1);
}

// Started collectives through a DeferredCommunicator (which runs them only at wait() and
// poisons their outputs with NaN until then): the profiled handles must run the inner wait, or
// the results stay NaN; every start and wait is a row.
TEST(ProfiledCommunicator, StartedCollectivesWaitForTheInnerOnes) {
  backend::ProfilingBackend profiler(backend::make_cpu_backend());
  SelfCommunicator self(profiler.inner(), "dp");
  auto deferred = std::make_unique<test::DeferredCommunicator>(self);
  const test::DeferredCommunicator& seen = *deferred;
  ProfiledCommunicator dp(std::move(deferred), profiler);
  Tensor x = Tensor::cpu({3}), whole = Tensor::cpu({3}), shard = Tensor::cpu({3});
  for (int64_t i = 0; i < 3; ++i) x.data_as<float>()[i] = 1.5f * static_cast<float>(i + 1);
  const std::vector<int64_t> counts = {3};
  dp.start_all_reduce(x, ReduceOp::kSum)->wait();
  Tensor in = x;
  dp.start_reduce_scatter(in, shard, counts, ReduceOp::kSum)->wait();
  dp.start_all_gather(shard, whole, counts)->wait();
  EXPECT_EQ(seen.deferred(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    const float v = 1.5f * static_cast<float>(i + 1);
    EXPECT_EQ(x.data_as<float>()[i], v) << i;
    EXPECT_EQ(shard.data_as<float>()[i], v) << i;
    EXPECT_EQ(whole.data_as<float>()[i], v) << i;
  }
  Tensor y = x;
  dp.broadcast(y, 0);
  const std::map<std::string, int64_t> expected = {{"start all_reduce [dp]", 1},
                                                   {"wait all_reduce [dp]", 1},
                                                   {"start reduce_scatter [dp]", 1},
                                                   {"wait reduce_scatter [dp]", 1},
                                                   {"start all_gather [dp]", 1},
                                                   {"wait all_gather [dp]", 1},
                                                   {"broadcast [dp]", 1}};
  EXPECT_EQ(calls_by_row(profiler), expected);
}

}  // namespace
}  // namespace megatron::comm
