// `megatron train` given hostile numbers. Every flag it declares that takes a value, given each
// of kHostile on a small --dry-run job (bf16 with --gpu, so that the planner's prediction runs
// too; run bounded: cli/bounded_run.h), ends either in
// acceptance or in a one-line error naming that flag: never a signal, a hang or unbounded
// memory. The flags come from the parser itself (Args::settings()), so a new flag is covered
// the day it is declared. Of them, the numeric ones (those whose value "x" is "expected an
// integer" / "expected a number") must refuse what no flag means: nan, inf, -inf and 1e400 (and,
// for integers, 1e300 and 99999999999999999999); counts refuse 0 and -1, and tensor dimensions
// 2^62 and 2^63 - 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/bounded_run.h"
#include "cli/commands.h"
#include "cli/train_args.h"

namespace megatron {
namespace {

using Argv = std::vector<std::string>;

const Argv kHostile = {"nan",
                       "inf",
                       "-inf",
                       "1e300",
                       "1e400",
                       "-1",
                       "0",
                       "2147483648",
                       "4611686018427387904",
                       "9223372036854775807",
                       "99999999999999999999"};
const std::set<std::string> kNonFinite = {"nan", "inf", "-inf", "1e400"};
const std::set<std::string> kNotInt64 = {"1e300", "99999999999999999999"};
const std::set<std::string> kNotPositive = {"-1", "0"};
const std::set<std::string> kHuge = {"4611686018427387904", "9223372036854775807"};
// Counts that are never 0 or negative.
const std::set<std::string> kPositive = {"--num-layers",
                                         "--hidden-size",
                                         "--num-attention-heads",
                                         "--ffn-hidden-size",
                                         "--kv-channels",
                                         "--seq-length",
                                         "--max-position-embeddings",
                                         "--make-vocab-size-divisible-by",
                                         "--vocab-size",
                                         "--micro-batch-size",
                                         "--global-batch-size",
                                         "--tensor-model-parallel-size",
                                         "--pipeline-model-parallel-size",
                                         "--num-layers-per-virtual-pipeline-stage",
                                         "--recompute-num-layers",
                                         "--nproc-per-node",
                                         "--train-iters",
                                         "--train-samples",
                                         "--log-interval",
                                         "--eval-interval"};
// Of them, tensor dimensions and parallel sizes: never 2^62 either (cli/args.h kMaxDimension).
const std::set<std::string> kDimensions = {"--num-layers",
                                           "--hidden-size",
                                           "--num-attention-heads",
                                           "--ffn-hidden-size",
                                           "--kv-channels",
                                           "--seq-length",
                                           "--max-position-embeddings",
                                           "--make-vocab-size-divisible-by",
                                           "--vocab-size",
                                           "--micro-batch-size",
                                           "--tensor-model-parallel-size",
                                           "--pipeline-model-parallel-size",
                                           "--num-layers-per-virtual-pipeline-stage"};

Argv base_args() {
  return {"--num-layers",
          "2",
          "--hidden-size",
          "64",
          "--num-attention-heads",
          "4",
          "--seq-length",
          "32",
          "--micro-batch-size",
          "2",
          "--train-iters",
          "10",
          "--lr",
          "1e-4",
          "--dry-run",
          "--bf16",
          "--gpu",
          "h100-80gb"};
}

// What a flag needs beside the base job for its value to be read and checked.
const std::map<std::string, Argv> kContext = {
    {"--vocab-size", {"--tokenizer-type", "NullTokenizer"}},
    {"--profile-step-start", {"--profile"}},
    {"--profile-step-end", {"--profile"}},
    {"--profile-ranks", {"--profile"}},
    {"--recompute-num-layers", {"--recompute-granularity", "full", "--recompute-method", "uniform"}},
    {"--start-weight-decay", {"--weight-decay-incr-style", "linear", "--end-weight-decay", "0.1"}},
    {"--end-weight-decay", {"--weight-decay-incr-style", "linear", "--start-weight-decay", "0"}},
    {"--lr-wsd-decay-iters", {"--lr-decay-style", "WSD"}},
    {"--lr-wsd-decay-samples", {"--lr-decay-style", "WSD"}},
    {"--ckpt-step", {"--load", "/nonexistent"}},
    {"--rampup-batch-size", {"--global-batch-size", "8"}},
};
// Flags of sample-based training: the base job runs --train-samples 1000 instead of --train-iters.
const std::set<std::string> kSampleMode = {"--train-samples", "--lr-decay-samples", "--lr-warmup-samples",
                                           "--lr-wsd-decay-samples", "--rampup-batch-size"};

// The job that gives `flag` the value(s) `values`.
Argv job(const std::string& flag, const Argv& values) {
  Argv argv;
  for (const std::string& a : base_args()) argv.push_back(a);
  if (kSampleMode.count(flag)) {
    const auto it = std::find(argv.begin(), argv.end(), "--train-iters");
    *it = "--train-samples";
    *(it + 1) = "1000";
  }
  if (kContext.count(flag)) argv.insert(argv.end(), kContext.at(flag).begin(), kContext.at(flag).end());
  argv.push_back(flag);  // the last occurrence wins, as in argparse
  argv.insert(argv.end(), values.begin(), values.end());
  return argv;
}

struct Outcome {
  bool refused = false;
  std::string failure;  // why the run is a defect; "" when it is not
};

Outcome run(const Argv& argv, const std::string& flag) {
  const test::BoundedRun r = test::run_bounded(cli::run_train, argv);
  Outcome o;
  o.refused = r.exited && r.status == 1;
  if (const std::string defect = test::defect_of(r, flag); !defect.empty()) {
    std::string cmd = "megatron train";
    for (const std::string& a : argv) cmd += " " + a;
    o.failure = cmd + ": " + defect + "\n" + r.output;
  }
  return o;
}

TEST(TrainCommandValues, EveryFlagEndsInAcceptanceOrOneLineNamingIt) {
  cli::Args args("train");
  cli::declare_train_flags(args);
  cli::declare_device_flag(args);
  int64_t numeric = 0, runs = 0, refused = 0;
  std::set<std::string> seen;
  for (const cli::Args::Setting& s : args.settings()) {
    if (s.arity == 0) continue;
    // Is it numeric? A word is refused as "expected an integer" or "expected a number".
    const test::BoundedRun probe = test::run_bounded(cli::run_train, job(s.name, Argv(s.arity > 1 ? s.arity : 1, "x")));
    const bool is_int = probe.output.find("expected an integer") != std::string::npos;
    const bool is_number = is_int || probe.output.find("expected a number") != std::string::npos;
    // A flag the table refuses whatever its value (not supported yet, removed) has no reader to
    // reach: the probe's one line names it, and so would every hostile value's.
    if (probe.output.find("[" + s.name + "] is not supported yet (") != std::string::npos ||
        probe.output.find("[" + s.name + "] is not accepted: ") != std::string::npos) {
      ++refused;
      continue;
    }
    if (is_number) {
      ++numeric;
      seen.insert(s.name);
    }
    for (const std::string& v : kHostile) {
      // A list of n values takes the hostile one at each place in turn (the others valid).
      const int places = s.arity > 1 ? s.arity : 1;
      for (int place = 0; place < places; ++place) {
        Argv values(places, "2");
        if (s.name == "--rampup-batch-size") values = {"2", "2", "100"};
        values[place] = v;
        const Outcome o = run(job(s.name, values), s.name);
        ++runs;
        EXPECT_EQ(o.failure, "");
        if (!is_number) continue;
        const bool must_refuse = kNonFinite.count(v) || (is_int && kNotInt64.count(v)) ||
                                 (kPositive.count(s.name) && kNotPositive.count(v)) ||
                                 (kDimensions.count(s.name) && kHuge.count(v));
        if (must_refuse) EXPECT_TRUE(o.refused) << s.name << " " << v << " was accepted";
      }
    }
  }
  // The probe found the numeric flags (a sample of them named here, so that a broken probe fails).
  for (const std::string& flag : kPositive) EXPECT_TRUE(seen.count(flag)) << flag << " not probed as a number";
  for (const char* flag : {"--lr", "--min-lr", "--weight-decay", "--layernorm-epsilon", "--distributed-timeout-minutes",
                           "--adam-eps", "--clip-grad", "--seed", "--eval-iters"}) {
    EXPECT_TRUE(seen.count(flag)) << flag << " not probed as a number";
  }
  EXPECT_GT(numeric, 60);
  EXPECT_GT(refused, 300);  // the probe recognises the table's refusals
  std::cout << numeric << " numeric flags, " << refused << " refused outright, " << runs << " runs\n";
}

}  // namespace
}  // namespace megatron
