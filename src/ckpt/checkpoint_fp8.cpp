#include "ckpt/checkpoint_fp8.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include "core/error.h"

namespace megatron::ckpt {
namespace {

using backend::Fp8Mix;
using backend::Fp8Recipe;
using backend::kFp8Roles;

constexpr int64_t kLinearsPerLayer = 4;
constexpr std::array<const char*, kLinearsPerLayer> kLinears = {
    "self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"};
constexpr std::array<const char*, 3> kSuffixes = {".fp8_amax_history", ".fp8_scale", ".fp8_scale_inv"};

std::string linear_name(int64_t layer, int64_t linear) {
  return "decoder.layers." + std::to_string(layer) + "." + kLinears[static_cast<size_t>(linear)];
}

// Floats per linear in a stage's packed state: its history [L, 3], scale [3], scale_inv [3].
int64_t packed_per_linear(int64_t history_len) { return (history_len + 2) * kFp8Roles; }

// This rank's state on the host, packed linear after linear (local order) as above.
std::vector<float> pack(backend::Fp8ScalingState& s, backend::Backend& backend) {
  const int64_t L = s.history_len(), ops = s.operands(), linears = ops / kFp8Roles;
  constexpr int64_t kSi = backend::Fp8ScalingState::kScaleInvStride;
  Tensor h = Tensor::cpu({L, ops}), sc = Tensor::cpu({ops}), si = Tensor::cpu({ops, kSi});
  backend.copy(s.amax_history(), h);
  backend.copy(s.scale(), sc);
  backend.copy(s.scale_inv(), si);
  const float* hp = h.data_as<float>();
  std::vector<float> out;
  out.reserve(static_cast<size_t>(linears * packed_per_linear(L)));
  for (int64_t k = 0; k < linears; ++k) {
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t r = 0; r < kFp8Roles; ++r) out.push_back(hp[i * ops + k * kFp8Roles + r]);
    }
    for (int64_t r = 0; r < kFp8Roles; ++r) out.push_back(sc.data_as<float>()[k * kFp8Roles + r]);
    for (int64_t r = 0; r < kFp8Roles; ++r) out.push_back(si.data_as<float>()[(k * kFp8Roles + r) * kSi]);
  }
  return out;
}

std::string_view metadata_value(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  if (it == f.metadata().end()) throw_error(f.path(), ": __metadata__ has no \"", key, "\"");
  return it->second;
}

}  // namespace

std::vector<int64_t> stage_global_layers(const model::GPTConfig& c, const model::PipelineStageOptions& pipe) {
  const int64_t Lc = c.num_layers / (pipe.pp * pipe.virtual_chunks);
  std::vector<int64_t> out;
  for (int64_t ci = 0; ci < pipe.virtual_chunks; ++ci) {
    const int64_t first = (ci * pipe.pp + pipe.stage) * Lc;
    for (int64_t l = first; l < first + Lc; ++l) out.push_back(l);
  }
  return out;
}

