// The gradient buffer's buckets (backprop order), Megatron's contiguous shard ranges, and the
// distributed optimizer against the replicated one under mpirun -np 2 (uneven pieces, several
// buckets): with clipping off the update is elementwise, and a sum of two terms does not depend
// on the reduction's order (all-reduce vs reduce-scatter), so the sharded optimizer must give
// bit-identical parameters and optimizer state.
#include "parallel/grad_buffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"
#include "core/dtype.h"
#include "parallel/optimizer.h"
#include "support/mpi.h"
#include "support/recording_communicator.h"

namespace megatron::parallel {
namespace {

model::ParameterSet make_params(backend::Backend& backend, DType dtype) {
  model::ParameterSet ps;
  ps.add("a.weight", {5, 3}, model::Init::kNormal);  // [0, 15)
  ps.add("a.bias", {5}, model::Init::kZeros);        // [15, 20)
  ps.add("b.weight", {4, 4}, model::Init::kNormal);  // [20, 36)
  ps.add("c.weight", {7}, model::Init::kOnes);       // [36, 43)
  ps.allocate(backend, dtype);
  ps.initialize(backend, 11, 0.5f, 2);
  return ps;
}

TEST(GradBuffer, BucketsWalkTheBufferInBackpropOrder) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  auto one = parallel::grad_buckets(ps, 0);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].start, 0);
  EXPECT_EQ(one[0].end, 43);
  // Bucket size 10: c (7) is too small alone, c+b = 23 closes at b's start; then a.bias + a.weight.
  auto b = parallel::grad_buckets(ps, 10);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start, 20);
  EXPECT_EQ(b[0].end, 43);
  EXPECT_EQ(b[1].start, 0);
  EXPECT_EQ(b[1].end, 20);
  // Bucket size 1: one bucket per parameter, last parameter first.
  auto each = parallel::grad_buckets(ps, 1);
  ASSERT_EQ(each.size(), 4u);
  EXPECT_EQ(each[0].start, 36);
  EXPECT_EQ(each[3].end, 15);
}

TEST(GradBuffer, ShardsAreContiguousPiecesOfEachBucket) {
  EXPECT_EQ(shard_counts(10, 3), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(shard_counts(9, 3), (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(shard_counts(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(shard_counts(0, 2), (std::vector<int64_t>{0, 0}));
  const std::vector<Range> buckets = {{20, 43}, {0, 20}};
  // 23 -> 8, 8, 7; 20 -> 7, 7, 6.
  auto r1 = parallel::owned_ranges(buckets, 3, 1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].start, 28);
  EXPECT_EQ(r1[0].end, 36);
  EXPECT_EQ(r1[1].start, 7);
  EXPECT_EQ(r1[1].end, 14);
  // Every element has exactly one owner.
  std::vector<int> owners(43, 0);
  for (int64_t r = 0; r < 3; ++r)
    for (const Range& x : parallel::owned_ranges(buckets, 3, r))
      for (int64_t i = x.start; i < x.end; ++i) ++owners[static_cast<size_t>(i)];
  for (int o : owners) EXPECT_EQ(o, 1);
}

using test::RecordingCommunicator;
using Log = std::vector<std::string>;

// --overlap-grad-reduce: a bucket starts exactly when the backward has finished all of its
// parameters, as an average (the 1/dp scaling inside the collective, no pass of its own over
// the gradients); finish_grad_sync() starts the rest and waits for all.
TEST(GradBuffer, OverlappedReductionStartsEachBucketOnceItsGradientsAreFinal) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);  // buckets [20, 43), [0, 20)
  RecordingCommunicator dp({ps.grads()});
  parallel::GradBuffer gb(ps, dp, false, 10);
  Tensor g = ps.grads();
  backend->fill(g, 1.0f);

  gb.grads_final_from(2);  // not armed: an earlier micro-batch's backward starts nothing
  EXPECT_TRUE(dp.log.empty());
  gb.arm_grad_overlap(0, 4);  // the whole model is one chunk
  gb.grads_final_from(3);     // c.weight [36, 43) alone does not complete [20, 43)
  EXPECT_TRUE(dp.log.empty());
  gb.grads_final_from(2);  // b.weight [20, 36) completes it
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)"}));
  EXPECT_EQ(g.data_as<float>()[20], 1.0f) << "left to the collective to scale";
  gb.grads_final_from(1);
  gb.grads_final_from(0);
  gb.finish_grad_sync();
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)", "start all_reduce [0, 20)", "wait all_reduce [20, 43)",
                         "wait all_reduce [0, 20)"}));
  EXPECT_EQ(dp.reduce_ops, (std::vector<comm::ReduceOp>{comm::ReduceOp::kAvg, comm::ReduceOp::kAvg}));
  EXPECT_EQ(g.data_as<float>()[0], 1.0f);

  // Without overlap (or an early backward) everything starts in finish_grad_sync, in bucket order.
  dp.log.clear();
  gb.grads_final_from(0);
  gb.finish_grad_sync();
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)", "start all_reduce [0, 20)", "wait all_reduce [20, 43)",
                         "wait all_reduce [0, 20)"}));
}

