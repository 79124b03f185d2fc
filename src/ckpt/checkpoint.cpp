#include "ckpt/checkpoint.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include "ckpt/checkpoint_io.h"
#include "core/error.h"
#include "core/file.h"
#include "core/json_writer.h"
#include "model/gpt_model.h"
#include "tensor_parallel/partition.h"

namespace megatron::ckpt {

namespace {

constexpr const char* kFormat = kCheckpointFormat;
#ifndef MT_VERSION
#define MT_VERSION "dev"
#endif

// metadata.json's "model_dtype": the precision flag.
const char* dtype_flag(DType d) { return d == DType::kBF16 ? "bf16" : d == DType::kF16 ? "fp16" : "fp32"; }

// Host view of a device tensor: the tensor itself on the CPU, else a staged copy.
Tensor host_view(const Tensor& t, backend::Backend& backend) {
  if (t.device() == Device::kCPU) return t;
  Tensor h = Tensor::cpu(t.shape(), t.dtype());
  backend.copy(t, h);
  return h;
}

}  // namespace

namespace {

// One tensor of a checkpoint file: which pipeline stage holds it, which of that stage's
// parameters and which part of its state.
enum class Part { kValue, kMain, kExpAvg, kExpAvgSq };
// The optimizer state a part other than kValue is.
parallel::StateKind state_kind(Part part) {
  return part == Part::kMain     ? parallel::StateKind::kMainParams
         : part == Part::kExpAvg ? parallel::StateKind::kExpAvg
                                 : parallel::StateKind::kExpAvgSq;
}
struct SavedTensor {
  std::string name;  // in the file
  int64_t stage = 0;
  std::string param;
  Part part = Part::kValue;
  DType dtype = DType::kF32;
  Shape global;
};

// The tensors of model.safetensors and of optimizer.safetensors, all stages, in file order: the
// list every rank walks. The last stage's copy of a tied word embedding is left out (the first
// stage saves it).
std::array<std::vector<SavedTensor>, 2> saved_tensors(const CheckpointRun& run, bool save_optim, bool separate_main) {
  std::array<std::vector<SavedTensor>, 2> files;
  const DType dtype = run.dtype;
  for (int64_t stage = 0; stage < run.pipeline_model_parallel_size(); ++stage) {
    model::ParameterSet declared;
    model::GPTModel::declare_stage_parameters(run.model, run.stages[static_cast<size_t>(stage)], &declared);
    for (const model::Parameter& p : declared.params()) {
      if (p.pipeline_shared) continue;
      files[0].push_back({p.name, stage, p.name, Part::kValue, dtype, p.global_shape});
      if (!save_optim) continue;
      if (separate_main)
        files[1].push_back({"main_param." + p.name, stage, p.name, Part::kMain, DType::kF32, p.global_shape});
      files[1].push_back({"exp_avg." + p.name, stage, p.name, Part::kExpAvg, DType::kF32, p.global_shape});
      files[1].push_back({"exp_avg_sq." + p.name, stage, p.name, Part::kExpAvgSq, DType::kF32, p.global_shape});
    }
  }
  return files;
}

// The walk over one tensor on a rank of the stage that holds it: the parameter's part (the
// optimizer's, gathered over DP when sharded: collective over DP), then on DP rank 0 its
// global tensor (collective over TP; a view of the rank's own tensor at TP 1). Undefined on
// the other DP ranks.
Tensor global_tensor(const SavedTensor& t, const model::ParameterSet& params,
                     const parallel::MixedPrecisionOptimizer& optimizer, const parallel::ProcessGroups& groups,
                     backend::Backend& backend) {
  const model::Parameter* p = params.find(t.param);
  MT_CHECK(p != nullptr) << "stage " << t.stage << " has no parameter " << t.param;
  const Tensor piece = t.part != Part::kValue      ? optimizer.gather_param_state(*p, state_kind(t.part))
                       : groups.dp_cp->rank() == 0 ? p->value
                                                   : Tensor();
  if (groups.dp_cp->rank() != 0) return Tensor();
  MT_CHECK(piece.defined()) << t.name << ": data-parallel rank 0 holds no state";
  if (groups.tp->size() == 1) return piece;
  return tensor_parallel::gather_partitioned(*groups.tp, backend, piece, p->global_shape, p->partition);
}

}  // namespace

CheckpointSaveMemory checkpoint_save_memory(const CheckpointRun& run, bool save_optim) {
  CheckpointSaveMemory out;
  int64_t largest = 0;  // the word embedding, fp32 when the optimizer state is saved
  std::vector<int64_t> stage_bytes(static_cast<size_t>(run.pipeline_model_parallel_size()), 0);
  for (const auto& file : saved_tensors(run, save_optim, run.dtype != DType::kF32)) {
    for (const SavedTensor& t : file) {
      const int64_t bytes = shape_numel(t.global) * dtype_size(t.dtype);
      out.checkpoint_bytes += bytes;
      stage_bytes[static_cast<size_t>(t.stage)] += bytes;
      largest = std::max(largest, bytes);
    }
  }
  out.host_bytes = 2 * largest;
  out.device_bytes = largest;
  const int64_t ranks_per_stage = run.tensor_model_parallel_size * run.data_parallel_size;
  for (int64_t b : stage_bytes)
    out.rank_share_bytes = std::max(out.rank_share_bytes, (b + ranks_per_stage - 1) / ranks_per_stage);
  return out;
}

namespace {

// metadata.json of a save (ckpt/checkpoint.h lists its keys).
std::string metadata_json(const CheckpointRun& run, bool save_optim, const TrainProgress& progress,
                          const parallel::MixedPrecisionOptimizer& optimizer,
                          const optim::OptimizerParamScheduler& scheduler) {
  JsonWriter w(2);
  w.begin_object();
  w.key("format").value(kFormat);
  w.key("program_version").value(MT_VERSION);
  w.key("iteration").value(progress.iteration);
  w.key("consumed_train_samples").value(progress.consumed_train_samples);
  w.key("consumed_valid_samples").value(progress.consumed_valid_samples);
  w.key("optimizer_saved").value(save_optim);
  w.key("optimizer_steps").value(optimizer.steps());
  const optim::SchedulerState s = scheduler.state();
  w.key("scheduler").begin_object();
  w.key("max_lr").value(s.max_lr);
  w.key("min_lr").value(s.min_lr);
  // Only with --decoupled-lr (older checkpoints lack the keys).
  if (s.decoupled_max_lr) w.key("decoupled_max_lr").value(*s.decoupled_max_lr);
  if (s.decoupled_min_lr) w.key("decoupled_min_lr").value(*s.decoupled_min_lr);
  w.key("lr_warmup_steps").value(s.warmup_steps);
  w.key("lr_decay_steps").value(s.decay_steps);
  w.key("lr_decay_style").value(std::string(optim::to_string(s.decay_style)));
  w.key("num_steps").value(s.num_steps);
  w.key("start_wd").value(s.start_wd);
  w.key("end_wd").value(s.end_wd);
  w.key("wd_incr_steps").value(s.wd_incr_steps);
  w.key("wd_incr_style").value(std::string(optim::to_string(s.wd_incr_style)));
  w.end_object();
  const optim::GradScalerState& g = optimizer.scaler().state();
  w.key("grad_scaler").begin_object();
  w.key("dynamic").value(optimizer.scaler().is_dynamic());
  w.key("scale").value(static_cast<double>(g.scale));
  w.key("growth_tracker").value(g.growth_tracker);
  w.key("hysteresis_tracker").value(g.hysteresis_tracker);
  w.end_object();
  // Dropout masks are Philox(seed, iteration, micro-batch, layer, site): no RNG state to keep.
  w.key("rng").begin_object();
  w.key("kind").value("philox4x32-10, stateless: (seed, iteration, micro-batch)");
  w.key("seed").value(run.seed);
  w.end_object();
  w.key("layout").begin_object();
  w.key("tensor_model_parallel_size").value(run.tensor_model_parallel_size);
  w.key("pipeline_model_parallel_size").value(run.pipeline_model_parallel_size());
  w.key("data_parallel_size").value(run.data_parallel_size);
  w.key("model_dtype").value(dtype_flag(run.dtype));
  w.end_object();
  w.key("args").begin_object();
  for (const auto& [k, v] : run.args) w.key(k).raw_value(v);
  w.end_object();
  w.end_object();
  return w.take();
}

// Megatron's "saving checkpoint at iteration       5 to DIR" (the iteration as '{:7d}').
std::string iteration_text(int64_t iteration) {
  char line[32];
  std::snprintf(line, sizeof(line), "%7lld", static_cast<long long>(iteration));
  return line;
}

// Rank 0 writes every tensor; the stage holding one gathers it and sends it (ckpt/checkpoint.h).
void save_streamed(const CheckpointRun& run, const SaveOptions& o, const TrainProgress& progress,
                   const std::array<std::vector<SavedTensor>, 2>& files, const model::ParameterSet& params,
                   const parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
                   const optim::OptimizerParamScheduler& scheduler, const parallel::ProcessGroups& groups,
                   backend::Backend& backend) {
  const int64_t stage = groups.coords.pp;
  std::optional<Fp8StateFile> fp8_file = gather_fp8_state(run.model, run.stages, fp8, groups, backend);
  if (groups.rank() != 0) {
    // The same walk as the writer's, over this stage's tensors: the gathers meet their peers,
    // and this stage's TP-0 DP-0 rank sends each whole tensor when the writer asks for it.
    for (const auto& file : files) {
      for (const SavedTensor& t : file) {
        if (t.stage != stage) continue;
        const Tensor whole = global_tensor(t, params, optimizer, groups, backend);
        if (!whole.defined() || groups.tp->rank() != 0 || stage == 0) continue;
        // A TP-gathered tensor is on the host; NCCL sends device memory.
        Tensor sent = whole;
        if (whole.device() != backend.device()) {
          sent = backend.empty(whole.shape(), whole.dtype(), MemoryKind::kOther);
          backend.copy(whole, sent);
        }
        groups.pp->send(sent, 0);
      }
    }
    return;
  }
  MT_CHECK(stage == 0 && groups.tp->rank() == 0 && groups.dp_cp->rank() == 0) << "the writer is stage 0, TP 0, DP 0";
  // Each tensor's bytes are produced when write_safetensors reaches it (one dtype per file, so
  // its data order is the list's order, the one the other ranks walk).
  auto to_write = [&](const SavedTensor& t) {
    TensorToWrite w;
    w.name = t.name;
    w.dtype = t.dtype;
    w.shape = t.global;
    w.fill = [&, t](void* dst) {
      Tensor whole;
      if (t.stage == 0) {
        whole = global_tensor(t, params, optimizer, groups, backend);
      } else {
        whole = backend.empty(t.global, t.dtype, MemoryKind::kOther);
        groups.pp->recv(whole, t.stage);
      }
      MT_CHECK(whole.shape() == t.global && whole.dtype() == t.dtype) << t.name << ": " << whole.describe();
      const Tensor host = host_view(whole, backend);
      std::memcpy(dst, host.data(), static_cast<size_t>(host.nbytes()));
    };
    return w;
  };
  std::array<std::vector<TensorToWrite>, 2> tensors;
  for (int f = 0; f < 2; ++f) {
    for (const SavedTensor& t : files[f]) {
      MT_CHECK(t.dtype == files[f].front().dtype) << "one dtype per file keeps the writing order the list's";
      tensors[f].push_back(to_write(t));
    }
  }
  std::vector<CheckpointFile> out;
  out.push_back(CheckpointFile::safetensors(kModelFileName, std::move(tensors[0])));
  if (o.save_optim) out.push_back(CheckpointFile::safetensors(kOptimizerFileName, std::move(tensors[1])));
  if (fp8_file) out.push_back(std::move(fp8_file->file));  // its tensors point into fp8_file->data
  out.push_back(
      CheckpointFile::text_file(kMetadataFileName, metadata_json(run, o.save_optim, progress, optimizer, scheduler)));
  save_checkpoint_dir(o.dir, progress.iteration, out, o.keep_last);
}

// ---- The parallel save (ckpt/checkpoint.h says who writes what) ----

// A run of a parameter's flat (TP-local) elements this rank writes: [begin, begin + n).
struct Piece {
  int64_t begin = 0;
  Tensor values;  // [n], host or device
};

// What this rank writes of tensor t (ckpt/checkpoint.h): of p's elements it holds (its TP
// shard's, flat), the optimizer state it owns when that is sharded, else the elements
// [d*n/D, (d+1)*n/D) on DP rank d of D.
std::vector<Piece> pieces_to_write(const SavedTensor& t, const model::Parameter& p,
                                   const parallel::MixedPrecisionOptimizer& optimizer,
                                   const parallel::ProcessGroups& groups) {
  if (!p.partition.split() && groups.tp->rank() != 0) return {};
  std::vector<Piece> held;
  if (t.part == Part::kValue) {
    held.push_back({0, p.value.view({p.numel()})});
  } else {
    for (parallel::MixedPrecisionOptimizer::HeldState& h : optimizer.held_param_state(p, state_kind(t.part))) {
      held.push_back({h.begin, std::move(h.values)});
    }
    if (optimizer.state_sharded()) return held;
  }
  const int64_t n = p.numel(), d = groups.dp_cp->rank(), parts = groups.dp_cp->size();
  const int64_t lo = d * n / parts, hi = (d + 1) * n / parts;
  std::vector<Piece> out;
  for (const Piece& h : held) {
    const int64_t a = std::max(lo, h.begin), z = std::min(hi, h.begin + h.values.numel());
    if (a < z) out.push_back({a, h.values.flat_view(a - h.begin, {z - a})});
  }
  return out;
}

// Calls fn(index, t, p, begin, values) for what this rank writes of file `file` (the tensors
// of its stage), in pieces of at most kParallelSaveStagingBytes: `values` [m] (host or device)
// are the TP-local flat elements [begin, begin + m) of parameter p's tensor t.
template <class Fn>
void for_each_chunk(const std::vector<SavedTensor>& file, const model::ParameterSet& params,
                    const parallel::MixedPrecisionOptimizer& optimizer, const parallel::ProcessGroups& groups,
                    Fn&& fn) {
  for (size_t i = 0; i < file.size(); ++i) {
    const SavedTensor& t = file[i];
    if (t.stage != groups.coords.pp) continue;
    const model::Parameter* p = params.find(t.param);
    MT_CHECK(p != nullptr) << "stage " << t.stage << " has no parameter " << t.param;
    const int64_t chunk = kParallelSaveStagingBytes / dtype_size(t.dtype);
    for (const Piece& piece : pieces_to_write(t, *p, optimizer, groups)) {
      MT_CHECK(piece.values.dtype() == t.dtype) << t.name << ": " << piece.values.describe();
      for (int64_t at = 0, n = piece.values.numel(); at < n; at += chunk) {
        fn(i, t, *p, piece.begin + at, piece.values.flat_view(at, {std::min(chunk, n - at)}));
      }
    }
  }
}

// Writes host bytes into the laid-out files at their global offsets (each file opened at its
// first write).
class ShareWriter {
 public:
  ShareWriter(const std::array<std::string, 2>& paths, const std::array<SafetensorsHeader, 2>& headers)
      : paths_(paths), headers_(headers) {}
  // `host` [m]: the TP-local elements [begin, begin + m) of tensor `index` of file `f`.
  void write(int f, size_t index, const Shape& global, const tensor_parallel::Partition& partition, int64_t begin,
             const Tensor& host) {
    if (!writers_[static_cast<size_t>(f)]) writers_[static_cast<size_t>(f)].emplace(paths_[f], headers_[f]);
    SafetensorsRangeWriter& w = *writers_[static_cast<size_t>(f)];
    bytes_[static_cast<size_t>(f)] += static_cast<double>(host.nbytes());
    const int64_t e = dtype_size(host.dtype());
    const char* bytes = static_cast<const char*>(host.data());
    tensor_parallel::for_each_global_run(global, partition, begin, host.numel(),
                                         [&](int64_t global_start, int64_t local_start, int64_t len) {
                                           w.write(index, global_start * e, bytes + (local_start - begin) * e, len * e);
                                         });
  }
  void finish() {
    for (auto& w : writers_) {
      if (w) w->finish();
    }
  }
  const std::array<double, 2>& bytes() const { return bytes_; }

