// The flags a checkpoint records under metadata.json's "args" (ckpt/checkpoint.h): the model's
// shape, which a load refuses to change, and the training flags it prints the differences of.
#pragma once

#include <map>
#include <string>

#include "train/config.h"

namespace megatron::train {

// Flag name -> JSON value text. Keys without a leading "--" are derived values
// (padded_vocab_size, precision, gelu).
std::map<std::string, std::string> checkpoint_args(const TrainConfig& config);

}  // namespace megatron::train
