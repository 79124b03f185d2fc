// Hugging Face Llama interop (convert/hf_llama.h):
//   - the fused-QKV row map on the header's worked example;
//   - export -> import -> export on trained tiny Llamas (tests/train/tiny_training.h): GQA with 2
//     groups, llama3 rope scaling and an untied output layer in fp32, sharded at a small
//     --max-shard-size; multi-head attention with biases and tied embeddings in bf16. The
//     imported weights equal the original bit for bit (the dummy vocabulary rows zero), the two
//     exports are byte-identical file for file, and the imported (release) checkpoint trains
//     with the same flags;
//   - against an independent reference: tests/convert/hf_llama_reference.py writes a random Llama
//     in HF's own layout with numpy (Llama 3 style: GQA, llama3 scaling, sharded; Llama 2 style:
//     MHA, no scaling, inv_freq buffers; a transformers 5 config: rope_parameters with linear
//     scaling, MQA, biases, tied), we import it, export it again, and run our CPU model (training
//     forward, the KV-cache generator and its greedy continuation); the script checks the export
//     equals its input bit for bit and that its numpy statement of transformers'
//     LlamaForCausalLM gives our logits, loss and greedy tokens (the tolerance, and how far
//     above it the mistakes this is for land, are in the script: q/k rows permuted as
//     convert_llama_weights_to_hf.py does, gate and up swapped, key heads tiled, the llama3 or
//     linear scaling left out);
//   - what does not map is refused with one line naming the field or the file.
#include "convert/hf_llama.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/gpt_generator.h"
#include "model/gpt_model.h"
#include "model/sampling.h"
#include "support/paths.h"
#include "train/tiny_training.h"

