// Weights & Biases by TensorBoard sync (cli/wandb_sync.h): the printed command against W&B's
// CLI (`wandb sync [OPTIONS] PATH`: --sync-tensorboard, -p/--project, -e/--entity, --id; WANDB_DIR
// for its local files), quoting, Megatron's defaults (<--save>/wandb), and a run that writes its
// events to <--save>/tensorboard and prints the command at start-up and at the end.
#include "cli/wandb_sync.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/train_args.h"
#include "core/error.h"
#include "support/paths.h"

namespace megatron::cli {
namespace {

std::optional<WandbSync> sync_of(std::vector<std::string> flags) {
  const std::vector<std::string> base = {
      "--num-layers", "1",    "--hidden-size",      "16",       "--num-attention-heads", "2",
      "--seq-length", "8",    "--micro-batch-size", "1",        "--train-iters",         "1",
      "--lr",         "1e-3", "--mock-data",        "--dry-run"};
  flags.insert(flags.begin(), base.begin(), base.end());
  Args args("train");
  declare_train_flags(args);
  EXPECT_TRUE(args.parse(flags));
  return wandb_sync_of(args, parse_train_config(args));
}

TEST(WandbSync, TheCommandNamesProjectEntityRunAndTheEventsDirectory) {
  const auto w = sync_of({"--wandb-project", "gpt3", "--wandb-exp-name", "run 7: lr/2", "--wandb-entity", "lab",
                          "--save", "/ck", "--tensorboard-dir", "/tb/x"});
  ASSERT_TRUE(w);
  EXPECT_EQ(wandb_sync_command(*w),
            "WANDB_DIR=/ck/wandb wandb sync --sync-tensorboard --project gpt3 --entity lab --id 'run 7- lr-2' /tb/x");
  const auto plain = sync_of({"--wandb-project", "it's", "--save", "/ck"});
  ASSERT_TRUE(plain);
  EXPECT_EQ(wandb_sync_command(*plain),
            "WANDB_DIR=/ck/wandb wandb sync --sync-tensorboard --project 'it'\\''s' /ck/tensorboard");
  const auto own = sync_of({"--wandb-project", "p", "--wandb-save-dir", "/w d", "--tensorboard-dir", "/tb"});
  ASSERT_TRUE(own);
  EXPECT_EQ(wandb_sync_command(*own), "WANDB_DIR='/w d' wandb sync --sync-tensorboard --project p /tb");
  EXPECT_FALSE(sync_of({"--wandb-exp-name", "x", "--save", "/ck"}));  // no project: no W&B, as Megatron
}

TEST(WandbSync, EventsNeedADirectory) {
  try {
    sync_of({"--wandb-project", "p"});
    FAIL() << "accepted --wandb-project without --save or --tensorboard-dir";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[--wandb-project] needs --tensorboard-dir or --save"), std::string::npos)
        << e.what();
  }
}

TEST(WandbSync, ARunWritesEventsWhereTheCommandSays) {
  const std::string dir = test::scratch_dir("wandb_sync_run");
  std::filesystem::remove_all(dir + "/ck");
  const test::CommandResult r = test::run_command(
      test::megatron_binary() +
          " train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 2 "
          "--global-batch-size 2 --train-iters 2 --lr 1e-3 --log-interval 1 --eval-iters 0 --mock-data "
          "--tokenizer-type NullTokenizer --vocab-size 64 --wandb-project proj --wandb-exp-name e1 --save " +
          dir + "/ck",
      true);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string command = "WANDB_DIR=" + dir + "/ck/wandb wandb sync --sync-tensorboard --project proj --id e1 " +
                              dir + "/ck/tensorboard\n";
  EXPECT_NE(r.output.find(" > W&B: no network from the trainer; TensorBoard events go to " + dir +
                          "/ck/tensorboard, uploaded (at any time, also while training) with\n   " + command),
            std::string::npos)
      << r.output;
  const size_t end = r.output.rfind(" > W&B: upload this run's TensorBoard events with\n   " + command);
  ASSERT_NE(end, std::string::npos) << r.output;
  EXPECT_GT(end, r.output.find(" iteration        2/       2 |")) << "printed again after training";
  int events = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/ck/tensorboard")) {
    events += e.path().filename().string().starts_with("events.out.tfevents.") && e.file_size() > 0;
  }
  EXPECT_EQ(events, 1);
}

}  // namespace
}  // namespace megatron::cli