// Copy engines (MEGATRON_DP_COPY_ENGINE): asked for the values and the gradients with a receive
// buffer for the largest bucket's dp pieces; the last GradBuffer::kTailBucketsOnSms buckets in
// backprop order (those that end the backward) are started with the copy engines off, the
// others with them on. Refused by the group, or without the distributed optimizer: nothing
// changes.
TEST(GradBuffer, CopyEnginesReduceAllButTheLastBucketsOfTheBackward) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  RecordingCommunicator dp({ps.grads(), ps.values()});
  parallel::GradBuffer gb(ps, dp, true, 5);  // buckets [36, 43), [20, 36), [15, 20), [0, 15)
  ASSERT_EQ(gb.buckets().size(), 4u);
  const comm::CopyEngineResult refused = gb.enable_copy_engine();
  EXPECT_FALSE(refused.on) << "the group refuses";
  EXPECT_EQ(refused.why_off, "no copy engines here") << "the group's reason, passed on";
  EXPECT_FALSE(gb.copy_engine_on());
  EXPECT_TRUE(dp.log.empty());
  dp.copy_engine_available = true;
  ASSERT_TRUE(gb.enable_copy_engine().on);
  EXPECT_TRUE(gb.copy_engine_on());
  // The largest bucket, b.weight's 16, in 2 pieces of 8; a.weight's 15 needs 2 x 8 too.
  EXPECT_EQ(dp.log, (Log{"enable_copy_engine 16 over [0, 43) [0, 43)"}));
  dp.log.clear();
  gb.arm_grad_overlap(0, 4);
  gb.grads_final_from(2);  // [36, 43) and [20, 36): on the copy engines
  gb.grads_final_from(0);  // [15, 20) and [0, 15): the tail, on the SMs
  gb.finish_grad_sync();
  static_assert(parallel::GradBuffer::kTailBucketsOnSms == 2);
  EXPECT_EQ(dp.log,
            (Log{"start reduce_scatter [36, 43)", "start reduce_scatter [20, 36)", "copy engine off",
                 "start reduce_scatter [15, 20)", "copy engine on", "copy engine off", "start reduce_scatter [0, 15)",
                 "copy engine on", "wait reduce_scatter [36, 43)", "wait reduce_scatter [20, 36)",
                 "wait reduce_scatter [15, 20)", "wait reduce_scatter [0, 15)"}));

  RecordingCommunicator replicated_dp({ps.grads()});
  replicated_dp.copy_engine_available = true;
  parallel::GradBuffer replicated(ps, replicated_dp, false, 5);
  const comm::CopyEngineResult all_reduce = replicated.enable_copy_engine();
  EXPECT_FALSE(all_reduce.on);
  EXPECT_NE(all_reduce.why_off.find("--use-distributed-optimizer"), std::string::npos) << all_reduce.why_off;
  EXPECT_TRUE(replicated_dp.log.empty());
}

