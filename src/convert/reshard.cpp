#include "convert/reshard.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/checkpoint_metadata.h"
#include "ckpt/safetensors.h"
#include "convert/convert_output.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/vocab_padding.h"

namespace megatron::convert {
namespace {

// Tensors with one row per padded-vocabulary id, in the model file and (with these
// prefixes) in the optimizer file (checkpoint.h).
constexpr const char* kVocabTensors[] = {"embedding.word_embeddings.weight", "output_layer.weight"};
constexpr const char* kStatePrefixes[] = {"", "main_param.", "exp_avg.", "exp_avg_sq."};

bool is_vocab_tensor(const std::string& name) {
  for (const char* prefix : kStatePrefixes) {
    for (const char* base : kVocabTensors) {
      if (name == std::string(prefix) + base) return true;
    }
  }
  return false;
}

// The caller metadata of a file we wrote: __metadata__ without the per-tensor keys that
// write_safetensors regenerates ("<tensor>.global_shape", "<tensor>.layout").
ckpt::StringMap caller_metadata(const ckpt::SafetensorsFile& f) {
  std::set<std::string> generated;
  for (const ckpt::SafetensorsTensor& t : f.tensors()) {
    generated.insert(t.name + ".global_shape");
    generated.insert(t.name + ".layout");
  }
  ckpt::StringMap out;
  for (const auto& [k, v] : f.metadata()) {
    if (!generated.count(k)) out[k] = v;
  }
  return out;
}

int64_t positive(std::optional<int64_t> v, int64_t fallback, const char* flag) {
  const int64_t x = v.value_or(fallback);
  if (x <= 0) throw_error("[", flag, "] must be positive, got ", x);
  return x;
}

}  // namespace

std::vector<uint8_t> repad_rows(const uint8_t* data, int64_t rows, int64_t row_bytes, int64_t new_rows) {
  MT_CHECK(rows >= 0 && new_rows >= 0 && row_bytes >= 0) << "repad_rows";
  std::vector<uint8_t> out(static_cast<size_t>(new_rows * row_bytes), 0);
  const int64_t keep = std::min(rows, new_rows) * row_bytes;
  if (keep > 0) std::memcpy(out.data(), data, static_cast<size_t>(keep));
  return out;
}

ReshardResult reshard_checkpoint(const std::string& load_dir, const std::string& save_dir,
                                 const ReshardOptions& options) {
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(load_dir, options.iteration);
  if (!ck.found) throw_error("[--load] no checkpoint in ", load_dir, " (", ck.tracker_path, " is missing)");
  const ckpt::CheckpointMetadata meta(ck.directory + "/" + ckpt::kMetadataFileName, ck.metadata_json);
  if (meta.top_string("format") != ckpt::kCheckpointFormat)
    throw_error(meta.path(), ": not a ", ckpt::kCheckpointFormat, " file");
  // What every reader checks (ckpt/checkpoint_contents.h): converting a checkpoint that
  // cannot be loaded would only move the error.
  ckpt::read_checkpoint_model(ck);
  ckpt::read_checkpoint_state(ck);
  ckpt::check_all_finite(ck);

  ReshardResult r;
  r.iteration = ck.iteration;
  r.release = ck.release;
  const int64_t heads = meta.arg_int("--num-attention-heads");
  const int64_t ffn = meta.arg_int("--ffn-hidden-size");
  const int64_t layers = meta.arg_int("--num-layers");
  r.vocab_size = meta.arg_int("vocab_size");
  r.old_padded_vocab_size = meta.arg_int("padded_vocab_size");
  r.old_tp = meta.arg_int("--tensor-model-parallel-size");
  r.old_pp = meta.arg_int("--pipeline-model-parallel-size");
  const int64_t old_divisible = meta.arg_int("--make-vocab-size-divisible-by");
  if (r.old_padded_vocab_size < r.vocab_size) {
    throw_error(meta.path(), ": args.padded_vocab_size ", r.old_padded_vocab_size, " is smaller than args.vocab_size ",
                r.vocab_size);
  }

  r.new_tp = positive(options.tensor_model_parallel_size, r.old_tp, "--target-tensor-parallel-size");
  r.new_pp = positive(options.pipeline_model_parallel_size, r.old_pp, "--target-pipeline-model-parallel-size");
  const int64_t divisible =
      positive(options.make_vocab_size_divisible_by, old_divisible, "--make-vocab-size-divisible-by");
  // The checks of `megatron train` (cli/train_args.cpp), against the checkpoint's model.
  if (heads % r.new_tp != 0) {
    throw_error("[--target-tensor-parallel-size] ", r.new_tp, " does not divide --num-attention-heads ", heads,
                " of the checkpoint in ", ck.directory);
  }
  if (ffn % r.new_tp != 0) {
    throw_error("[--target-tensor-parallel-size] ", r.new_tp, " does not divide --ffn-hidden-size ", ffn,
                " of the checkpoint in ", ck.directory);
  }
  if (layers % r.new_pp != 0) {
    throw_error("[--target-pipeline-model-parallel-size] ", r.new_pp, " does not divide --num-layers ", layers,
                " of the checkpoint in ", ck.directory);
  }
  r.new_padded_vocab_size = model::padded_vocab_size(r.vocab_size, divisible, r.new_tp);

  // Tensors: every file's, in file order; the vocabulary ones re-padded.
  std::deque<std::vector<uint8_t>> buffers;  // stable addresses for the re-padded bytes
  std::vector<ckpt::CheckpointFile> files;
  for (const auto& [file_name, file] : ck.tensor_files) {
    std::vector<ckpt::TensorToWrite> tensors;
    for (const ckpt::SafetensorsTensor& t : file.tensors()) {
      if (t.global_shape != t.shape) {
        throw_error(file.path(), ": tensor '", t.name, "' is a shard (shape ", ckpt::shape_to_string(t.shape),
                    ", global shape ", ckpt::shape_to_string(t.global_shape), "); only global tensors are converted");
      }
      ckpt::TensorToWrite w;
      w.name = t.name;
      w.dtype = t.dtype;
      w.shape = t.shape;
      w.data = t.data;
      if (!t.layout.empty()) w.layout = t.layout;
      if (is_vocab_tensor(t.name)) {
        if (t.shape.size() != 2 || t.shape[0] != r.old_padded_vocab_size) {
          throw_error(file.path(), ": tensor '", t.name, "' has shape ", ckpt::shape_to_string(t.shape), ", expected [",
                      r.old_padded_vocab_size, ", hidden] (args.padded_vocab_size)");
        }
        if (r.new_padded_vocab_size != r.old_padded_vocab_size) {
          const int64_t row_bytes = t.shape[1] * dtype_size(t.dtype);
          buffers.push_back(repad_rows(t.data, t.shape[0], row_bytes, r.new_padded_vocab_size));
          w.shape[0] = r.new_padded_vocab_size;
          w.data = buffers.back().data();
          r.repadded.push_back(t.name);
        }
      }
      tensors.push_back(std::move(w));
    }
    files.push_back(ckpt::CheckpointFile::safetensors(file_name, std::move(tensors), caller_metadata(file)));
  }

  const std::map<std::string, std::string> args = {{"--tensor-model-parallel-size", std::to_string(r.new_tp)},
                                                   {"--pipeline-model-parallel-size", std::to_string(r.new_pp)},
                                                   {"--make-vocab-size-divisible-by", std::to_string(divisible)},
                                                   {"padded_vocab_size", std::to_string(r.new_padded_vocab_size)}};
  const std::map<std::string, std::string> layout = {{"tensor_model_parallel_size", std::to_string(r.new_tp)},
                                                     {"pipeline_model_parallel_size", std::to_string(r.new_pp)}};
  files.push_back(ckpt::CheckpointFile::text_file(ckpt::kMetadataFileName, meta.rewritten(args, layout)));
  write_new_checkpoint(save_dir, "--save", ck.iteration, ck.release, files);
  return r;
}

}  // namespace megatron::convert
