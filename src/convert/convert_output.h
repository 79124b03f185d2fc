// Where `megatron convert` writes: always a new directory, created atomically, so that a
// conversion killed at any instant leaves either nothing or a complete result, and the
// input (--load / --load-hf) is never touched.
//
//   1. `dir` must not exist, or be an empty directory (anything else: Error naming `flag`);
//   2. everything is written into the sibling "<parent>/.<name>.convert_tmp.<pid>", every file
//      and directory fsynced;
//   3. the temporary directory is renamed to `dir` (rename(2) replaces an empty directory)
//      and the parent is fsynced.
// On any error the temporary directory is removed and `dir` is left as it was.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_io.h"

namespace megatron::convert {

// Runs fill(tmp) to populate the temporary directory (which exists and is empty), then
// installs it as `dir` (steps above). `flag` names the option in errors ("--save").
void write_new_directory(const std::string& dir, const std::string& flag,
                         const std::function<void(const std::string& tmp)>& fill);

// A new checkpoint directory (checkpoint_io.h layout) holding one checkpoint: iter_%07d with
// the tracker "N" for iteration > 0, or release/ with the tracker "release".
void write_new_checkpoint(const std::string& dir, const std::string& flag, int64_t iteration, bool release,
                          const std::vector<ckpt::CheckpointFile>& files);

}  // namespace megatron::convert
