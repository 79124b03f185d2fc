#include "support/parity_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>

#include "comm/mpirun.h"

namespace megatron::test {

std::vector<std::string> tiny_train_flags(const std::string& dir, int layers, const std::string& dropout) {
  return {megatron_binary(),
          "train",
          "--num-layers",
          std::to_string(layers),
          "--hidden-size",
          "32",
          "--num-attention-heads",
          "4",
          "--seq-length",
          "16",
          "--micro-batch-size",
          "2",
          "--global-batch-size",
          "8",
          "--train-iters",
          "10",
          "--lr",
          "0.003",
          "--lr-decay-style",
          "cosine",
          "--lr-warmup-iters",
          "2",
          "--log-interval",
          "1",
          "--eval-interval",
          "1000",
          "--eval-iters",
          "1",
          "--seed",
          "5",
          "--data-path",
          dir + "/walk_text_document",
          "--split",
          "90,10,0",
          "--data-cache-path",
          dir + "/cache",
          "--vocab-file",
          gpt2_vocab_file(),
          "--merge-file",
          gpt2_merge_file(),
          "--device",
          "cpu",
          "--attention-dropout",
          dropout,
          "--hidden-dropout",
          dropout};
}

std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> more) {
  a.insert(a.end(), more);
  return a;
}

std::map<int64_t, Logged> read_jsonl(const std::string& path) {
  std::map<int64_t, Logged> out;
  std::ifstream in(path);
  std::string line;
  static const std::regex it(R"("iteration": (\d+), "consumed_samples")"), loss(R"("lm_loss": ([-0-9.eE+]+))"),
      norm(R"("grad_norm": ([-0-9.eE+]+))");
  while (std::getline(in, line)) {
    std::smatch a, b, c;
    if (!std::regex_search(line, a, it) || !std::regex_search(line, b, loss) || !std::regex_search(line, c, norm))
      continue;
    out[std::stoll(a[1])] = Logged{std::stod(b[1]), std::stod(c[1])};
  }
  return out;
}

CommandResult run_ranks(const std::vector<std::string>& argv, int np) {
  const std::string cmd = np == 1 ? comm::shell_join(argv) : comm::shell_join(comm::local_mpirun_command(np, argv));
  return run_command(cmd, /*capture_stderr=*/true);
}

void expect_same(const std::map<int64_t, Logged>& ref, const std::map<int64_t, Logged>& got, int64_t from,
                 const std::string& what) {
  double worst_loss = 0, worst_norm = 0;
  for (int64_t i = from; i <= 10; ++i) {
    ASSERT_TRUE(ref.count(i) && got.count(i)) << what << ": iteration " << i << " missing";
    const Logged &a = ref.at(i), &b = got.at(i);
    EXPECT_NEAR(b.loss, a.loss, 2e-6 * std::abs(a.loss)) << what << " iteration " << i;
    EXPECT_NEAR(b.grad_norm, a.grad_norm, 1e-5 * std::abs(a.grad_norm)) << what << " iteration " << i;
    worst_loss = std::max(worst_loss, std::abs(b.loss - a.loss) / std::abs(a.loss));
    worst_norm = std::max(worst_norm, std::abs(b.grad_norm - a.grad_norm) / std::abs(a.grad_norm));
  }
  std::printf("%s: max relative difference loss %.2e, grad norm %.2e\n", what.c_str(), worst_loss, worst_norm);
}

}  // namespace megatron::test
