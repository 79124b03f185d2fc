// What a checkpoint must hold before it is used (ckpt/checkpoint_contents.h), against a real
// checkpoint that `megatron train` wrote: every metadata value out of range is refused naming
// the file and key; the tensors must be exactly the recorded model's (a layer count of 1 for
// a 2-layer checkpoint, a missing or an extra tensor); unknown enum values and an iteration
// that disagrees with its directory are refused; NaN weights are refused by the loaders; and
// the commands (checkpoint-info, generate, convert) refuse what the library refuses.
#include "ckpt/checkpoint_contents.h"

#include <gtest/gtest.h>

#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "core/dtype.h"
#include "core/json_writer.h"
#include "model/gpt_model.h"
#include "support/error_of.h"
#include "support/paths.h"

namespace megatron::ckpt {
namespace {

namespace fs = std::filesystem;

const std::string& fixture() {
  static const std::string dir = [] {
    const std::string d = test::scratch_dir("checkpoint_contents");
    const test::CommandResult r = test::run_command(
        test::megatron_binary() +
            " train --num-layers 2 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2"
            " --global-batch-size 2 --train-iters 2 --lr 0.01 --mock-data --log-interval 1 --eval-iters 0 --device cpu"
            " --vocab-file " +
            test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file() + " --data-cache-path " + d +
            "/cache --save " + d + "/original --save-interval 2",
        true);
    EXPECT_EQ(r.status, 0) << r.output;
    return d;
  }();
  return dir;
}

// A fresh copy of the fixture checkpoint; returns its directory.
std::string copy_of_fixture(const std::string& name) {
  const std::string dst = fixture() + "/" + name;
  fs::remove_all(dst);
  fs::copy(fixture() + "/original", dst, fs::copy_options::recursive);
  return dst;
}

std::string metadata_path(const std::string& ckpt) { return ckpt + "/iter_0000002/metadata.json"; }

// Writes `e` with object[key] (object "" for the top level) replaced by the JSON text `value`
// (nullopt: removed).
void write_replaced(JsonWriter& w, simdjson::dom::element e, const std::string& object, const std::string& key,
                    const std::optional<std::string>& value, const std::string& here) {
  if (!e.is_object()) {
    w.raw_value(simdjson::minify(e));
    return;
  }
  w.begin_object();
  for (auto field : simdjson::dom::object(e)) {
    const std::string k(field.key);
    if (here == object && k == key) {
      if (value) w.key(k).raw_value(*value);
      continue;
    }
    w.key(k);
    if (here.empty() && k == object) {
      write_replaced(w, field.value, object, key, value, k);
    } else {
      w.raw_value(simdjson::minify(field.value));
    }
  }
  w.end_object();
}

void set_metadata(const std::string& ckpt, const std::string& object, const std::string& key,
                  const std::optional<std::string>& value) {
  const std::string text = test::read_file(metadata_path(ckpt));
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(text);
  JsonWriter w(2);
  write_replaced(w, doc, object, key, value, "");
  std::ofstream(metadata_path(ckpt), std::ios::binary | std::ios::trunc) << w.take();
}

std::string model_error(const std::string& ckpt) {
  return test::error_of([&] { ckpt::read_checkpoint_model(ckpt::load_checkpoint_dir(ckpt)); });
}
std::string state_error(const std::string& ckpt) {
  return test::error_of([&] { ckpt::read_checkpoint_state(ckpt::load_checkpoint_dir(ckpt)); });
}

TEST(CheckpointContents, TheFixtureIsAccepted) {
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(fixture() + "/original");
  const ckpt::CheckpointModel m = ckpt::read_checkpoint_model(ck);
  EXPECT_EQ(m.config.num_layers, 2);
  EXPECT_EQ(m.config.hidden_size, 16);
  EXPECT_EQ(m.config.padded_vocab_size, 50304);
  const ckpt::CheckpointState s = ckpt::read_checkpoint_state(ck);
  EXPECT_EQ(s.progress.iteration, 2);
  EXPECT_EQ(s.progress.consumed_train_samples, 4);
  EXPECT_TRUE(s.has_optimizer_state);
  EXPECT_EQ(s.optimizer_steps, 2);
  EXPECT_NO_THROW(ckpt::check_all_finite(ck));
}

TEST(CheckpointContents, EveryModelValueIsRangeChecked) {
  struct Case {
    std::string key, value, expected;
  };
  const std::vector<Case> cases = {
      {"--num-layers", "0", "args.--num-layers is 0, expected 1 to"},
      {"--num-layers", "-1", "args.--num-layers is -1, expected 1 to"},
      {"--num-layers", "1000000000000", "args.--num-layers is 1000000000000, expected 1 to"},
      {"--num-layers", "1.5", "args.--num-layers is not an integer"},
      {"--hidden-size", "0", "args.--hidden-size is 0"},
      {"--hidden-size", "4611686018427387904", "args.--hidden-size is 4611686018427387904"},
      {"--num-attention-heads", "-2", "args.--num-attention-heads is -2"},
      {"--kv-channels", "0", "args.--kv-channels is 0"},
      {"--ffn-hidden-size", "0", "args.--ffn-hidden-size is 0"},
      {"--max-position-embeddings", "0", "args.--max-position-embeddings is 0"},
      {"--seq-length", "17", "args.--seq-length is 17, expected 1 to 16"},
      {"--seq-length", "0", "args.--seq-length is 0"},
      {"padded_vocab_size", "0", "args.padded_vocab_size is 0"},
      {"vocab_size", "0", "args.vocab_size is 0, expected 1 to 50304"},
      {"vocab_size", "50305", "args.vocab_size is 50305, expected 1 to 50304"},
      {"--layernorm-epsilon", "0", "args.--layernorm-epsilon is 0"},
      {"--layernorm-epsilon", "-1e-5", "args.--layernorm-epsilon is -1e-05"},
      {"--layernorm-epsilon", "\"x\"", "args.--layernorm-epsilon is not a number"},
      {"--init-method-std", "-0.02", "args.--init-method-std is -0.02"},
      {"--disable-bias-linear", "1", "args.--disable-bias-linear is not true or false"},
      {"precision", "\"fp8\"", "args.precision is 'fp8', expected one of fp32, bf16, fp16"},
      {"gelu", "\"relu\"", "args.gelu is 'relu', expected one of tanh, exact"},
      {"--normalization", "\"BatchNorm\"", "args.--normalization is 'BatchNorm'"},
  };
  for (const Case& c : cases) {
    const std::string ckpt = copy_of_fixture("model_values");
    set_metadata(ckpt, "args", c.key, c.value);
    const std::string e = model_error(ckpt);
    EXPECT_NE(e.find(metadata_path(ckpt) + ": " + c.expected), std::string::npos)
        << c.key << " = " << c.value << ": " << e;
  }
  const std::string ckpt = copy_of_fixture("model_values");
  set_metadata(ckpt, "args", "--num-layers", std::nullopt);
  EXPECT_NE(model_error(ckpt).find("args.--num-layers is missing"), std::string::npos);
}

TEST(CheckpointContents, EveryTrainingStateValueIsRangeChecked) {
  struct Case {
    std::string object, key, value, expected;
  };
  const std::vector<Case> cases = {
      {"", "iteration", "5", "iteration is 5 but the directory holds iteration 2"},
      {"", "iteration", "-1", "iteration is -1"},
      {"", "consumed_train_samples", "-4", "consumed_train_samples is -4, expected 0 to"},
      {"", "consumed_train_samples", "4611686018427387904", "consumed_train_samples is 4611686018427387904"},
      {"", "consumed_valid_samples", "-1", "consumed_valid_samples is -1"},
      {"", "optimizer_steps", "3", "optimizer_steps is 3, expected 0 to 2"},
      {"", "optimizer_steps", "-1", "optimizer_steps is -1"},
      {"", "format", "\"other\"", "format is 'other'"},
      {"grad_scaler", "scale", "0", "grad_scaler.scale is 0"},
      {"grad_scaler", "scale", "1e300", "grad_scaler.scale is 1e+300"},
      {"grad_scaler", "growth_tracker", "-1", "grad_scaler.growth_tracker is -1"},
      {"scheduler", "num_steps", "-1", "scheduler.num_steps is -1"},
      {"scheduler", "num_steps", "9223372036854775807", "scheduler.num_steps is 9223372036854775807"},
      {"scheduler", "max_lr", "-0.5", "scheduler.max_lr is -0.5"},
      {"scheduler", "lr_decay_steps", "-3", "scheduler.lr_decay_steps is -3"},
      {"scheduler", "lr_warmup_steps", "1e300", "scheduler.lr_warmup_steps is 1e+300"},
      {"scheduler", "lr_decay_style", "\"sawtooth\"", "scheduler.lr_decay_style is 'sawtooth'"},
      {"scheduler", "wd_incr_style", "7", "scheduler.wd_incr_style is not a string"},
  };
  for (const Case& c : cases) {
    const std::string ckpt = copy_of_fixture("state_values");
    set_metadata(ckpt, c.object, c.key, c.value);
    // The iteration and format are the model's concern too; the rest the state's only.
    const std::string e = state_error(ckpt);
    EXPECT_NE(e.find(metadata_path(ckpt) + ": " + c.expected), std::string::npos)
        << c.key << " = " << c.value << ": " << e;
  }
}

TEST(CheckpointContents, TheTensorsMustBeTheRecordedModels) {
  {
    // A 2-layer checkpoint that says 1 layer: the second layer's tensors are not consumed.
    const std::string ckpt = copy_of_fixture("tensors");
    set_metadata(ckpt, "args", "--num-layers", "1");
    EXPECT_NE(model_error(ckpt).find("tensor 'decoder.layers.1."), std::string::npos) << model_error(ckpt);
    EXPECT_NE(model_error(ckpt).find("is not part of the model"), std::string::npos);
  }
  {
    // ... and 3 layers: the third layer's are missing.
    const std::string ckpt = copy_of_fixture("tensors");
    set_metadata(ckpt, "args", "--num-layers", "3");
    EXPECT_NE(model_error(ckpt).find("tensor 'decoder.layers.2.input_layernorm.weight' is missing"), std::string::npos)
        << model_error(ckpt);
  }
  {
    // model.safetensors rewritten without one tensor, or with one more.
    const std::string ckpt = copy_of_fixture("tensors");
    const std::string path = ckpt + "/iter_0000002/model.safetensors";
    std::vector<uint8_t> keep;
    std::vector<ckpt::TensorToWrite> without, with_extra;
    {
      const ckpt::SafetensorsFile file(path);
      keep.assign(file.tensors()[0].data, file.tensors()[0].data + file.tensors()[0].bytes);
      for (const ckpt::SafetensorsTensor& t : file.tensors()) {
        ckpt::TensorToWrite w{t.name, t.dtype, t.shape, nullptr};
        without.push_back(w);
      }
    }
    // Data: zeros of each size (the values do not matter here).
    std::vector<std::vector<uint8_t>> data;
    {
      const ckpt::SafetensorsFile file(path);
      for (const ckpt::SafetensorsTensor& t : file.tensors()) data.emplace_back(static_cast<size_t>(t.bytes), 0);
    }
    for (size_t i = 0; i < without.size(); ++i) without[i].data = data[i].data();
    with_extra = without;
    ckpt::TensorToWrite extra = without.back();
    extra.name = "decoder.layers.0.self_attention.rotary.inv_freq";
    with_extra.push_back(extra);
    const std::string dropped = without[3].name;
    without.erase(without.begin() + 3);
    ckpt::write_safetensors(path, without);
    EXPECT_NE(model_error(ckpt).find("tensor '" + dropped + "' is missing"), std::string::npos) << model_error(ckpt);
    ckpt::write_safetensors(path, with_extra);
    EXPECT_NE(
        model_error(ckpt).find("tensor 'decoder.layers.0.self_attention.rotary.inv_freq' is not part of the model"),
        std::string::npos)
        << model_error(ckpt);
  }
  {
    // The optimizer file: a state without its parameter.
    const std::string ckpt = copy_of_fixture("tensors");
    const std::string path = ckpt + "/iter_0000002/optimizer.safetensors";
    std::vector<ckpt::TensorToWrite> tensors;
    std::vector<std::vector<uint8_t>> data;
    {
      const ckpt::SafetensorsFile file(path);
      for (const ckpt::SafetensorsTensor& t : file.tensors()) {
        data.emplace_back(static_cast<size_t>(t.bytes), 0);
        tensors.push_back({t.name, t.dtype, t.shape, nullptr});
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = data[i].data();
    tensors[0].name = "exp_avg.decoder.layers.9.mlp.linear_fc1.weight";
    ckpt::write_safetensors(path, tensors);
    EXPECT_NE(model_error(ckpt).find("is not the optimizer state of a model tensor"), std::string::npos)
        << model_error(ckpt);
  }
}

TEST(CheckpointContents, NonFiniteValuesAreFound) {
  const float f32[4] = {1.0f, -2.0f, std::nanf(""), 3.0f};
  EXPECT_EQ(ckpt::first_non_finite(f32, DType::kF32, 4), 2);
  EXPECT_EQ(ckpt::first_non_finite(f32, DType::kF32, 2), -1);
  const float inf = INFINITY;
  EXPECT_EQ(ckpt::first_non_finite(&inf, DType::kF32, 1), 0);
  const uint16_t bf16[3] = {float_to_bf16(1.0f), float_to_bf16(-INFINITY), float_to_bf16(65504.0f)};
  EXPECT_EQ(ckpt::first_non_finite(bf16, DType::kBF16, 3), 1);
  const uint16_t f16[3] = {float_to_fp16(65504.0f), float_to_fp16(-1.0f), float_to_fp16(NAN)};
  EXPECT_EQ(ckpt::first_non_finite(f16, DType::kF16, 3), 2);
  EXPECT_EQ(ckpt::first_non_finite(f16, DType::kF16, 2), -1);  // the largest fp16 is finite
}

TEST(CheckpointContents, NanWeightsAreRefusedByTheLoaders) {
  const std::string ckpt = copy_of_fixture("nan");
  const std::string path = ckpt + "/iter_0000002/model.safetensors";
  int64_t offset = 0;
  {
    const ckpt::SafetensorsFile file(path);
    offset = file.at("decoder.layers.1.mlp.linear_fc2.weight").offset + 4 * 5;
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    const float nan = std::nanf("");
    f.write(reinterpret_cast<const char*>(&nan), 4);
  }
  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(ckpt);
  EXPECT_NE(test::error_of([&] {
              ckpt::check_all_finite(ck);
            }).find("model.safetensors: tensor 'decoder.layers.1.mlp.linear_fc2.weight' holds NaN or Inf (element 5)"),
            std::string::npos);
  const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);  // the shapes are fine
  model::ParameterSet params;
  model::GPTModel::declare_stage_parameters(cm.config, model::PipelineStageOptions{}, &params);
  std::unique_ptr<backend::Backend> cpu = backend::make_cpu_backend();
  params.allocate(*cpu, DType::kF32);
  EXPECT_NE(
      test::error_of([&] { ckpt::load_checkpoint_weights(ck, params, *cpu); }).find("holds NaN or Inf (element 5"),
      std::string::npos);
}

TEST(CheckpointContents, TheCommandsRefuseWhatTheLibraryRefuses) {
  const std::string ckpt = copy_of_fixture("commands");
  set_metadata(ckpt, "args", "--num-layers", "1");
  const std::string vocab = " --vocab-file " + test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file();
  const std::string hf = fixture() + "/commands_hf";
  for (const std::string& command :
       {"checkpoint-info " + ckpt, "generate --load " + ckpt + " --prompt the --max-new-tokens 2 --device cpu" + vocab,
        "convert --load " + ckpt + " --save-hf " + hf, "convert --load " + ckpt + " --save " + hf + "_re"}) {
    const test::CommandResult r = test::run_command(test::megatron_binary() + " " + command + " 2>&1 >/dev/null");
    EXPECT_EQ(r.status, 1) << command << "\n" << r.output;
    EXPECT_NE(r.output.find("error: " + ckpt + "/iter_0000002/model.safetensors: tensor 'decoder.layers.1."),
              std::string::npos)
        << command << "\n"
        << r.output;
  }
  EXPECT_FALSE(fs::exists(hf));  // nothing written
  EXPECT_FALSE(fs::exists(hf + "_re"));
}

}  // namespace
}  // namespace megatron::ckpt
