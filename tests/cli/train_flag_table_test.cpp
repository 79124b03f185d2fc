// Every option of current Megatron-LM's arguments.py (tests/cli/fixtures/megatron_flags.txt,
// regenerated with tools/megatron_flags.py) is declared by `megatron train`: supported, a
// no-op, or refused with a reason. A new Megatron option then fails here until it has a row.
#include "cli/train_flag_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/train_args.h"
#include "core/error.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

// {option: "switch" | "value" | "list"} of the fixture.
std::map<std::string, std::string> megatron_options() {
  std::ifstream in(test::source_dir() + "/tests/cli/fixtures/megatron_flags.txt");
  EXPECT_TRUE(in) << "tests/cli/fixtures/megatron_flags.txt";
  std::map<std::string, std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string name, kind;
    words >> name >> kind;
    out[name] = kind;
  }
  return out;
}

Args train_args() {
  Args a("megatron train");
  declare_train_flags(a);
  declare_device_flag(a);
  return a;
}

std::vector<std::string> names_of(const FlagRow& row) {
  std::vector<std::string> out;
  std::stringstream s(row.name);
  for (std::string n; std::getline(s, n, '|');) out.push_back(n);
  return out;
}

TEST(TrainFlagTable, FixtureIsCurrentMegatron) {
  const auto options = megatron_options();
  EXPECT_EQ(options.size(), 865u);
  EXPECT_EQ(options.at("--lr-warmup-iters"), "value");
  EXPECT_EQ(options.at("--use-distributed-optimizer"), "switch");
}

