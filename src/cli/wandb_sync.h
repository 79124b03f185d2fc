// Weights & Biases without a W&B client: Megatron's --wandb-project, --wandb-exp-name,
// --wandb-save-dir and --wandb-entity (megatron/training/global_vars.py, _set_wandb_writer) are
// read, the run writes its TensorBoard events (--tensorboard-dir, else <--save>/tensorboard, as
// parse_train_config sets), and the command that uploads them with W&B's TensorBoard sync is
// printed at start-up and at the end:
//   WANDB_DIR=<save dir> wandb sync --sync-tensorboard --project P [--entity E] [--id NAME] <events dir>
// The trainer opens no network connection.
#pragma once

#include <optional>
#include <string>

#include "cli/args.h"
#include "train/config.h"

namespace megatron::cli {

struct WandbSync {
  std::string project;
  std::optional<std::string> entity;
  std::optional<std::string> run;       // --wandb-exp-name, as the run's id (W&B forbids / \ # ? % : in it)
  std::optional<std::string> save_dir;  // W&B's local files: --wandb-save-dir, else <--save>/wandb
  std::string events_dir;               // the TensorBoard events
};

// The flags' WandbSync, or none without a (non-empty) --wandb-project. `config` is the parsed one
// (its tensorboard_dir set).
std::optional<WandbSync> wandb_sync_of(const Args& args, const train::TrainConfig& config);
// The shell command that uploads the events, its words quoted for sh where needed.
std::string wandb_sync_command(const WandbSync& w);
// " > W&B: ..." lines: where the events go and the upload command.
std::string wandb_sync_note(const WandbSync& w, bool at_end);

}  // namespace megatron::cli
