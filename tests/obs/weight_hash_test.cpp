// train/weight_hash: the replica check of --check-weight-hash-across-dp-replicas-interval.
//  - weight_hash64 changes with every single-bit flip of a buffer and with its length (zero
//    padding included), and is a pure function of the bytes;
//  - under mpirun -np 4 with data-parallel groups {0, 2} and {1, 3} (as TP2 x DP2): identical
//    replicas pass everywhere; one value changed on rank 3 is found by every rank (the count
//    agreed over the world), rank 3 naming the parameter and rank 0 summing up;
//  - end to end: `megatron train` at DP2 with the distributed optimizer and
//    --overlap-param-gather checks before training and every 2 iterations, and the replicas match.
#include "obs/weight_hash.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "support/mpi.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"

namespace megatron::obs {
namespace {

uint64_t hash_of(const std::vector<unsigned char>& b) { return obs::weight_hash64(b); }

TEST(WeightHash, EveryBitFlipAndEveryLengthChangesTheHash) {
  std::vector<unsigned char> bytes(1027);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 37 + 11) & 0xff);
  const uint64_t h = hash_of(bytes);
  EXPECT_EQ(h, hash_of(bytes));
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
      ASSERT_NE(hash_of(bytes), h) << "byte " << i << " bit " << bit;
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
    }
  }
  std::vector<unsigned char> padded = bytes;
  padded.push_back(0);
  EXPECT_NE(hash_of(padded), h);
  EXPECT_NE(hash_of({}), hash_of({0}));
}

model::ParameterSet replica(backend::Backend& be) {
  model::ParameterSet ps;
  ps.add("embedding.word_embeddings.weight", {64, 8}, model::Init::kNormal);
  ps.add("decoder.layers.0.mlp.linear_fc1.weight", {32, 8}, model::Init::kNormal);
  ps.add("decoder.final_layernorm.weight", {8}, model::Init::kOnes);
  ps.allocate(be, DType::kBF16);
  ps.initialize(be, 1234, 0.02f, 2);
  return ps;
}

TEST(WeightHash, ADifferingReplicaIsFoundAndNamed) {
  if (test::relaunch_under_mpirun(4)) return;
  comm::MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  auto dp = world->split(me % 2, me, "dp");
  auto be = backend::make_cpu_backend();
  model::ParameterSet ps = replica(*be);
  const obs::WeightHashCheck same = obs::compare_weights_across_dp_replicas(ps, *be, *dp, *world, 0);
  EXPECT_EQ(same.mismatches, 0);
  EXPECT_EQ(same.message, "");

  if (me == 3) {
    model::Parameter& fc1 = ps[1];
    Tensor host = Tensor::cpu(fc1.shape, fc1.value.dtype());
    be->copy(fc1.value, host);
    static_cast<uint16_t*>(host.data())[17] ^= 1;  // the last mantissa bit of one bf16 weight
    be->copy(host, fc1.value);
  }
  const obs::WeightHashCheck r = obs::compare_weights_across_dp_replicas(ps, *be, *dp, *world, 40);
  EXPECT_EQ(r.mismatches, 1);
  if (me == 3) {
    EXPECT_EQ(r.message,
              "[--check-weight-hash-across-dp-replicas-interval] rank 3: weights differ from data-parallel rank 0 of "
              "this replica group at iteration 40: decoder.layers.0.mlp.linear_fc1.weight (1 of 3 parameters)");
  } else if (me == 0) {
    EXPECT_EQ(r.message.rfind("weights differ across data-parallel replicas at iteration 40: 1 parameter(s) on 1 "
                              "rank(s), first rank 3 (--check-weight-hash-across-dp-replicas-interval).",
                              0),
              0u)
        << r.message;
  } else {
    EXPECT_EQ(r.message, "");
  }
}

TEST(WeightHash, TrainChecksTheReplicas) {
  const std::string dir = test::scratch_dir("weight_hash_train");
  test::write_walk_corpus(dir);
  const test::CommandResult r =
      test::run_ranks(test::with(test::tiny_train_flags(dir, 2, "0"),
                                 {"--train-iters", "4", "--use-distributed-optimizer", "--overlap-param-gather",
                                  "--overlap-grad-reduce", "--check-weight-hash-across-dp-replicas-interval", "2"}),
                      2);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* at : {"after 0 iterations", "after 2 iterations", "after 4 iterations"}) {
    EXPECT_NE(r.output.find(std::string(">>> Weight hashes match ") + at), std::string::npos) << at << r.output;
  }
  EXPECT_EQ(r.output.find("after 3 iterations"), std::string::npos) << r.output;
  // One rank: no replicas, said once, nothing copied.
  const test::CommandResult one =
      test::run_ranks(test::with(test::tiny_train_flags(dir, 2, "0"),
                                 {"--train-iters", "4", "--check-weight-hash-across-dp-replicas-interval", "2"}),
                      1);
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(one.output.find(">>> Weight hashes: data-parallel size 1, no replicas to compare (no check)"),
            std::string::npos)
      << one.output;
  EXPECT_EQ(one.output.find(">>> Weight hashes match"), std::string::npos) << one.output;
}

}  // namespace
}  // namespace megatron::obs