namespace megatron::train {
namespace {

namespace fs = std::filesystem;

using test::read_file;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(HfLlama, QkvRowsFollowTheWorkedExample) {
  // H = 4, G = 2, d = 1: our rows q0 q1 k0 v0 q2 q3 k1 v1.
  const convert::HfQkvRow expected[8] = {{0, 0}, {0, 1}, {1, 0}, {2, 0}, {0, 2}, {0, 3}, {1, 1}, {2, 1}};
  for (int64_t r = 0; r < 8; ++r) {
    const convert::HfQkvRow got = convert::hf_llama_qkv_row(r, 4, 2, 1);
    EXPECT_EQ(got.which, expected[r].which) << "row " << r;
    EXPECT_EQ(got.row, expected[r].row) << "row " << r;
  }
  // Multi-head attention (G = H): per head q, k, v.
  EXPECT_EQ(convert::hf_llama_qkv_row(5, 2, 2, 2).which, 2);  // head 0's v, row 1
  EXPECT_EQ(convert::hf_llama_qkv_row(5, 2, 2, 2).row, 1);
}

// The Llama flags of the round trips (hidden 16, 4 heads of 4, FFN 24, 8 positions).
const std::vector<std::string> kLlama = {"--num-attention-heads",
                                         "4",
                                         "--swiglu",
                                         "--ffn-hidden-size",
                                         "24",
                                         "--normalization",
                                         "RMSNorm",
                                         "--position-embedding-type",
                                         "rope",
                                         "--attention-dropout",
                                         "0",
                                         "--hidden-dropout",
                                         "0"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<std::string> files_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_round_trip(const std::string& name, const std::vector<std::string>& model_flags, int64_t shard_bytes,
                       int64_t expected_shards) {
  const std::string dir = test::scratch_dir(name);
  test::write_tiny_corpus(dir);
  const std::vector<std::string> flags = with(kLlama, model_flags);
  test::train_tiny(dir, with(flags, {"--save", dir + "/ck", "--save-interval", "3"}));

  convert::HfLlamaExportOptions eo;
  eo.max_shard_bytes = shard_bytes;
  eo.eos_token_id = "39";
  const convert::HfLlamaExportResult e = convert::export_hf_llama(dir + "/ck", std::nullopt, dir + "/hf", eo);
  EXPECT_EQ(e.iteration, 3);
  EXPECT_EQ(e.shards, expected_shards);
  const ckpt::LoadedCheckpoint a = ckpt::load_checkpoint_dir(dir + "/ck");
  const ckpt::CheckpointModel ma = ckpt::read_checkpoint_model(a);
  const bool tied = !ma.config.untie_embeddings_and_output_weights, bias = ma.config.add_bias_linear;
  EXPECT_EQ(e.tensors, 1 + 2 * (9 + (bias ? 7 : 0)) + 1 + (tied ? 0 : 1));
  const std::string config = read_file(dir + "/hf/config.json");
  for (const std::string& field :
       {std::string("\"hidden_size\": 16"), std::string("\"num_attention_heads\": 4"),
        "\"num_key_value_heads\": " + std::to_string(ma.config.query_groups()), std::string("\"head_dim\": 4"),
        std::string("\"intermediate_size\": 24"), std::string("\"vocab_size\": 40"),
        std::string("\"eos_token_id\": 39"), std::string("\"max_position_embeddings\": 8"),
        std::string("\"hidden_act\": \"silu\""), std::string("\"rms_norm_eps\": 1e-05"),
        std::string("\"tie_word_embeddings\": ") + (tied ? "true" : "false"),
        std::string("\"attention_bias\": ") + (bias ? "true" : "false")}) {
    EXPECT_NE(config.find(field), std::string::npos) << field << " in\n" << config;
  }
  if (expected_shards > 1) {
    EXPECT_FALSE(fs::exists(dir + "/hf/model.safetensors"));
    const std::string index = read_file(dir + "/hf/model.safetensors.index.json");
    EXPECT_NE(index.find("\"model.layers.1.self_attn.k_proj.weight\": \"model-"), std::string::npos) << index;
  }

  convert::HfLlamaImportOptions o;
  o.make_vocab_size_divisible_by = 16;
  const convert::HfLlamaImportResult imp = convert::import_hf_llama(dir + "/hf", dir + "/imported", o);
  EXPECT_EQ(imp.padded_vocab_size, 48);
  EXPECT_EQ(imp.num_query_groups, ma.config.query_groups());
  const ckpt::LoadedCheckpoint b = ckpt::load_checkpoint_dir(dir + "/imported");
  EXPECT_TRUE(b.release);
  EXPECT_EQ(b.optimizer(), nullptr);
  ASSERT_EQ(a.model().tensors().size(), b.model().tensors().size());
  for (const ckpt::SafetensorsTensor& ta : a.model().tensors()) {
    const ckpt::SafetensorsTensor& tb = b.model().at(ta.name);
    ASSERT_EQ(ta.shape, tb.shape) << ta.name;
    ASSERT_EQ(ta.dtype, tb.dtype) << ta.name;
    const bool vocab_rows = ta.name == "embedding.word_embeddings.weight" || ta.name == "output_layer.weight";
    const int64_t same = vocab_rows ? 40 * 16 * dtype_size(ta.dtype) : ta.bytes;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, same), 0) << ta.name;
    for (int64_t i = same; i < tb.bytes; ++i) ASSERT_EQ(tb.data[i], 0) << ta.name << ": dummy rows are zero";
  }
  const ckpt::CheckpointModel mb = ckpt::read_checkpoint_model(b);
  EXPECT_EQ(mb.dtype, ma.dtype);
  EXPECT_EQ(mb.config.num_query_groups, ma.config.num_query_groups);
  EXPECT_EQ(mb.config.rotary.base, ma.config.rotary.base);
  EXPECT_EQ(mb.config.rotary.use_rope_scaling, ma.config.rotary.use_rope_scaling);
  EXPECT_EQ(mb.config.rotary.rope_scaling_factor, ma.config.rotary.rope_scaling_factor);
  EXPECT_EQ(mb.config.layernorm_epsilon, ma.config.layernorm_epsilon);
  EXPECT_EQ(mb.config.kv_channels, 4);