std::optional<Fp8StateFile> gather_fp8_state(const model::GPTConfig& config,
                                             const std::vector<model::PipelineStageOptions>& stages,
                                             const Fp8StageState& fp8, const parallel::ProcessGroups& groups,
                                             backend::Backend& backend) {
  if (fp8.state == nullptr) return std::nullopt;
  backend::Fp8ScalingState& s = *fp8.state;
  MT_CHECK(fp8.stage == groups.coords.pp) << "FP8 state of stage " << fp8.stage << " on stage " << groups.coords.pp;
  if (groups.tp_dp_cp && groups.tp_dp_cp->size() > 1) {
    Tensor row = s.amax_to_reduce();
    groups.tp_dp_cp->all_reduce(row, comm::ReduceOp::kMax);
  }
  const int64_t L = s.history_len(), per_linear = packed_per_linear(L);
  const bool writer = groups.tp->rank() == 0 && groups.dp_cp->rank() == 0;
  if (!writer) return std::nullopt;
  std::vector<float> mine = pack(s, backend);
  const bool rank0 = groups.rank() == 0;
  // A device tensor for the pipeline group's send/recv (NCCL sends device memory).
  auto on_device = [&](int64_t n) { return backend.empty({n}, DType::kF32, MemoryKind::kOther); };
  if (!rank0) {
    Tensor host = Tensor::cpu({static_cast<int64_t>(mine.size())});
    std::memcpy(host.data(), mine.data(), mine.size() * sizeof(float));
    Tensor sent = on_device(host.numel());
    backend.copy(host, sent);
    groups.pp->send(sent, 0);
    return std::nullopt;
  }
  MT_CHECK(groups.coords.pp == 0) << "global rank 0 is on stage 0";
  // Every stage's packed state, by global layer.
  std::vector<std::vector<float>> by_layer(static_cast<size_t>(config.num_layers));
  for (size_t stage = 0; stage < stages.size(); ++stage) {
    const std::vector<int64_t> layers = stage_global_layers(config, stages[stage]);
    const int64_t n = static_cast<int64_t>(layers.size()) * kLinearsPerLayer * per_linear;
    std::vector<float> got;
    if (stage == 0) {
      got = std::move(mine);
    } else {
      Tensor recv = on_device(n);
      groups.pp->recv(recv, static_cast<int64_t>(stage));
      Tensor host = Tensor::cpu({n});
      backend.copy(recv, host);
      got.assign(host.data_as<float>(), host.data_as<float>() + n);
    }
    MT_CHECK(static_cast<int64_t>(got.size()) == n) << "stage " << stage << " sent " << got.size() << " of " << n;
    const int64_t per_layer = kLinearsPerLayer * per_linear;
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto from = got.begin() + static_cast<int64_t>(i) * per_layer;
      by_layer[static_cast<size_t>(layers[i])].assign(from, from + per_layer);
    }
  }
  Fp8StateFile out;
  for (const std::vector<float>& l : by_layer) {
    MT_CHECK(!l.empty()) << "a layer without FP8 state";
    out.data.insert(out.data.end(), l.begin(), l.end());
  }
  std::vector<TensorToWrite> tensors;
  int64_t at = 0;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    for (int64_t k = 0; k < kLinearsPerLayer; ++k) {
      const std::string base = linear_name(layer, k);
      const std::array<Shape, 3> shapes = {Shape{L, kFp8Roles}, Shape{kFp8Roles}, Shape{kFp8Roles}};
      for (size_t t = 0; t < 3; ++t) {
        TensorToWrite w;
        w.name = base + kSuffixes[t];
        w.dtype = DType::kF32;
        w.shape = shapes[t];
        w.data = out.data.data() + at;
        at += shape_numel(shapes[t]);
        tensors.push_back(std::move(w));
      }
    }
  }
  MT_CHECK(at == static_cast<int64_t>(out.data.size())) << "packed FP8 state of " << out.data.size();
  const backend::Fp8Config& cfg = s.config();
  StringMap meta = {{"fp8_format", std::string(backend::fp8_mix_name(cfg.format))},
                    {"fp8_recipe", std::string(backend::fp8_recipe_name(cfg.recipe))}};
  out.file = CheckpointFile::safetensors(kFp8StateFileName, std::move(tensors), std::move(meta));
  return out;
}

std::optional<Fp8StateInfo> read_fp8_state_info(const LoadedCheckpoint& ck, int64_t num_layers) {
  const auto it = ck.tensor_files.find(kFp8StateFileName);
  if (it == ck.tensor_files.end()) return std::nullopt;
  const SafetensorsFile& f = it->second;
  Fp8StateInfo info;
  const std::string_view format = metadata_value(f, "fp8_format");
  const std::string_view recipe = metadata_value(f, "fp8_recipe");
  if (format != "e4m3" && format != "hybrid") {
    throw_error(f.path(), ": __metadata__ fp8_format is '", format.substr(0, 40), "', expected e4m3 or hybrid");
  }
  if (recipe != "tensorwise" && recipe != "delayed") {
    throw_error(f.path(), ": __metadata__ fp8_recipe is '", recipe.substr(0, 40), "', expected tensorwise or delayed");
  }
  info.format = format == "e4m3" ? Fp8Mix::kE4M3 : Fp8Mix::kHybrid;
  info.recipe = recipe == "tensorwise" ? Fp8Recipe::kTensorwise : Fp8Recipe::kDelayed;
  std::optional<int64_t> history;
  std::set<std::string> expected;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (int64_t k = 0; k < kLinearsPerLayer; ++k) {
      const std::string base = linear_name(layer, k);
      for (size_t t = 0; t < 3; ++t) {
        const std::string name = base + kSuffixes[t];
        expected.insert(name);
        const SafetensorsTensor* x = f.find(name);
        if (x == nullptr) {
          throw_error(f.path(), ": tensor '", name, "' is missing (the model has ", num_layers, " layers)");
        }
        if (x->dtype != DType::kF32) throw_error(f.path(), ": tensor '", name, "' is not F32");
        const bool ok = t == 0 ? x->shape.size() == 2 && x->shape[0] >= 1 && x->shape[1] == kFp8Roles &&
                                     (!history || x->shape[0] == *history)
                               : x->shape == Shape{kFp8Roles};
        if (!ok) {
          throw_error(f.path(), ": tensor '", name, "' has shape ", shape_to_string(x->shape), ", expected ",
                      t == 0 ? (history ? str_cat("[", *history, ",3] (the other histories')") : std::string("[L,3]"))
                             : std::string("[3]"));
        }
        if (t == 0) history = x->shape[0];
      }
    }
  }
  for (const SafetensorsTensor& x : f.tensors()) {
    if (!expected.count(x.name)) {
      throw_error(f.path(), ": tensor '", x.name, "' is not FP8 state of the model's ", num_layers, " layers");
    }
  }
  MT_CHECK(history.has_value()) << "a model without layers";
  info.history_len = *history;
  return info;
}

