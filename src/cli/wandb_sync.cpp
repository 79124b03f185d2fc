#include "cli/wandb_sync.h"

#include <vector>

#include "core/error.h"

namespace megatron::cli {
namespace {

// `word` as sh reads it back: as it is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& word) {
  const bool safe = !word.empty() && word.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./=+,@") == std::string::npos;
  if (safe) return word;
  std::string out = "'";
  for (char ch : word) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace

std::optional<WandbSync> wandb_sync_of(const Args& a, const train::TrainConfig& c) {
  if (!a.given("--wandb-project") || a.get_string("--wandb-project").empty()) return std::nullopt;
  MT_CHECK(c.tensorboard_dir.has_value()) << "parse_train_config sets --tensorboard-dir with --wandb-project";
  WandbSync w;
  w.project = a.get_string("--wandb-project");
  if (a.given("--wandb-entity") && !a.get_string("--wandb-entity").empty()) w.entity = a.get_string("--wandb-entity");
  if (a.given("--wandb-exp-name")) {
    std::string id = a.get_string("--wandb-exp-name");
    for (char& ch : id) {
      if (ch == '/' || ch == '\\' || ch == '#' || ch == '?' || ch == '%' || ch == ':') ch = '-';
    }
    w.run = id;
  }
  if (a.given("--wandb-save-dir") && !a.get_string("--wandb-save-dir").empty()) {
    w.save_dir = a.get_string("--wandb-save-dir");
  } else if (c.save) {
    w.save_dir = *c.save + "/wandb";
  }
  w.events_dir = *c.tensorboard_dir;
  return w;
}

std::string wandb_sync_command(const WandbSync& w) {
  std::vector<std::string> words = {"wandb", "sync", "--sync-tensorboard", "--project", w.project};
  if (w.entity) words.insert(words.end(), {"--entity", *w.entity});
  if (w.run) words.insert(words.end(), {"--id", *w.run});
  words.push_back(w.events_dir);
  std::string command = w.save_dir ? "WANDB_DIR=" + shell_word(*w.save_dir) : "";
  for (const std::string& word : words) command += (command.empty() ? "" : " ") + shell_word(word);
  return command;
}

std::string wandb_sync_note(const WandbSync& w, bool at_end) {
  if (at_end) return str_cat(" > W&B: upload this run's TensorBoard events with\n   ", wandb_sync_command(w), "\n");
  return str_cat(" > W&B: no network from the trainer; TensorBoard events go to ", w.events_dir,
                 ", uploaded (at any time, also while training) with\n   ", wandb_sync_command(w), "\n");
}

}  // namespace megatron::cli