// --overlap-param-gather: the gathers start in the order the forward reads the parameters, and
// each is waited for just before the forward reads a parameter of its bucket.
TEST(GradBuffer, OverlappedParamGatherWaitsPerBucketBeforeTheForwardReadsIt) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  RecordingCommunicator dp({ps.values()});
  parallel::GradBuffer gb(ps, dp, true, 10);
  gb.start_param_gather(true);
  EXPECT_EQ(dp.log, (Log{"start all_gather [0, 20)", "start all_gather [20, 43)"}));
  gb.before_reading(1);  // a.weight [0, 15) is in bucket [0, 20)
  gb.before_reading(2);  // a.bias too
  EXPECT_EQ(dp.log.back(), "wait all_gather [0, 20)");
  EXPECT_EQ(dp.log.size(), 3u);
  gb.before_reading(3);  // b.weight [20, 36)
  EXPECT_EQ(dp.log.back(), "wait all_gather [20, 43)");
  gb.before_reading(4);
  gb.finish_param_gather();
  EXPECT_EQ(dp.log.size(), 4u) << "each gather is waited for once";

  // Without overlap the step waits for every gather itself.
  dp.log.clear();
  gb.start_param_gather(false);
  EXPECT_EQ(dp.log, (Log{"start all_gather [0, 20)", "start all_gather [20, 43)", "wait all_gather [20, 43)",
                         "wait all_gather [0, 20)"}));
}

// Pipeline parallelism: buckets never span two model chunks, and the tied embedding (here
// a.weight) sits alone in a bucket that only finish_grad_sync() starts; an armed chunk starts
// only its own buckets.
TEST(GradBuffer, BucketsStayInsideChunksAndTheHeldParameterWaitsForFinish) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  // Chunk 1 from b.weight on: [20, 43) and [0, 20), whatever the size limit.
  auto two = parallel::grad_buckets(ps, 0, {2});
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].start, 20);
  EXPECT_EQ(two[1].end, 20);
  auto sized = parallel::grad_buckets(ps, 16, {2});  // c + b closes at 20 anyway; a.bias + a.weight
  ASSERT_EQ(sized.size(), 2u);
  EXPECT_EQ(sized[1].start, 0);

  RecordingCommunicator dp({ps.grads()});
  parallel::GradBuffer gb(ps, dp, false, parallel::BucketLayout{0, {2}, 0});
  ASSERT_EQ(gb.buckets().size(), 3u);  // [20, 43), [15, 20), [0, 15)
  EXPECT_EQ(gb.buckets()[1].start, 15);
  EXPECT_EQ(gb.held_bucket(), 2u);
  gb.arm_grad_overlap(0, 2);  // chunk 0 armed: chunk 1's final gradients start nothing
  gb.grads_final_from(2);
  EXPECT_TRUE(dp.log.empty());
  gb.arm_grad_overlap(2, 4);
  gb.grads_final_from(2);
  gb.disarm_grad_overlap();
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)"}));
  gb.grads_final_from(0);  // disarmed (an earlier micro-batch): nothing
  EXPECT_EQ(dp.log.size(), 1u);
  gb.arm_grad_overlap(0, 2);
  gb.grads_final_from(1);
  gb.grads_final_from(0);  // a.weight is final here, but held
  gb.disarm_grad_overlap();
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)", "start all_reduce [15, 20)"}));
  gb.finish_grad_sync();
  EXPECT_EQ(dp.log, (Log{"start all_reduce [20, 43)", "start all_reduce [15, 20)", "start all_reduce [0, 15)",
                         "wait all_reduce [20, 43)", "wait all_reduce [15, 20)", "wait all_reduce [0, 15)"}));
}