 private:
  const std::array<std::string, 2>& paths_;
  const std::array<SafetensorsHeader, 2>& headers_;
  std::array<std::optional<SafetensorsRangeWriter>, 2> writers_;
  std::array<double, 2> bytes_ = {0, 0};
};

}  // namespace

// A parallel save between its start (files laid out, this rank's bytes taken) and its commit.
struct PendingCheckpointSave::State {
  std::string save_dir, tmp, metadata;
  int64_t iteration = 0, keep_last = 0;
  bool rank0 = false;
  std::array<std::string, 2> paths;
  std::array<SafetensorsHeader, 2> headers;
  std::optional<Fp8StateFile> fp8;  // rank 0's, written with metadata.json
  // --async-save: this rank's bytes, copied at the save, written by `thread`.
  struct Job {
    int file = 0;
    size_t index = 0;
    Shape global;
    tensor_parallel::Partition partition;
    int64_t begin = 0;
    Tensor host;
  };
  std::vector<Job> jobs;
  std::thread thread;
  std::atomic<bool> written{false};
  std::optional<std::string> error;              // this rank's write failure (set before `written`)
  std::array<double, 2> bytes_written = {0, 0};  // per file, by this rank (set before `written`)

  ~State() {
    if (thread.joinable()) thread.join();
  }
};

PendingCheckpointSave::PendingCheckpointSave(std::unique_ptr<State> state) : state_(std::move(state)) {}

PendingCheckpointSave::~PendingCheckpointSave() = default;

int64_t PendingCheckpointSave::iteration() const { return state_->iteration; }

namespace {

int64_t padded_to_8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

// Runs write(writer) with a ShareWriter over st's files, then records the outcome: the bytes
// written, or the error; then `written`, after them (finish_checkpoint_save reads them once it
// sees `written`, or after joining the thread).
template <class Fn>
void record_writes(PendingCheckpointSave::State& st, Fn&& write) {
  try {
    ShareWriter writer(st.paths, st.headers);
    write(writer);
    writer.finish();
    st.bytes_written = writer.bytes();
  } catch (const std::exception& e) {
    st.error = e.what();
  }
  st.written.store(true);
}

// The bytes --async-save copies on this rank: its chunks, each at a multiple of 8 bytes.
int64_t async_copy_bytes(const std::array<std::vector<SavedTensor>, 2>& files, const model::ParameterSet& params,
                         const parallel::MixedPrecisionOptimizer& optimizer, const parallel::ProcessGroups& groups) {
  int64_t total = 0;
  for (const auto& file : files) {
    for_each_chunk(file, params, optimizer, groups,
                   [&](size_t, const SavedTensor&, const model::Parameter&, int64_t, const Tensor& v) {
                     total += padded_to_8(v.nbytes());
                   });
  }
  return total;
}

// The parallel save (ckpt/checkpoint.h) up to its commit: rank 0 lays out the files in a
// temporary directory, every rank writes its bytes into them (async: copies them, and a thread
// writes them).
std::unique_ptr<PendingCheckpointSave::State> start_parallel_save(
    const CheckpointRun& run, const SaveOptions& o, const TrainProgress& progress,
    const std::array<std::vector<SavedTensor>, 2>& files, const model::ParameterSet& params,
    const parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
    const optim::OptimizerParamScheduler& scheduler, const parallel::ProcessGroups& groups, backend::Backend& backend,
    std::shared_ptr<Storage>* async_host) {
  const bool async = async_host != nullptr;
  using State = PendingCheckpointSave::State;
  comm::Communicator& world = *groups.world;
  auto st = std::make_unique<State>();
  st->save_dir = o.dir;
  st->iteration = progress.iteration;
  st->keep_last = o.keep_last;
  st->rank0 = groups.rank() == 0;
  st->metadata = metadata_json(run, o.save_optim, progress, optimizer, scheduler);
  // The state as of this iteration, before training goes on (--async-save).
  st->fp8 = gather_fp8_state(run.model, run.stages, fp8, groups, backend);
  const std::array<const char*, 2> names = {kModelFileName, kOptimizerFileName};
  const int nfiles = o.save_optim ? 2 : 1;
  for (int f = 0; f < nfiles; ++f) {
    std::vector<TensorToWrite> shapes;
    for (const SavedTensor& t : files[f]) {
      TensorToWrite w;
      w.name = t.name;
      w.dtype = t.dtype;
      w.shape = t.global;
      shapes.push_back(std::move(w));
    }
    st->headers[f] = make_safetensors_header(shapes, {});
  }

  std::optional<std::string> error;
  double pid = 0;  // rank 0's, which names the temporary directory
  if (st->rank0) {
    try {
      st->tmp = begin_checkpoint_dir(st->save_dir, st->iteration);
      for (int f = 0; f < nfiles; ++f) create_safetensors_file(st->tmp + "/" + names[f], st->headers[f]);
      pid = static_cast<double>(::getpid());
    } catch (const std::exception& e) {
      error = e.what();
      if (!st->tmp.empty()) abandon_checkpoint_dir(st->tmp);
    }
  }
  agree_on_failure(world, error, st->save_dir, "starting the checkpoint");
  world.all_reduce_host({&pid, 1}, comm::ReduceOp::kMax);
  if (!st->rank0) st->tmp = temporary_checkpoint_dir(st->save_dir, st->iteration, static_cast<int64_t>(pid));
  for (int f = 0; f < nfiles; ++f) st->paths[f] = st->tmp + "/" + names[f];

  if (async) {
    // The bytes as they are now (training goes on and changes them), copied into one
    // page-locked host buffer (kept for the next save: pinning is slow, the copies are not),
    // each chunk at a multiple of 8 bytes; then the thread writes them.
    try {
      const int64_t total = async_copy_bytes(files, params, optimizer, groups);
      if (!*async_host || (*async_host)->bytes() < total) {
        async_host->reset();
        *async_host = backend.host_staging({(total + 7) / 8}, DType::kI64).storage();
      }
      int64_t at = 0;
      for (int f = 0; f < nfiles; ++f) {
        for_each_chunk(
            files[f], params, optimizer, groups,
            [&](size_t index, const SavedTensor& t, const model::Parameter& p, int64_t begin, const Tensor& v) {
              Tensor host(*async_host, at / dtype_size(v.dtype()), v.shape(), v.dtype());
              backend.copy_to_host_async(v, host);
              st->jobs.push_back({f, index, t.global, p.partition, begin, std::move(host)});
              at += padded_to_8(v.nbytes());
            });
      }
      backend.synchronize();
    } catch (const std::exception& e) {
      error = e.what();
    }
    try {
      agree_on_failure(world, error, st->save_dir, "copying the checkpoint to host memory");
    } catch (const Error&) {
      if (st->rank0) abandon_checkpoint_dir(st->tmp);
      throw;
    }
    State* s = st.get();
    st->thread = std::thread([s] {
      record_writes(*s, [s](ShareWriter& writer) {
        for (const State::Job& job : s->jobs) {
          writer.write(job.file, job.index, job.global, job.partition, job.begin, job.host);
        }
      });
    });
    return st;
  }
  record_writes(*st, [&](ShareWriter& writer) {
    const std::shared_ptr<Storage> staging = backend.device() == Device::kCPU
                                                 ? nullptr
                                                 : allocate_cpu_storage(kParallelSaveStagingBytes, MemoryKind::kOther);
    for (int f = 0; f < nfiles; ++f) {
      for_each_chunk(
          files[f], params, optimizer, groups,
          [&](size_t index, const SavedTensor& t, const model::Parameter& p, int64_t begin, const Tensor& v) {
            Tensor host = v;
            if (v.device() != Device::kCPU) {
              host = Tensor(staging, 0, v.shape(), v.dtype());
              backend.copy(v, host);
            }
            writer.write(f, index, t.global, p.partition, begin, host);
          });
    }
  });
  return st;
}

}  // namespace

std::shared_ptr<Storage> async_save_host_buffer(const CheckpointRun& run, const SaveOptions& o,
                                                const model::ParameterSet& params,
                                                const parallel::MixedPrecisionOptimizer& optimizer,
                                                const parallel::ProcessGroups& groups, backend::Backend& backend) {
  std::optional<std::string> error;
  std::shared_ptr<Storage> buffer;
  try {
    const int64_t bytes = async_copy_bytes(saved_tensors(run, o.save_optim, optimizer.has_separate_main_params()),
                                           params, optimizer, groups);
    buffer = backend.host_staging({(bytes + 7) / 8}, DType::kI64).storage();
  } catch (const std::exception& e) {
    error = str_cat("[--async-save] rank ", groups.rank(),
                    ": cannot allocate the page-locked host copy of its checkpoint share: ", e.what());
  }
  agree_on_failure(*groups.world, error, o.dir, "allocating --async-save's host memory", "--async-save");
  return buffer;
}

bool finish_checkpoint_save(PendingCheckpointSave& save, comm::Communicator& world, bool wait, std::ostream& log) {
  PendingCheckpointSave::State& st = *save.state_;
  if (!wait) {
    double written = st.written.load() ? 1.0 : 0.0;
    world.all_reduce_host({&written, 1}, comm::ReduceOp::kMin);
    if (written < 1.0) return false;
  }
  if (st.thread.joinable()) st.thread.join();
  try {
    agree_on_failure(world, st.error, st.save_dir, "writing the checkpoint");
    // The files were sized before anything was written: a byte no rank wrote would read as
    // zero. Every byte is written exactly once, so the ranks' counts add up to the data areas.
    std::array<double, 2> total = st.bytes_written;
    world.all_reduce_host(total, comm::ReduceOp::kSum);
    for (size_t f = 0; f < 2; ++f) {
      if (total[f] != static_cast<double>(st.headers[f].data_bytes)) {
        throw_error("[--save] ", st.save_dir, ": the ranks wrote ", static_cast<int64_t>(total[f]), " bytes of ",
                    st.paths[f], "'s ", st.headers[f].data_bytes, " (a defect: please report it)");
      }
    }
  } catch (const Error&) {
    if (st.rank0) abandon_checkpoint_dir(st.tmp);  // the previous checkpoint stays the latest
    throw;
  }
  std::optional<std::string> error;
  if (st.rank0) {
    try {
      std::vector<CheckpointFile> last;
      if (st.fp8) last.push_back(std::move(st.fp8->file));  // its tensors point into st.fp8->data
      last.push_back(CheckpointFile::text_file(kMetadataFileName, st.metadata));
      write_checkpoint_files(st.tmp, last);
      commit_checkpoint_dir(st.save_dir, st.iteration, st.tmp, st.keep_last);
    } catch (const std::exception& e) {
      error = e.what();
      abandon_checkpoint_dir(st.tmp);  // gone already when the commit got past its rename
    }
  }
  agree_on_failure(world, error, st.save_dir, "committing the checkpoint");
  if (st.rank0) {
    log << "  successfully saved checkpoint at iteration " << iteration_text(st.iteration) << " to " << st.save_dir
        << '\n'
        << std::flush;
  }
  return true;
}

std::unique_ptr<PendingCheckpointSave> save_training_checkpoint(
    const CheckpointRun& run, const SaveOptions& o, const TrainProgress& progress, const model::ParameterSet& params,
    const parallel::MixedPrecisionOptimizer& optimizer, const Fp8StageState& fp8,
    const optim::OptimizerParamScheduler& scheduler, const parallel::ProcessGroups& groups, backend::Backend& backend,
    std::ostream& log, std::shared_ptr<Storage>* async_host) {
  MT_CHECK(!o.dir.empty()) << "save without --save";
  MT_CHECK(!o.async || async_host != nullptr) << "--async-save without a host buffer";
  const std::array<std::vector<SavedTensor>, 2> files =
      saved_tensors(run, o.save_optim, optimizer.has_separate_main_params());
  const bool rank0 = groups.rank() == 0;
  const std::string line = iteration_text(progress.iteration);
  if (rank0) log << "saving checkpoint at iteration " << line << " to " << o.dir << '\n' << std::flush;
  if (!o.fully_parallel) {
    save_streamed(run, o, progress, files, params, optimizer, fp8, scheduler, groups, backend);
    if (rank0) log << "  successfully saved checkpoint at iteration " << line << " to " << o.dir << '\n' << std::flush;
    return nullptr;
  }
  auto save = std::make_unique<PendingCheckpointSave>(start_parallel_save(
      run, o, progress, files, params, optimizer, fp8, scheduler, groups, backend, o.async ? async_host : nullptr));
  if (!o.async) {
    finish_checkpoint_save(*save, *groups.world, /*wait=*/true, log);
    return nullptr;
  }
  if (rank0) log << "  writing it in the background (--async-save)\n" << std::flush;
  return save;
}

void agree_on_failure(comm::Communicator& world, const std::optional<std::string>& my_error, const std::string& dir,
                      const char* step, const char* flag) {
  double failed = my_error ? 1.0 : 0.0;
  world.all_reduce_host({&failed, 1}, comm::ReduceOp::kMax);
  if (my_error) throw Error(*my_error);
  if (failed > 0) throw_error("[", flag, "] ", dir, ": ", step, " failed on another rank (its error says why)");
}

bool all_ranks_see_directory(const std::string& dir, comm::Communicator& world) {
  std::optional<std::string> error;
  double nonce = 0;  // < 2^48: exact in a double
  // Named by the number too, so that two jobs probing one directory do not read each other's.
  const auto probe_path = [&] {
    return dir + "/.shared_storage_probe." + std::to_string(static_cast<uint64_t>(nonce));
  };
  if (world.rank() == 0) {
    try {
      make_directories(dir);
      std::random_device rd;
      nonce = static_cast<double>((static_cast<uint64_t>(rd()) << 16 ^ rd()) & ((uint64_t{1} << 48) - 1));
      AtomicFile out(probe_path());
      out.write(std::to_string(static_cast<uint64_t>(nonce)));
      out.commit();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_failure(world, error, dir, "checking the directory");
  world.all_reduce_host({&nonce, 1}, comm::ReduceOp::kMax);
  const std::string probe = probe_path();
  double seen = 1.0;
  if (world.rank() != 0) {
    std::ifstream in(probe);
    uint64_t read = 0;
    seen = in && (in >> read) && read == static_cast<uint64_t>(nonce) ? 1.0 : 0.0;
  }
  world.all_reduce_host({&seen, 1}, comm::ReduceOp::kMin);  // also: every rank has read it
  if (world.rank() == 0) ::unlink(probe.c_str());
  return seen > 0;
}

}  // namespace megatron::ckpt