  convert::HfLlamaExportOptions eo2;
  eo2.max_shard_bytes = shard_bytes;
  convert::export_hf_llama(dir + "/imported", std::nullopt, dir + "/hf2", eo2);  // eos from the import's record
  ASSERT_EQ(files_of(dir + "/hf"), files_of(dir + "/hf2"));
  for (const std::string& f : files_of(dir + "/hf")) {
    EXPECT_TRUE(read_file(dir + "/hf/" + f) == read_file(dir + "/hf2/" + f)) << f << " differs";
  }

  // The imported release checkpoint starts a run with the same flags (weights only).
  const std::string log = test::train_tiny(dir, with(flags, {"--load", dir + "/imported", "--train-iters", "2"}));
  EXPECT_NE(log.find("successfully loaded checkpoint from " + dir + "/imported at iteration 0"), std::string::npos)
      << log;
  EXPECT_NE(log.find(" iteration        2/       2 |"), std::string::npos) << log;
}

TEST(HfLlama, ExportImportExportIsBitExactGqaLlama3ScalingFp32) {
  // 12 shards at 2 KB: the two vocabulary tensors (40 x 16 x 4 bytes each) alone; per layer
  // q k v | o | gate | up | down and the norms (save_pretrained's greedy cut).
  expect_round_trip(
      "hf_llama_round_trip_fp32",
      {"--group-query-attention", "--num-query-groups", "2", "--rotary-base", "500000", "--use-rope-scaling",
       "--rope-scaling-factor", "8", "--untie-embeddings-and-output-weights", "--disable-bias-linear"},
      2048, 12);
}

TEST(HfLlama, ExportImportExportIsBitExactBiasesTiedBf16) {
  expect_round_trip("hf_llama_round_trip_bf16", {"--bf16", "--rotary-seq-len-interpolation-factor", "2"},
                    convert::kDefaultMaxShardBytes, 1);
}

// Our CPU model on the imported weights vs the numpy Llama (see the header and the script).
void expect_matches_reference(const std::string& variant) {
  const std::string dir = test::scratch_dir("hf_llama_reference_" + variant);
  const std::string script = test::source_dir() + "/tests/convert/hf_llama_reference.py";
  const test::CommandResult made =
      test::run_command("/usr/bin/python3 " + script + " make " + dir + " " + variant, true);
  ASSERT_EQ(made.status, 0) << made.output;

  convert::HfLlamaImportOptions o;
  o.make_vocab_size_divisible_by = 16;  // 48 ids: no dummy rows, so our softmax is HF's
  o.seq_length = 16;
  const convert::HfLlamaImportResult imp = convert::import_hf_llama(dir + "/hf_in", dir + "/ck", o);
  ASSERT_EQ(imp.padded_vocab_size, imp.vocab_size);
  convert::export_hf_llama(dir + "/ck", std::nullopt, dir + "/hf_out");

  const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(dir + "/ck");
  const ckpt::CheckpointModel cm = ckpt::read_checkpoint_model(ck);
  ASSERT_EQ(cm.dtype, DType::kF32);
  const int64_t B = 2, S = cm.config.seq_length, V = cm.config.vocab_size;
  ASSERT_EQ(S, 16);
  auto backend = backend::make_cpu_backend();
  model::GPTModel m(cm.config, *backend, DType::kF32, B);
  ckpt::load_checkpoint_weights(ck, m.parameters(), *backend);
  model::MicroBatch mb;
  mb.batch = B;
  mb.seq = S;
  uint32_t state = 12345;
  auto next_id = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(V));
  };
  for (int64_t i = 0; i < B * S; ++i) mb.tokens.push_back(next_id());
  for (int64_t i = 0; i < B * S; ++i) mb.labels.push_back(next_id());
  mb.loss_mask.assign(static_cast<size_t>(B * S), 1.0f);
  model::DropoutContext eval;
  eval.training = false;
  const float loss = m.forward(mb, eval);
  const Tensor& logits = m.logits();  // [s*b, V_pad], row si*b + bi
  std::vector<float> bsv(static_cast<size_t>(B * S * V));
  for (int64_t bi = 0; bi < B; ++bi) {
    for (int64_t si = 0; si < S; ++si) {
      std::memcpy(&bsv[static_cast<size_t>((bi * S + si) * V)], logits.data_as<float>() + (si * B + bi) * logits.dim(1),
                  static_cast<size_t>(V) * sizeof(float));
    }
  }
  // The generator (KV cache) on batch 0's tokens, then 8 greedy tokens: positions past the
  // training length, up to 24 of the model's 64.
  constexpr int64_t kGreedy = 8;
  model::GPTGenerator gen(cm.config, m.parameters(), *backend, S + kGreedy);
  const std::vector<float> last = gen.append(std::span<const int32_t>(mb.tokens.data(), static_cast<size_t>(S)));
  std::vector<int32_t> greedy;
  std::vector<float> step = last;
  model::SamplingParams sp;
  sp.temperature = 0.0f;
  for (int64_t i = 0; i < kGreedy; ++i) {
    greedy.push_back(model::sample_token(step, V, sp, static_cast<uint64_t>(i)));
    if (i + 1 < kGreedy) step = gen.append(std::span<const int32_t>(&greedy.back(), 1));
  }

  auto tensor = [](const char* n, DType dt, std::vector<int64_t> shape, const void* data) {
    ckpt::TensorToWrite t;
    t.name = n;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.data = data;
    return t;
  };
  ckpt::write_safetensors(
      dir + "/ours.safetensors",
      {tensor("tokens", DType::kI32, {B, S}, mb.tokens.data()), tensor("labels", DType::kI32, {B, S}, mb.labels.data()),
       tensor("logits", DType::kF32, {B, S, V}, bsv.data()), tensor("loss", DType::kF32, {1}, &loss),
       tensor("generator_logits", DType::kF32, {static_cast<int64_t>(last.size())}, last.data()),
       tensor("greedy", DType::kI32, {kGreedy}, greedy.data())});
  const test::CommandResult checked = test::run_command("/usr/bin/python3 " + script + " check " + dir, true);
  EXPECT_EQ(checked.status, 0) << checked.output;
  std::cout << checked.output;
}