void load_fp8_state(const LoadedCheckpoint& ck, const model::GPTConfig& config,
                    const std::vector<model::PipelineStageOptions>& stages, const Fp8StageState& fp8,
                    backend::Backend& backend, std::ostream& log) {
  if (fp8.state == nullptr) return;
  backend::Fp8ScalingState& s = *fp8.state;
  const backend::Fp8Config& cfg = s.config();
  const std::optional<Fp8StateInfo> info = read_fp8_state_info(ck, config.num_layers);
  if (!info) {
    log << " > the checkpoint holds no FP8 scaling state: FP8 starts with fresh scaling state (scales 1, amax "
           "histories 0)\n";
    return;
  }
  if (info->recipe != cfg.recipe || info->format != cfg.format) {
    log << " > the checkpoint's FP8 scaling state is for --fp8-format " << backend::fp8_mix_name(info->format)
        << " --fp8-recipe " << backend::fp8_recipe_name(info->recipe) << ", this run's "
        << backend::fp8_mix_name(cfg.format) << " " << backend::fp8_recipe_name(cfg.recipe)
        << ": FP8 starts with fresh scaling state (scales 1, amax histories 0)\n";
    return;
  }
  const int64_t L = s.history_len(), ops = s.operands();
  if (info->history_len != L) {
    log << " > the checkpoint's FP8 amax histories of " << info->history_len << " entries are "
        << (info->history_len > L ? "cut to their first " : "extended with zero entries to ") << L
        << " (--fp8-amax-history-len, as Transformer Engine adjusts them)\n";
  }
  const SafetensorsFile& f = ck.tensor_files.at(kFp8StateFileName);
  const std::vector<int64_t> layers = stage_global_layers(config, stages.at(static_cast<size_t>(fp8.stage)));
  MT_CHECK(static_cast<int64_t>(layers.size()) * kLinearsPerLayer * kFp8Roles == ops)
      << "stage " << fp8.stage << ": " << layers.size() << " layers, " << ops << " FP8 operands";
  constexpr int64_t kSi = backend::Fp8ScalingState::kScaleInvStride;
  Tensor h = Tensor::cpu({L, ops}), sc = Tensor::cpu({ops}), si = Tensor::cpu({ops, kSi});
  std::memset(h.data(), 0, static_cast<size_t>(h.nbytes()));
  std::memset(si.data(), 0, static_cast<size_t>(si.nbytes()));
  float* hp = h.data_as<float>();
  const int64_t keep = std::min(L, info->history_len);
  for (size_t i = 0; i < layers.size(); ++i) {
    for (int64_t k = 0; k < kLinearsPerLayer; ++k) {
      const std::string base = linear_name(layers[i], k);
      const int64_t col = (static_cast<int64_t>(i) * kLinearsPerLayer + k) * kFp8Roles;
      const SafetensorsTensor& hist = f.at(base + kSuffixes[0]);
      for (int64_t row = 0; row < keep; ++row) {
        std::memcpy(hp + row * ops + col, hist.data + row * kFp8Roles * 4, kFp8Roles * 4);
      }
      std::memcpy(sc.data_as<float>() + col, f.at(base + kSuffixes[1]).data, kFp8Roles * 4);
      const SafetensorsTensor& inv = f.at(base + kSuffixes[2]);
      for (int64_t r = 0; r < kFp8Roles; ++r) std::memcpy(si.data_as<float>() + (col + r) * kSi, inv.data + r * 4, 4);
    }
  }
  backend.copy(h, s.amax_history());
  backend.copy(sc, s.scale());
  backend.copy(si, s.scale_inv());
}

}  // namespace megatron::ckpt