// Same gradients on every run: a function of (rank, element), averaged over the ranks by the
// reduction.
void fill_grads(model::ParameterSet& ps, int64_t rank, int64_t step) {
  float* g = ps.grads().data_as<float>();
  for (int64_t i = 0; i < ps.total_numel(); ++i) {
    g[i] = 0.01f * static_cast<float>((i * 7 + rank * 3 + step) % 11) - 0.05f;
  }
}

// The distributed optimizer updates its piece of each bucket in the order the forward reads
// the buckets and starts that bucket's gather right after, before updating the next: at each
// gather's start exactly the pieces of the buckets gathered so far hold new values.
TEST(GradBuffer, DistributedStepGathersEachBucketRightAfterItsUpdate) {
  auto backend = backend::make_cpu_backend();
  model::ParameterSet ps = make_params(*backend, DType::kF32);
  RecordingCommunicator dp({ps.grads(), ps.values()});  // rank 0 of 2
  parallel::OptimizerConfig oc;
  oc.clip_grad = 0.0;
  parallel::MixedPrecisionOptimizer opt(ps, *backend, oc, optim::GradScaler::constant(1.0f), {&dp, true, 5});
  // Buckets [36, 43), [20, 36), [15, 20), [0, 15); rank 0 owns their first halves.
  const std::vector<Range> owned{{36, 40}, {20, 28}, {15, 18}, {0, 8}};
  ASSERT_EQ(opt.grad_buffer().owned().size(), owned.size());
  const std::vector<float> before(ps.values().data_as<float>(), ps.values().data_as<float>() + ps.total_numel());
  std::vector<std::string> seen;
  dp.on_start = [&](const std::string& entry) {
    std::string changed;
    for (const Range& r : owned) {
      if (std::memcmp(ps.values().data_as<float>() + r.start, before.data() + r.start,
                      4 * static_cast<size_t>(r.size())) != 0) {
        changed += " " + std::to_string(r.start);
      }
    }
    seen.push_back(entry + ":" + changed);
  };
  fill_grads(ps, 0, 1);
  opt.reduce_gradients();
  seen.clear();
  opt.step(0.01f, 0.0f);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"start all_gather [0, 15): 0", "start all_gather [15, 20): 15 0",
                                      "start all_gather [20, 36): 20 15 0", "start all_gather [36, 43): 36 20 15 0"}));
}