TEST(TrainFlagTable, EveryMegatronOptionIsDeclared) {
  const Args a = train_args();
  std::set<std::string> declared;
  for (const Args::Setting& s : a.settings()) declared.insert(s.name);
  std::vector<std::string> missing;
  for (const auto& [name, kind] : megatron_options()) {
    if (declared.count(name) == 0) missing.push_back(name);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " Megatron options are neither supported nor in the flag table, "
                               << "first: " << (missing.empty() ? "" : missing.front());
}

TEST(TrainFlagTable, TypesAgreeWithMegatron) {
  const auto options = megatron_options();

  for (const Args::Setting& s : train_args().settings()) {
    auto it = options.find(s.name);
    if (it == options.end()) continue;
    const std::string ours = s.arity == 0 ? "switch" : s.arity == 1 ? "value" : "list";
    EXPECT_EQ(ours, it->second) << s.name;
  }
}

TEST(TrainFlagTable, OriginsAreTrue) {
  const auto options = megatron_options();
  for (const Args::Setting& s : train_args().settings()) {
    const FlagOrigin origin = train_flag_origin(s.name);
    if (options.count(s.name) != 0) {
      EXPECT_EQ(origin, FlagOrigin::kMegatron) << s.name << " is current Megatron's: mark it so";
    } else {
      EXPECT_NE(origin, FlagOrigin::kMegatron)
          << s.name << " is not in current Megatron's arguments.py: mark it kOlderMegatron or kOurs";
    }
  }
}

TEST(TrainFlagTable, RowsAreWellFormed) {
  std::set<std::string> seen;
  for (const FlagRow& row : train_flag_rows()) {
    const std::string note = row.note;
    EXPECT_FALSE(note.empty()) << row.name;
    for (const std::string& n : names_of(row)) {
      EXPECT_TRUE(seen.insert(n).second) << n << " has two rows";
      EXPECT_EQ(n.rfind("--", 0), 0u) << n;
    }
    if (row.state == FlagState::kNoOp) EXPECT_EQ(note.rfind("no-op", 0), 0u) << row.name << ": " << note;
    if (row.state == FlagState::kUnsupported) EXPECT_NE(note.rfind("no-op", 0), 0u) << row.name;
    if (row.state == FlagState::kValues) EXPECT_NE(std::string(row.values), "") << row.name;
    if (row.type == FlagType::kSwitch) EXPECT_NE(row.state, FlagState::kValues) << row.name;
  }
}

std::string errors_of(const std::vector<std::string>& extra, std::ostream* log = nullptr) {
  std::vector<std::string> argv = {"--num-layers", "2",    "--hidden-size",      "64", "--num-attention-heads", "4",
                                   "--seq-length", "32",   "--micro-batch-size", "1",  "--train-iters",         "2",
                                   "--lr",         "1e-4", "--dry-run"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Args a = train_args();
  try {
    a.parse(argv);
    parse_train_config(a, 1, log);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainFlagTable, RefusalsNameTheFamily) {
  EXPECT_EQ(errors_of({"--num-experts", "8"}), "[--num-experts] is not supported yet (mixture of experts)");
  EXPECT_EQ(errors_of({"--moe-router-topk", "2"}),
            "[--moe-router-topk] is not supported yet (mixture of experts (MoE))");
  EXPECT_EQ(errors_of({"--fp8-output-proj"}).find("[--fp8-output-proj] is not supported yet (FP8 here: "), 0u);
  EXPECT_EQ(errors_of({"--multi-latent-attention"}),
            "[--multi-latent-attention] is not supported yet (multi-latent attention (MLA))");
  EXPECT_EQ(errors_of({"--use-megatron-fsdp"}).find("[--use-megatron-fsdp] is not supported yet (FSDP"), 0u);
  EXPECT_EQ(errors_of({"--muon-momentum", "0.9"}).find("[--muon-momentum] is not supported yet (Muon"), 0u);
  EXPECT_EQ(errors_of({"--batch-size", "4"}),
            "[--batch-size] is not accepted: Megatron no longer accepts it; use --micro-batch-size");
  // Both names of one row are checked.
  EXPECT_EQ(errors_of({"--disable-pad-vocab-size"}).find("[--disable-pad-vocab-size] is not supported yet"), 0u);
  EXPECT_EQ(errors_of({"--no-pad-vocab-size"}).find("[--no-pad-vocab-size] is not supported yet"), 0u);
  // A value Megatron accepts that only differs from ours by default.
  EXPECT_EQ(errors_of({"--main-grads-dtype", "fp32"}), "");
  EXPECT_EQ(errors_of({"--main-grads-dtype", "bf16"}).find("[--main-grads-dtype] bf16 is not supported yet ("), 0u);
}

TEST(TrainFlagTable, NoOpsPrintOneNoteEach) {
  std::ostringstream log;
  EXPECT_EQ(errors_of({"--use-flash-attn", "--cuda-graph-warmup-steps", "3", "--attention-backend", "flash",
                       "--normalization", "RMSNorm"},
                      &log),
            "");
  const std::string text = log.str();
  EXPECT_NE(text.find("note: --use-flash-attn has no effect here (the backend picks its fused attention kernel)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("note: --cuda-graph-warmup-steps has no effect here (CUDA graphs are recorded"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("note: --attention-backend has no effect here ("), std::string::npos) << text;
  EXPECT_EQ(text.find("--normalization"), std::string::npos) << "a value that takes effect is no no-op: " << text;
}

TEST(TrainFlagTable, EveryProblemAtOnce) {
  // The table's refusals, then each family's first error, one line each.
  EXPECT_EQ(errors_of({"--moe-router-topk", "2", "--qk-clip", "--lr-decay-style", "square", "--fp16", "--bf16"}),
            "[--moe-router-topk] is not supported yet (mixture of experts (MoE))\n"
            "[--qk-clip] is not supported yet (Muon and other optimizers: only Adam(W))\n"
            "[--lr-decay-style] invalid choice 'square' (choose from constant, linear, cosine, inverse-square-root, "
            "WSD)\n"
            "[--fp16/--bf16] give at most one of them");
}

TEST(TrainFlagTable, MegatronsSpellingsOfSupportedFlags) {
  Args a = train_args();
  ASSERT_TRUE(a.parse({"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
                       "--micro-batch-size", "1", "--train-iters", "2", "--lr", "1e-4", "--dry-run",
                       "--override-opt-param-scheduler", "--disable-log-loss-scale-to-tensorboard",
                       "--no-overlap-p2p-communication"}));
  const train::TrainConfig c = parse_train_config(a);
  EXPECT_TRUE(c.override_opt_param_scheduler);
  EXPECT_FALSE(c.log_loss_scale_to_tensorboard);
  EXPECT_FALSE(c.overlap_p2p_communication);
  EXPECT_EQ(errors_of({"--use-checkpoint-opt-param-scheduler", "--override-opt_param-scheduler"})
                .find("[--override-opt_param-scheduler/--use-checkpoint-opt_param-scheduler] both"),
            0u);
}

}  // namespace
}  // namespace megatron::cli
