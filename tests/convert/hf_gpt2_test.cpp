// Hugging Face GPT-2 interop (convert/hf_gpt2.h):
//   - the fused-QKV column map on the header's worked example;
//   - export -> import -> export on a trained tiny checkpoint (tests/train/tiny_training.h): the
//     imported weights equal the original bit for bit (the dummy vocabulary rows zero), the two
//     exports are byte-identical, and the imported (release) checkpoint trains;
//   - against an independent reference: tests/convert/hf_gpt2_reference.py writes a random GPT-2 in
//     HF's own layout with numpy, we import it, export it again, and run our CPU model (training
//     forward and the KV-cache generator) on it; the script checks that the export equals its
//     input bit for bit and that a numpy statement of transformers' GPT-2 forward, run on the
//     exported config.json + model.safetensors, gives our logits and loss (tolerance justified
//     in the script), for the tanh GELU (gelu_new; GPT2LMHeadModel's "transformer." names with an
//     old-style mask buffer and a tied lm_head.weight to skip) and the exact one (gelu; the hub's
//     bare GPT2Model names);
//   - what does not map is refused with one line.
#include "convert/hf_gpt2.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/gpt_generator.h"
#include "model/gpt_model.h"
#include "support/paths.h"
#include "train/tiny_training.h"

namespace megatron::convert {
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

TEST(HfGpt2, QkvColumnsFollowTheWorkedExample) {
  // h = 4, H = 2, d = 2: our rows q0 q0 k0 k0 v0 v0 q1 q1 k1 k1 v1 v1 -> HF columns.
  const int64_t expected[12] = {0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11};
  for (int64_t r = 0; r < 12; ++r) EXPECT_EQ(convert::hf_qkv_column(r, 2, 2), expected[r]) << "row " << r;
}

void expect_round_trip(const std::string& name, const std::vector<std::string>& precision) {
  const std::string dir = test::scratch_dir(name);
  test::write_tiny_corpus(dir);
  std::vector<std::string> flags = precision;
  for (const std::string& f : {std::string("--save"), dir + "/ck", std::string("--save-interval"), std::string("3")})
    flags.push_back(f);
  test::train_tiny(dir, flags);

  const convert::HfExportResult e = convert::export_hf_gpt2(dir + "/ck", std::nullopt, dir + "/hf");
  EXPECT_EQ(e.iteration, 3);
  EXPECT_EQ(e.tensors, 2 + 2 * 12 + 2);
  const ckpt::SafetensorsFile hf(dir + "/hf/model.safetensors");
  EXPECT_EQ(hf.metadata().at("format"), "pt");
  EXPECT_EQ(hf.at("transformer.wte.weight").shape, (std::vector<int64_t>{40, 16}));
  EXPECT_EQ(hf.at("transformer.h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(hf.at("transformer.h.1.mlp.c_fc.weight").shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(hf.at("transformer.h.1.mlp.c_proj.weight").shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(hf.find("lm_head.weight"), nullptr) << "tied: HF takes it from wte";
  // One element of each mapping, by hand: fc1 [f, h] -> c_fc [h, f]; QKV row of k, head 1.
  {
    const ckpt::LoadedCheckpoint ck = ckpt::load_checkpoint_dir(dir + "/ck");
    const int64_t es = dtype_size(hf.at("transformer.wte.weight").dtype);
    const ckpt::SafetensorsTensor& fc1 = ck.model().at("decoder.layers.1.mlp.linear_fc1.weight");
    const ckpt::SafetensorsTensor& c_fc = hf.at("transformer.h.1.mlp.c_fc.weight");
    EXPECT_EQ(std::memcmp(fc1.data + (5 * 16 + 3) * es, c_fc.data + (3 * 64 + 5) * es, es), 0);
    const ckpt::SafetensorsTensor& qkv = ck.model().at("decoder.layers.0.self_attention.linear_qkv.weight");
    const ckpt::SafetensorsTensor& c_attn = hf.at("transformer.h.0.attn.c_attn.weight");
    // head 1 (d = 8), k (t = 1), e = 2: our row 1*24 + 8 + 2 = 34; HF column 16 + 8 + 2 = 26.
    EXPECT_EQ(std::memcmp(qkv.data + (34 * 16 + 7) * es, c_attn.data + (7 * 48 + 26) * es, es), 0);
  }
  const std::string config = read_file(dir + "/hf/config.json");
  for (const char* field : {"\"n_embd\": 16", "\"n_layer\": 2", "\"n_head\": 2", "\"n_positions\": 8",
                            "\"vocab_size\": 40", "\"activation_function\": \"gelu_new\"", "\"n_inner\": null",
                            "\"layer_norm_epsilon\": 1e-05", "\"tie_word_embeddings\": true"}) {
    EXPECT_NE(config.find(field), std::string::npos) << field << " in\n" << config;
  }

  convert::HfImportOptions o;
  o.make_vocab_size_divisible_by = 16;
  const convert::HfImportResult imp = convert::import_hf_gpt2(dir + "/hf", dir + "/imported", o);
  EXPECT_EQ(imp.padded_vocab_size, 48);
  const std::optional<ckpt::TrackerInfo> tracker = ckpt::read_tracker(dir + "/imported");
  ASSERT_TRUE(tracker.has_value());
  EXPECT_TRUE(tracker->release);
  const ckpt::LoadedCheckpoint a = ckpt::load_checkpoint_dir(dir + "/ck"),
                               b = ckpt::load_checkpoint_dir(dir + "/imported");
  EXPECT_EQ(b.optimizer(), nullptr);
  ASSERT_EQ(a.model().tensors().size(), b.model().tensors().size());
  for (const ckpt::SafetensorsTensor& ta : a.model().tensors()) {
    const ckpt::SafetensorsTensor& tb = b.model().at(ta.name);
    ASSERT_EQ(ta.shape, tb.shape) << ta.name;
    ASSERT_EQ(ta.dtype, tb.dtype) << ta.name;
    const int64_t same = ta.name == "embedding.word_embeddings.weight" ? 40 * 16 * dtype_size(ta.dtype) : ta.bytes;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, same), 0) << ta.name;
    for (int64_t i = same; i < tb.bytes; ++i) ASSERT_EQ(tb.data[i], 0) << ta.name << ": dummy rows are zero";
  }
  const ckpt::CheckpointModel ma = ckpt::read_checkpoint_model(a), mb = ckpt::read_checkpoint_model(b);
  EXPECT_EQ(mb.dtype, ma.dtype);
  EXPECT_EQ(mb.config.hidden_size, 16);
  EXPECT_EQ(mb.config.padded_vocab_size, 48);
  EXPECT_EQ(mb.config.seq_length, 8);
  EXPECT_EQ(mb.config.layernorm_epsilon, ma.config.layernorm_epsilon);

  convert::export_hf_gpt2(dir + "/imported", std::nullopt, dir + "/hf2");
  EXPECT_TRUE(read_file(dir + "/hf/model.safetensors") == read_file(dir + "/hf2/model.safetensors"));
  EXPECT_EQ(read_file(dir + "/hf/config.json"), read_file(dir + "/hf2/config.json"));

  // The imported release checkpoint starts a run at iteration 0 (weights only).
  std::vector<std::string> resume = precision;
  for (const std::string& f :
       {std::string("--load"), dir + "/imported", std::string("--train-iters"), std::string("2")})
    resume.push_back(f);
  const std::string log = test::train_tiny(dir, resume);
  EXPECT_NE(log.find("successfully loaded checkpoint from " + dir + "/imported at iteration 0"), std::string::npos)
      << log;
  EXPECT_NE(log.find(" iteration        2/       2 |"), std::string::npos) << log;
}

TEST(HfGpt2, ExportImportExportIsBitExactFp32) { expect_round_trip("hf_round_trip_fp32", {}); }

TEST(HfGpt2, ExportImportExportIsBitExactBf16) { expect_round_trip("hf_round_trip_bf16", {"--bf16"}); }

// Our CPU model on the imported weights vs the numpy GPT-2 (see the header and the script).
void expect_matches_reference(const std::string& name, const std::string& activation) {
  const std::string dir = test::scratch_dir(name);
  const std::string script = test::source_dir() + "/tests/convert/hf_gpt2_reference.py";
  const test::CommandResult made =
      test::run_command("/usr/bin/python3 " + script + " make " + dir + " " + activation, true);
  ASSERT_EQ(made.status, 0) << made.output;

  convert::HfImportOptions o;
  o.make_vocab_size_divisible_by = 16;  // 48 ids: no dummy rows, so our softmax is HF's
  const convert::HfImportResult imp = convert::import_hf_gpt2(dir + "/hf_in", dir + "/ck", o);
  ASSERT_EQ(imp.padded_vocab_size, imp.vocab_size);
  convert::export_hf_gpt2(dir + "/ck", std::nullopt, dir + "/hf_out");

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
  ASSERT_EQ(logits.device(), Device::kCPU);
  std::vector<float> bsv(static_cast<size_t>(B * S * V));
  for (int64_t bi = 0; bi < B; ++bi) {
    for (int64_t si = 0; si < S; ++si) {
      std::memcpy(&bsv[static_cast<size_t>((bi * S + si) * V)], logits.data_as<float>() + (si * B + bi) * logits.dim(1),
                  static_cast<size_t>(V) * sizeof(float));
    }
  }
  model::GPTGenerator gen(cm.config, m.parameters(), *backend, S);
  const std::vector<float> last = gen.append(std::span<const int32_t>(mb.tokens.data(), static_cast<size_t>(S)));

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
       tensor("generator_logits", DType::kF32, {static_cast<int64_t>(last.size())}, last.data())});
  const test::CommandResult checked = test::run_command("/usr/bin/python3 " + script + " check " + dir, true);
  EXPECT_EQ(checked.status, 0) << checked.output;
  std::cout << checked.output;
}