TEST(GradBuffer, DistributedOptimizerMatchesReplicatedBitForBit) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  auto backend = backend::make_cpu_backend();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t bucket : {int64_t{0}, int64_t{10}}) {
      model::ParameterSet rep = make_params(*backend, dtype), dist = make_params(*backend, dtype);
      parallel::OptimizerConfig oc;
      oc.clip_grad = 0.0;  // no norm: the step is elementwise, so sharding cannot change a bit
      parallel::MixedPrecisionOptimizer a(rep, *backend, oc, optim::GradScaler::constant(1.0f),
                                          {world.get(), false, bucket});
      parallel::MixedPrecisionOptimizer b(dist, *backend, oc, optim::GradScaler::constant(1.0f),
                                          {world.get(), true, bucket});
      EXPECT_LE(b.grad_buffer().owned_numel(), 43 / 2 + 2);
      for (int64_t step = 0; step < 3; ++step) {
        fill_grads(rep, world->rank(), step);
        fill_grads(dist, world->rank(), step);
        a.reduce_gradients();
        b.reduce_gradients();
        a.step(0.01f, 0.1f);
        b.step(0.01f, 0.1f);
      }
      ASSERT_EQ(std::memcmp(rep.values().data(), dist.values().data(), static_cast<size_t>(rep.values().nbytes())), 0)
          << dtype_name(dtype) << " bucket " << bucket;
      // The norm is a reduction: the shards' double sums added over the ranks reorder the
      // additions of the replicated sum, a last-bit difference at most (4 ulps allowed).
      EXPECT_DOUBLE_EQ(a.params_norm(), b.params_norm());
      // Each parameter's state gathered to DP rank 0 (from shards that split parameters when
      // the buckets hold 10 elements) equals the replicated optimizer's own.
      for (size_t i = 0; i < rep.params().size(); ++i) {
        for (parallel::StateKind kind :
             {parallel::StateKind::kMainParams, parallel::StateKind::kExpAvg, parallel::StateKind::kExpAvgSq}) {
          if (kind == parallel::StateKind::kMainParams && dtype == DType::kF32) continue;
          const Tensor ta = a.gather_param_state(rep.params()[i], kind);
          const Tensor tb = b.gather_param_state(dist.params()[i], kind);
          if (world->rank() == 0) {
            ASSERT_TRUE(tb.defined());
            EXPECT_EQ(std::memcmp(ta.data(), tb.data(), static_cast<size_t>(ta.nbytes())), 0)
                << rep.params()[i].name << " kind " << static_cast<int>(kind);
          } else {
            EXPECT_FALSE(tb.defined());
          }
        }
      }
      // With clipping the norm is the same to rounding on every rank (shards' sums reduced).
      parallel::OptimizerConfig clip;
      clip.clip_grad = 1e-3;
      parallel::MixedPrecisionOptimizer c(dist, *backend, clip, optim::GradScaler::constant(1.0f),
                                          {world.get(), true, bucket});
      parallel::MixedPrecisionOptimizer d(rep, *backend, clip, optim::GradScaler::constant(1.0f),
                                          {world.get(), false, bucket});
      fill_grads(dist, world->rank(), 9);
      fill_grads(rep, world->rank(), 9);
      c.reduce_gradients();
      d.reduce_gradients();
      const parallel::StepResult sc = c.step(0.01f, 0.0f), sd = d.step(0.01f, 0.0f);
      ASSERT_TRUE(sc.grad_norm && sd.grad_norm);
      EXPECT_NEAR(*sc.grad_norm, *sd.grad_norm, 1e-12 * *sd.grad_norm);
      const double max_norm = comm::all_reduce_scalar(*world, *sc.grad_norm, comm::ReduceOp::kMax);
      EXPECT_EQ(max_norm, *sc.grad_norm) << "every rank logs the same norm";
    }
  }
}

// Parameters whose gradient buffer is in `grad_dtype` (make_params' layout).
model::ParameterSet make_params(backend::Backend& backend, DType dtype, DType grad_dtype) {
  model::ParameterSet ps;
  ps.add("a.weight", {5, 3}, model::Init::kNormal);
  ps.add("a.bias", {5}, model::Init::kZeros);
  ps.add("b.weight", {4, 4}, model::Init::kNormal);
  ps.add("c.weight", {7}, model::Init::kOnes);
  ps.allocate(backend, dtype, grad_dtype);
  ps.initialize(backend, 11, 0.5f, 2);
  return ps;
}

// The gradients as fp32 (a 16-bit buffer widened), and setting them from fp32 (rounded).
std::vector<float> grads_of(backend::Backend& backend, const model::ParameterSet& ps) {
  Tensor f = Tensor::cpu({ps.total_numel()}, DType::kF32);
  backend.copy(ps.grads(), f);
  const float* p = f.data_as<const float>();
  return std::vector<float>(p, p + ps.total_numel());
}
void set_grads(backend::Backend& backend, model::ParameterSet& ps, const std::vector<float>& v) {
  Tensor f = Tensor::cpu({ps.total_numel()}, DType::kF32);
  std::copy(v.begin(), v.end(), f.data_as<float>());
  Tensor g = ps.grads();
  backend.copy(f, g);
}

