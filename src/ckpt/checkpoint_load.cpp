// The load half of ckpt/checkpoint.h: every rank reads its own shards of a checkpoint's global
// tensors (Megatron's fully parallel load), after the metadata's args are compared with this
// run's.
#include <simdjson.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "tensor_parallel/partition.h"

namespace megatron::ckpt {

namespace {

// Args that must not change across a resume (they change what the weights mean or how
// samples are cut), with the flag to name in the error.
constexpr const char* kFixedArgs[] = {"--num-layers",
                                      "--hidden-size",
                                      "--num-attention-heads",
                                      "--kv-channels",
                                      "--ffn-hidden-size",
                                      "--max-position-embeddings",
                                      "--seq-length",
                                      "padded_vocab_size",
                                      "--untie-embeddings-and-output-weights",
                                      "--disable-bias-linear",
                                      "--normalization",
                                      "--swiglu",
                                      "--position-embedding-type",
                                      "--num-query-groups",
                                      "--rotary-base",
                                      "--rotary-percent",
                                      "--rotary-seq-len-interpolation-factor",
                                      "--use-rope-scaling",
                                      "--rope-scaling-factor",
                                      "--apply-layernorm-1p",
                                      "--qk-layernorm"};
// What a checkpoint written before an arg was recorded was trained with (JSON text).
const char* absent_arg_value(const std::string& key) {
  if (key == "--normalization") return "\"LayerNorm\"";
  if (key == "--swiglu") return "false";
  if (key == "--position-embedding-type") return "\"learned_absolute\"";
  if (key == "--num-query-groups") return "0";
  if (key == "--rotary-base") return "10000.0";
  if (key == "--rotary-percent") return "1.0";
  if (key == "--rotary-seq-len-interpolation-factor") return "0.0";
  if (key == "--use-rope-scaling") return "false";
  if (key == "--rope-scaling-factor") return "8.0";
  if (key == "--apply-layernorm-1p") return "false";
  if (key == "--qk-layernorm") return "false";
  return nullptr;
}

// Elements [begin, begin + n) of this rank's shard of parameter p's global tensor `name` (its
// TP-local flat elements), as a host tensor [n] in the file's dtype: only those bytes are read
// from the map, so that ranks loading a large checkpoint read their own parts of it, not every
// global tensor (Megatron's fully parallel load, which is the default here).
Tensor read_shard(const SafetensorsFile& file, const std::string& name, const model::Parameter& p, int64_t begin,
                  int64_t n) {
  const SafetensorsTensor& t = file.at(name);
  if (t.shape != p.global_shape) {
    throw_error(file.path(), ": tensor '", name, "' has shape ", shape_string(t.shape), ", this model expects ",
                shape_string(p.global_shape));
  }
  if (!is_float(t.dtype)) throw_error(file.path(), ": tensor '", name, "' is not a float tensor");
  Tensor out = Tensor::cpu({n}, t.dtype);
  const int64_t e = dtype_size(t.dtype);
  auto* dst = static_cast<char*>(out.data());
  tensor_parallel::for_each_global_run(
      p.global_shape, p.partition, begin, n, [&](int64_t global_start, int64_t local_start, int64_t len) {
        std::memcpy(dst + (local_start - begin) * e, t.data + global_start * e, static_cast<size_t>(len * e));
      });
  if (const int64_t bad = first_non_finite(out.data(), t.dtype, n); bad >= 0) {
    throw_error(file.path(), ": tensor '", name, "' holds NaN or Inf (element ", bad, " of this rank's share)");
  }
  return out;
}

// This rank's shard of parameter p's tensor `name` into `dst` (p's shape, any float dtype:
// converted with RNE).
void load_into(const SafetensorsFile& file, const std::string& name, const model::Parameter& p, Tensor& dst,
               backend::Backend& backend) {
  backend.copy(read_shard(file, name, p, 0, p.numel()).view(p.shape), dst);
}

// The optimizer state of `kind` this rank holds for p (its owned ranges under the distributed
// optimizer) from the file's tensor `name` (a 16-bit one widened exactly by the copy).
void load_state(const SafetensorsFile& file, const std::string& name, const model::Parameter& p,
                parallel::StateKind kind, parallel::MixedPrecisionOptimizer& optimizer, backend::Backend& backend) {
  for (parallel::MixedPrecisionOptimizer::HeldState& h : optimizer.held_param_state(p, kind)) {
    backend.copy(read_shard(file, name, p, h.begin, h.values.numel()), h.values);
  }
}

std::string element_text(simdjson::dom::element e) { return std::string(simdjson::minify(e)); }

}  // namespace

namespace {

// One rank's part of load_training_checkpoint; *loaded := the iteration of the checkpoint it
// read (0 for release), -1 when there was none.
TrainProgress load_own_part(const CheckpointRun& run, const LoadOptions& o, model::ParameterSet& params,
                            parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
                            optim::OptimizerParamScheduler& scheduler, backend::Backend& backend, std::ostream& log,
                            int64_t* loaded) {
  const LoadedCheckpoint ck = load_checkpoint_dir(o.dir, o.step);
  *loaded = ck.found ? ck.iteration : -1;
  if (!ck.found) {
    if (o.exit_on_missing) {
      throw_error("[--load] no checkpoint in ", o.dir, " (", ck.tracker_path,
                  " is missing) and --exit-on-missing-checkpoint is set");
    }
    log << "WARNING: could not find the metadata file " << ck.tracker_path << "\n"
        << "    will not load any checkpoints and will start from random\n";
    // Iteration directories beside a missing tracker are most likely a lost tracker, not an
    // empty directory: say which checkpoints are left unused.
    const std::vector<CheckpointSummary> present = list_checkpoints(o.dir);
    if (!present.empty()) {
      const CheckpointSummary& newest = present.back();
      log << "WARNING: " << present.size() << " checkpoint(s) in " << o.dir << " are ignored, the newest "
          << newest.path << (newest.release ? "" : str_cat("; give --ckpt-step ", newest.iteration, " to load it"))
          << "\n";
    }
    return {};
  }
  // Everything the checkpoint records is checked before any of it is used: the model's values
  // and tensors (the kFixedArgs comparison below then makes them this run's), the training state.
  read_checkpoint_model(ck);
  const CheckpointState state = read_checkpoint_state(ck);
  const std::string meta_path = ck.directory + "/" + kMetadataFileName;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(ck.metadata_json);
  simdjson::dom::element doc;
  if (parser.parse(padded).get(doc) != simdjson::SUCCESS) throw_error(meta_path, ": not valid JSON");
  auto need = [&](const char* key) {
    simdjson::dom::element e;
    if (doc[key].get(e) != simdjson::SUCCESS) throw_error(meta_path, ": missing \"", key, "\"");
    return e;
  };

  // Config differences: print them all; refuse the ones that break the weights or the run.
  const std::map<std::string, std::string>& now = run.args;
  simdjson::dom::object saved_args;
  if (need("args").get_object().get(saved_args) != simdjson::SUCCESS)
    throw_error(meta_path, ": \"args\" is not an object");
  std::map<std::string, std::string> saved;
  for (auto field : saved_args) saved[std::string(field.key)] = reformat_json(element_text(field.value), 0);
  bool printed_header = false;
  for (const auto& [k, v] : now) {
    const auto it = saved.find(k);
    const std::string old = it == saved.end() ? "(absent)" : it->second;
    const std::string cur = reformat_json(v, 0);
    if (old == cur) continue;
    if (!printed_header) {
      log << " > arguments that differ from the checkpoint (checkpoint -> now):\n";
      printed_header = true;
    }
    log << "    " << k << ": " << old << " -> " << cur << '\n';
  }
  // Refuse, in kFixedArgs order (the flag the user set comes before the values derived from it).
  for (const char* fixed : kFixedArgs) {
    const auto it = saved.find(fixed);
    const std::string cur = reformat_json(now.at(fixed), 0);
    const char* absent = absent_arg_value(fixed);
    if (it == saved.end() && absent == nullptr) continue;
    const std::string was = it != saved.end() ? it->second : absent;
    if (was == cur) continue;
    const std::string k = fixed;
    if (k[0] == '-') {
      throw_error("[", k, "] is ", cur, " but the checkpoint in ", ck.directory, " was trained with ", was,
                  "; a checkpoint cannot change it");
    }
    throw_error("[--vocab-file/--make-vocab-size-divisible-by] the padded vocabulary is ", cur,
                " but the checkpoint in ", ck.directory, " was trained with ", it->second,
                " (re-pad it for this run with megatron convert --target-tensor-parallel-size",
                " --make-vocab-size-divisible-by)");
  }

  // Weights.
  for (model::Parameter& p : params.params()) load_into(ck.model(), p.name, p, p.value, backend);
  load_fp8_state(ck, run.model, run.stages, fp8, backend, log);
  TrainProgress progress;
  if (o.finetune) {
    optimizer.reload_main_params_from_model();
    log << "  successfully loaded checkpoint (weights only, --finetune) from " << o.dir << " at iteration "
        << ck.iteration << '\n';
    return progress;
  }
  progress = state.progress;

  // Optimizer, scaler and scheduler.
  const SafetensorsFile* opt = ck.optimizer();
  if (!o.load_optim || !opt) {
    if (o.load_optim) log << "WARNING: the checkpoint has no optimizer state (saved with --no-save-optim)\n";
    optimizer.reload_main_params_from_model();
  } else {
    // Whole parameters from the files; the optimizer keeps the fragments this rank owns (all
    // of them unless the state is sharded by --use-distributed-optimizer), so a checkpoint
    // loads under any data-parallel size.
    for (const model::Parameter& p : params.params()) {
      if (optimizer.has_separate_main_params()) {
        if (opt->find("main_param." + p.name)) {
          load_state(*opt, "main_param." + p.name, p, parallel::StateKind::kMainParams, optimizer, backend);
        } else {  // saved from an fp32 model: its weights are the main parameters
          load_state(ck.model(), p.name, p, parallel::StateKind::kMainParams, optimizer, backend);
        }
      }
      load_state(*opt, "exp_avg." + p.name, p, parallel::StateKind::kExpAvg, optimizer, backend);
      load_state(*opt, "exp_avg_sq." + p.name, p, parallel::StateKind::kExpAvgSq, optimizer, backend);
    }
    optimizer.restore(state.optimizer_steps, state.grad_scaler);
    optim::SchedulerLoadPolicy policy = optim::SchedulerLoadPolicy::kCheck;
    if (o.override_scheduler) policy = optim::SchedulerLoadPolicy::kOverride;
    if (o.use_checkpoint_scheduler) policy = optim::SchedulerLoadPolicy::kUseCheckpoint;
    scheduler.load_state(state.scheduler, policy);
  }
  log << "  successfully loaded checkpoint from " << o.dir << " at iteration " << progress.iteration << '\n';
  return progress;
}

}  // namespace

TrainProgress load_training_checkpoint(const CheckpointRun& run, const LoadOptions& o, model::ParameterSet& params,
                                       parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
                                       optim::OptimizerParamScheduler& scheduler, comm::Communicator& world,
                                       backend::Backend& backend, std::ostream& log) {
  MT_CHECK(!o.dir.empty()) << "load without --load";
  std::optional<std::string> error;
  TrainProgress progress;
  int64_t loaded = -1;
  try {
    progress = load_own_part(run, o, params, optimizer, fp8, scheduler, backend, log, &loaded);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_failure(world, error, o.dir, "loading the checkpoint", "--load");
  // Ranks that read different directories (node-local disks under one path, a save landing
  // between two ranks' reads of the tracker) would train on from different states: the
  // checkpoint read (-1: none, which --finetune's iteration 0 would hide) and where it resumes.
  const double mine[4] = {static_cast<double>(loaded), static_cast<double>(progress.iteration),
                          static_cast<double>(progress.consumed_train_samples),
                          static_cast<double>(progress.consumed_valid_samples)};
  std::array<double, 8> range;  // max, -min of each
  for (size_t i = 0; i < 4; ++i) range[2 * i] = mine[i], range[2 * i + 1] = -mine[i];
  world.all_reduce_host(range, comm::ReduceOp::kMax);
  for (size_t i = 0; i < 4; ++i) {
    if (range[2 * i] == -range[2 * i + 1]) continue;
    const auto name = [](double it) { return it < 0 ? std::string("none") : std::to_string(static_cast<int64_t>(it)); };
    throw_error("[--load] ", o.dir, ": the ranks loaded different checkpoints (iterations ", name(-range[1]), " to ",
                name(range[0]), "; this rank ", name(mine[0]), "): every rank must see the same directory");
  }
  return progress;
}

void load_checkpoint_weights(const LoadedCheckpoint& ck, model::ParameterSet& params, backend::Backend& backend) {
  for (model::Parameter& p : params.params()) load_into(ck.model(), p.name, p, p.value, backend);
}

}  // namespace megatron::ckpt
