// What the Hugging Face converters share (convert/hf_gpt2.h, convert/hf_llama.h): reading a
// model directory's config.json with one-line errors naming the file and the field, its weights
// (one model.safetensors, or the shards model.safetensors.index.json names), writing weights
// sharded as transformers' save_pretrained does, and copying tokenizer files.
//
// Sharding, as huggingface_hub's split_torch_state_dict_into_shards (what save_pretrained calls):
// tensors in order; one that is larger than the limit gets a shard of its own; otherwise a new
// shard starts when the next tensor would take the current one past the limit. One shard is
// written as model.safetensors; more as model-00001-of-0000N.safetensors plus
// model.safetensors.index.json {"metadata": {"total_size": bytes}, "weight_map": {name: file}}
// (keys sorted, indent 2, as save_pretrained writes it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "core/dtype.h"

namespace megatron::convert {

inline constexpr const char* kHfConfigName = "config.json";
inline constexpr const char* kHfWeightsName = "model.safetensors";
inline constexpr const char* kHfIndexName = "model.safetensors.index.json";
// save_pretrained's default max_shard_size "5GB" (decimal, as transformers reads it).
inline constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

// The shortest decimal that reads back as the same float (config.json values such as
// layer_norm_epsilon 1e-05, not the double expansion of the float 9.99999974738e-06); integral
// values as Python writes floats (500000.0, 1.0).
std::string float_json(double v);

// transformers' torch_dtype name of a model dtype: float32, bfloat16, float16.
const char* hf_torch_dtype(DType dt);

// A small file of a model directory (config.json, an index, a tokenizer file); mapped, so a
// FIFO in its place is refused rather than waited on. Errors "[flag] <path>: ...".
std::string read_hf_file(const std::string& path, const std::string& flag);

// transformers' convert_file_size_to_int: "5GB" = 5e9 bytes, "5GiB" = 5 * 2^30, also KB/MB/TB,
// KiB/MiB/TiB, and a plain count of bytes. Error "[flag] ..." for anything else or <= 0.
int64_t parse_shard_size(const std::string& text, const std::string& flag);

// A JSON object of config.json (or one nested in it, such as rope_scaling) with typed reads;
// errors are "<path>: <name> ..." where name is the dotted path of the member
// (rope_scaling.factor). Absent and null members are the same ("not given").
class HfJson {
 public:
  // Parses the file; Error "[flag] <path>: ..." when it cannot be read, "<path>: not a JSON object".
  static HfJson read_file(const std::string& path, const std::string& flag);

  const std::string& path() const;
  bool has(const std::string& key) const;  // present and not null
  std::vector<std::string> keys() const;   // in file order
  // A positive integer; required (Error "is missing") unless a fallback is given.
  int64_t positive_int(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const;
  // Any integer (token ids: 0 is one), nullopt when not given.
  std::optional<int64_t> optional_int(const std::string& key) const;
  // A number (an integer reads as one); required unless a fallback is given.
  double number(const std::string& key, std::optional<double> fallback = std::nullopt) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::optional<std::string> optional_string(const std::string& key) const;
  // The member as a nested object; nullopt when not given; Error when it is something else.
  std::optional<HfJson> object(const std::string& key) const;
  // The first string of a list of strings (architectures), nullopt when not given.
  std::optional<std::string> first_string(const std::string& key) const;
  // The member's JSON text, compact (for recording values such as eos_token_id, an integer or
  // a list of integers); nullopt when not given.
  std::optional<std::string> raw(const std::string& key) const;
  // "<path>: <name>" for messages about member `key`.
  std::string where(const std::string& key) const;

 private:
  struct Node;
  explicit HfJson(std::shared_ptr<const Node> node);
  std::shared_ptr<const Node> node_;
};

// The model_type of a model directory's config.json ("gpt2", "llama", ...; "" when absent).
std::string hf_model_type(const std::string& hf_dir);

// The weights of a model directory: model.safetensors, or the shard files that
// model.safetensors.index.json names. Every tensor of every shard must be where the index says
// and the index must list every tensor, each once. Errors name the file.
class HfWeights {
 public:
  HfWeights(const std::string& hf_dir, const std::string& flag);

  // What was read, for messages: DIR/model.safetensors or DIR/model.safetensors.index.json.
  const std::string& source() const { return source_; }
  // Every tensor by its name, with the file holding it.
  struct Entry {
    const ckpt::SafetensorsTensor* tensor = nullptr;
    const std::string* file = nullptr;  // the shard's path
  };
  const std::map<std::string, Entry>& tensors() const { return tensors_; }
  const Entry* find(const std::string& name) const;

 private:
  std::string source_;
  std::vector<std::unique_ptr<ckpt::SafetensorsFile>> files_;
  std::map<std::string, Entry> tensors_;
};

// The weight files of an HF directory for `tensors` (HF names and shapes), sharded at
// max_shard_bytes as the header says (safetensors metadata {"format": "pt"}).
std::vector<ckpt::CheckpointFile> hf_weight_files(const std::vector<ckpt::TensorToWrite>& tensors,
                                                  int64_t max_shard_bytes);

// A file to put beside the weights: copied from `source` (a regular file), or `content` when
// source is empty.
struct HfExtraFile {
  std::string name;  // a plain file name
  std::string source;
  std::string content;
};
// The files as CheckpointFiles (text files holding the bytes); Error "[flag] ..." naming a
// source that cannot be read.
std::vector<ckpt::CheckpointFile> hf_extra_files(const std::vector<HfExtraFile>& files, const std::string& flag);

}  // namespace megatron::convert