// A 16-bit gradient buffer (--fp16 without --accumulate-allreduce-grads-in-fp32, --bf16 with
// --grad-reduce-in-bf16) under mpirun -np 2: the buffer is 16-bit (2 bytes a gradient, the
// collective's bytes), each rank's gradient scaled by 1/2 in 16 bits, the two summed in 16 bits
// (MPI's user-defined op: one rounded addition) - what Megatron's 16-bit buffer and a 16-bit
// all-reduce of two ranks leave - replicated and sharded, one bucket or several; and it is not
// the fp32 average (the fp32 path, unchanged, is checked bit for bit against the replicated
// optimizer above).
TEST(GradBuffer, SixteenBitBufferReducesAsMegatronsDoes) {
  if (test::relaunch_under_mpirun(2)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  auto backend = backend::make_cpu_backend();
  const int64_t me = world->rank();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool distributed : {false, true}) {
      for (int64_t bucket : {int64_t{0}, int64_t{10}}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " distributed " << distributed << " bucket " << bucket);
        model::ParameterSet ps = make_params(*backend, dtype, dtype);
        ASSERT_EQ(ps.grads().dtype(), dtype);
        EXPECT_EQ(ps.grads().nbytes(), 2 * ps.total_numel());
        GradBuffer gb(ps, *world, distributed, BucketLayout{bucket, {}, -1}, dtype, backend.get());
        EXPECT_EQ(gb.grad_dtype(), dtype);
        std::vector<float> mine(static_cast<size_t>(ps.total_numel()));
        for (int64_t i = 0; i < ps.total_numel(); ++i) {
          mine[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 7 + me * 3) % 11) - 0.05f;
        }
        set_grads(*backend, ps, mine);  // the backward's 16-bit result
        gb.finish_grad_sync();
        const std::vector<float> g = grads_of(*backend, ps);
        int64_t checked = 0, unlike_fp32 = 0;
        for (const Range& r : gb.owned()) {
          for (int64_t i = r.start; i < r.end; ++i) {
            float theirs[2];  // each rank's gradient, as it was written
            for (int64_t k = 0; k < 2; ++k) theirs[k] = 0.01f * static_cast<float>((i * 7 + k * 3) % 11) - 0.05f;
            const float a = round_to(dtype, 0.5f * round_to(dtype, theirs[0]));
            const float b = round_to(dtype, 0.5f * round_to(dtype, theirs[1]));
            const float want = round_to(dtype, a + b);
            EXPECT_EQ(g[static_cast<size_t>(i)], want) << "element " << i;
            unlike_fp32 += g[static_cast<size_t>(i)] != 0.5f * (theirs[0] + theirs[1]);
            ++checked;
          }
        }
        EXPECT_GT(checked, 10);
        EXPECT_GT(unlike_fp32, checked / 4) << "the 16-bit roundings should show";
      }
    }
  }
}

// One data-parallel rank: a 16-bit buffer holds what the backward ops rounded into it, and
// finish_grad_sync leaves it as it is; a buffer whose dtype is not the parameters' gradients'
// is refused.
TEST(GradBuffer, SixteenBitBufferAtOneRankIsLeftAlone) {
  auto backend = backend::make_cpu_backend();
  comm::SelfCommunicator self(*backend, "dp");
  model::ParameterSet ps = make_params(*backend, DType::kF16, DType::kF16);
  GradBuffer gb(ps, self, false, BucketLayout{10, {}, -1}, DType::kF16, backend.get());
  const float third = round_to(DType::kF16, 1.0f / 3.0f);
  set_grads(*backend, ps, std::vector<float>(43, third));
  gb.finish_grad_sync();
  for (float v : grads_of(*backend, ps)) EXPECT_EQ(v, third);
  model::ParameterSet fp = make_params(*backend, DType::kF16);  // fp32 gradients
  EXPECT_DEATH(GradBuffer(fp, self, false, BucketLayout{10, {}, -1}, DType::kF16, backend.get()),
               "gradient buffer in fp16 over parameters whose gradients are fp32");
  EXPECT_DEATH(GradBuffer(ps, self, false, BucketLayout{10, {}, -1}),
               "gradient buffer in fp32 over parameters whose gradients are fp16");
}

}  // namespace
}  // namespace megatron::parallel