TEST(HfGpt2, MatchesNumpyReferenceTanhGelu) { expect_matches_reference("hf_reference_gelu_new", "gelu_new"); }

TEST(HfGpt2, MatchesNumpyReferenceExactGelu) { expect_matches_reference("hf_reference_gelu", "gelu"); }

TEST(HfGpt2, RefusesWhatDoesNotMap) {
  const std::string dir = test::scratch_dir("hf_refuse");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, {"--save", dir + "/untied", "--train-iters", "1", "--lr-warmup-iters", "0",
                         "--untie-embeddings-and-output-weights"});
  EXPECT_EQ(error_of([&] { convert::export_hf_gpt2(dir + "/untied", std::nullopt, dir + "/out"); }),
            "[--save-hf] the checkpoint has an untied output layer (checkpoint " + dir +
                "/untied/iter_0000001; Hugging Face GPT-2 has no such option)");
  EXPECT_FALSE(fs::exists(dir + "/out"));

  test::train_tiny(dir, {"--save", dir + "/ck", "--train-iters", "1", "--lr-warmup-iters", "0"});
  convert::export_hf_gpt2(dir + "/ck", std::nullopt, dir + "/hf");
  const std::string config = read_file(dir + "/hf/config.json");
  auto import_with = [&](const std::string& from, const std::string& to) {
    fs::remove_all(dir + "/bad");
    fs::create_directories(dir + "/bad");
    fs::copy_file(dir + "/hf/model.safetensors", dir + "/bad/model.safetensors");
    std::string c = config;
    c.replace(c.find(from), from.size(), to);
    write_file(dir + "/bad/config.json", c);
    return error_of([&] { convert::import_hf_gpt2(dir + "/bad", dir + "/out", {}); });
  };
  const std::string bad = dir + "/bad/config.json";
  EXPECT_EQ(import_with("\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true"),
            bad + ": scale_attn_by_inverse_layer_idx true is not supported");
  EXPECT_EQ(import_with("\"model_type\": \"gpt2\"", "\"model_type\": \"llama\""),
            bad + ": model_type \"llama\" is not supported (only \"gpt2\")");
  EXPECT_EQ(import_with("\"gelu_new\"", "\"relu\""),
            bad + ": activation_function \"relu\" is not supported (gelu_new, gelu_pytorch_tanh, gelu)");
  EXPECT_EQ(import_with("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false"),
            bad + ": tie_word_embeddings false (an untied lm_head) is not supported");
  EXPECT_EQ(
      import_with("\"n_embd\": 16", "\"n_embd\": 32"),
      dir + "/bad/model.safetensors: tensor 'transformer.wte.weight' has shape [40,16], config.json implies [40,32]");
  EXPECT_EQ(error_of([&] { convert::import_hf_gpt2(dir + "/nothing", dir + "/out", {}); }),
            "[--load-hf] " + dir + "/nothing/config.json does not exist (a Hugging Face model directory is expected)");
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

}  // namespace
}  // namespace megatron::convert