TEST(HfLlama, MatchesNumpyReferenceLlama3Style) { expect_matches_reference("llama3"); }

TEST(HfLlama, MatchesNumpyReferenceLlama2Style) { expect_matches_reference("llama2"); }

TEST(HfLlama, MatchesNumpyReferenceTransformers5Config) { expect_matches_reference("v5"); }

TEST(HfLlama, RefusesWhatDoesNotMap) {
  const std::string dir = test::scratch_dir("hf_llama_refuse");
  test::write_tiny_corpus(dir);
  // A GPT (learned positions), a Llama with --apply-layernorm-1p and one with --qk-layernorm (Hugging
  // Face Llama has no q_norm / k_norm) are not exported as Llama.
  test::train_tiny(dir, {"--save", dir + "/gpt", "--train-iters", "1", "--lr-warmup-iters", "0"});
  EXPECT_EQ(error_of([&] { convert::export_hf_llama(dir + "/gpt", std::nullopt, dir + "/out"); }),
            "[--save-hf] the checkpoint has learned position embeddings (--position-embedding-type); Hugging Face "
            "Llama has rotary ones (checkpoint " +
                dir + "/gpt/iter_0000001; Hugging Face Llama has no such option)");
  test::train_tiny(dir, with(kLlama, {"--save", dir + "/1p", "--train-iters", "1", "--lr-warmup-iters", "0",
                                      "--apply-layernorm-1p"}));
  EXPECT_EQ(error_of([&] { convert::export_hf_llama(dir + "/1p", std::nullopt, dir + "/out"); }),
            "[--save-hf] the checkpoint's norms scale by 1 + weight (--apply-layernorm-1p) (checkpoint " + dir +
                "/1p/iter_0000001; Hugging Face Llama has no such option)");
  test::train_tiny(
      dir, with(kLlama, {"--save", dir + "/qk", "--train-iters", "1", "--lr-warmup-iters", "0", "--qk-layernorm"}));
  EXPECT_EQ(error_of([&] { convert::export_hf_llama(dir + "/qk", std::nullopt, dir + "/out"); }),
            "[--save-hf] the checkpoint normalises each query and key head (--qk-layernorm: q_layernorm, "
            "k_layernorm) (checkpoint " +
                dir + "/qk/iter_0000001; Hugging Face Llama has no such option)");
  EXPECT_FALSE(fs::exists(dir + "/out"));

  test::train_tiny(dir, with(kLlama, {"--save", dir + "/ck", "--train-iters", "1", "--lr-warmup-iters", "0",
                                      "--group-query-attention", "--num-query-groups", "2", "--disable-bias-linear",
                                      "--untie-embeddings-and-output-weights"}));
  convert::export_hf_llama(dir + "/ck", std::nullopt, dir + "/hf");
  const std::string config = read_file(dir + "/hf/config.json");
  const std::string bad = dir + "/bad/config.json";
  // A copy of the export with config.json edited (`from` -> `to`) and the weights given.
  auto import_with = [&](const std::string& from, const std::string& to,
                         const std::function<void(const std::string&)>& weights = {}) {
    fs::remove_all(dir + "/bad");
    fs::create_directories(dir + "/bad");
    if (weights) {
      weights(dir + "/bad");
    } else {
      fs::copy_file(dir + "/hf/model.safetensors", dir + "/bad/model.safetensors");
    }
    std::string c = config;
    if (!from.empty()) {
      const size_t at = c.find(from);
      EXPECT_NE(at, std::string::npos) << from;
      if (at != std::string::npos) c.replace(at, from.size(), to);
    }
    write_file(bad, c);
    return error_of([&] { convert::import_hf_llama(dir + "/bad", dir + "/out", {}); });
  };
  EXPECT_EQ(import_with("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\""),
            bad + ": hidden_act \"gelu\" is not supported (silu)");
  EXPECT_EQ(import_with("\"attention_bias\": false", "\"attention_bias\": true"),
            bad +
                ": attention_bias true with mlp_bias false is not supported (--disable-bias-linear applies to every "
                "linear layer)");
  EXPECT_EQ(import_with("\"model_type\": \"llama\"", "\"model_type\": \"qwen2\""),
            bad +
                ": model_type \"qwen2\" is not supported: Qwen2's q/k/v projections have biases and its other "
                "linear layers none (Megatron's --add-qkv-bias), which this model has no option for");
  EXPECT_EQ(import_with("\"model_type\": \"llama\"", "\"model_type\": \"gemma\""),
            bad + ": model_type \"gemma\" is not supported (llama, mistral)");
  EXPECT_EQ(import_with("\"LlamaForCausalLM\"", "\"LlamaForSequenceClassification\""),
            bad +
                ": architectures LlamaForSequenceClassification is not supported (LlamaForCausalLM, "
                "MistralForCausalLM: a causal language model)");
  EXPECT_EQ(import_with("\"num_hidden_layers\": 2,", ""), bad + ": num_hidden_layers is missing");
  EXPECT_EQ(import_with("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"),
            bad + ": num_key_value_heads 3 does not divide num_attention_heads 4");
  EXPECT_EQ(import_with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}"),
            bad + ": rope_scaling.rope_type \"yarn\" is not supported (default, llama3, linear)");
  EXPECT_EQ(
      import_with("\"rope_scaling\": null",
                  "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 2.0, "
                  "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}"),
      bad + ": rope_scaling.low_freq_factor 2.0 is not supported (Megatron's --use-rope-scaling fixes it at 1.0)");
  EXPECT_EQ(import_with("\"rope_scaling\": null",
                        "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 4096}"),
            bad +
                ": rope_scaling.original_max_position_embeddings 4096.0 is not supported (Megatron's "
                "--use-rope-scaling fixes it at 8192.0)");
  EXPECT_EQ(import_with("\"rope_scaling\": null",
                        "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0, "
                        "\"beta\": 1.0}"),
            bad + ": rope_scaling.beta is not supported for rope_type \"linear\"");
  EXPECT_EQ(import_with("\"pretraining_tp\": 1", "\"partial_rotary_factor\": 0.5"),
            bad + ": partial_rotary_factor is not supported (Llama rotates whole heads)");
  EXPECT_EQ(
      import_with("\"model_type\": \"llama\"", "\"model_type\": \"mistral\", \"sliding_window\": 4"),
      bad + ": sliding_window 4 is less than max_position_embeddings 8 (sliding-window attention is not supported)");
  EXPECT_EQ(
      import_with("\"hidden_size\": 16", "\"hidden_size\": 32"),
      dir +
          "/bad/model.safetensors: tensor 'model.embed_tokens.weight' has shape [40,16], config.json implies [40,32]");
  EXPECT_EQ(import_with("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true"),
            dir +
                "/bad/model.safetensors: lm_head.weight differs from model.embed_tokens.weight but config.json has "
                "tie_word_embeddings true");
  // Weights: a missing tensor, an extra one, a sharded index naming a missing shard.
  const ckpt::SafetensorsFile hf(dir + "/hf/model.safetensors");
  auto rewrite = [&](const std::string& path, const std::string& drop, const std::string& add) {
    std::vector<ckpt::TensorToWrite> ts;
    for (const ckpt::SafetensorsTensor& t : hf.tensors()) {
      if (t.name == drop) continue;
      ckpt::TensorToWrite w;
      w.name = t.name;
      w.dtype = t.dtype;
      w.shape = t.shape;
      w.data = t.data;
      ts.push_back(w);
      if (!add.empty() && t.name == "model.norm.weight") {
        w.name = add;
        ts.push_back(w);
      }
    }
    ckpt::write_safetensors(path, ts);
  };
  EXPECT_EQ(import_with("", "",
                        [&](const std::string& d) {
                          rewrite(d + "/model.safetensors", "model.layers.1.mlp.up_proj.weight", "");
                        }),
            dir + "/bad/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' is missing");
  EXPECT_EQ(
      import_with("", "",
                  [&](const std::string& d) { rewrite(d + "/model.safetensors", "", "model.layers.0.q_norm.weight"); }),
      dir +
          "/bad/model.safetensors: unexpected tensor 'model.layers.0.q_norm.weight' (not part of a "
          "LlamaForCausalLM of config.json's shape)");
  EXPECT_EQ(
      import_with(
          "", "",
          [&](const std::string& d) {
            write_file(
                d + "/model.safetensors.index.json",
                "{\"metadata\": {}, \"weight_map\": {\"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}");
            fs::remove(d + "/model.safetensors");
          }),
      dir + "/bad/model.safetensors.index.json: shard model-00001-of-00002.safetensors does not exist in " + dir +
          "/bad");
  EXPECT_EQ(import_with("", "", [&](const std::string&) {}),
            "[--load-hf] " + dir +
                "/bad holds neither model.safetensors nor model.safetensors.index.json (pickle .bin "
                "files are not read; save with safetensors)");
  // Llama 3.1's 131072 positions, more than any dimension: a rotary model has no position table.
  EXPECT_EQ(import_with("\"max_position_embeddings\": 8", "\"max_position_embeddings\": 131072"), "no error");
  {
    const ckpt::CheckpointModel long_context = ckpt::read_checkpoint_model(ckpt::load_checkpoint_dir(dir + "/out"));
    EXPECT_EQ(long_context.config.max_position_embeddings, 131072);
    EXPECT_EQ(long_context.config.seq_length, 131072);  // the default: --seq-length sets another
    fs::remove_all(dir + "/out");
  }
  EXPECT_EQ(error_of([&] { convert::import_hf_llama(dir + "/nothing", dir + "/out", {}); }),
            "[--load-hf] " + dir + "/nothing/config.json does not exist (a Hugging Face model directory is expected)");
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

}  // namespace
}  // namespace megatron::train
