// Shared by the parallel-vs-serial parity tests (tests/train/trainer_*_parallel_test.cpp): run a
// `megatron train` command line on 1 process or under mpirun, read back its --log-jsonl records,
// and compare two runs' losses and grad norms iteration by iteration.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "support/paths.h"

namespace megatron::test {

struct Logged {
  double loss = 0;
  double grad_norm = 0;
};

// iteration -> values, from the training records of a --log-jsonl file.
std::map<int64_t, Logged> read_jsonl(const std::string& path);

// `megatron train` of the tiny parity GPT on the CPU: `layers` layers of h 32 with 4 heads,
// seq 16, micro-batch 2, global batch 8, 10 iterations, cosine LR from 0.003 (2 warm-up),
// seed 5, one validation iteration every 1000, on the walk corpus written into `dir`
// (support/walk_corpus.h), hidden and attention dropout `dropout`.
std::vector<std::string> tiny_train_flags(const std::string& dir, int layers, const std::string& dropout);
// `a` followed by `more`.
std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> more);

// argv run directly (np == 1) or under the local mpirun with np ranks; stderr captured.
CommandResult run_ranks(const std::vector<std::string>& argv, int np);

// Iterations from..10 of `got` equal `ref` to fp32 reduction-order rounding: loss within 2e-6
// and grad norm within 1e-5 relative (the tests justify the bounds); prints the worst errors.
void expect_same(const std::map<int64_t, Logged>& ref, const std::map<int64_t, Logged>& got, int64_t from,
                 const std::string& what);

}  // namespace megatron::test
