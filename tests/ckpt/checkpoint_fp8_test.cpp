// FP8 scaling state in checkpoints (ckpt/checkpoint_fp8.h), on the CPU backend's FP8 emulation
// with the tiny GPT of tests/train/tiny_training.h in --bf16:
//   - delayed scaling (hybrid, history 4) and tensorwise: 6 iterations straight equal 3 + save +
//     resume + 3 bit for bit (every iteration line: loss, grad norm, LR, loss scale; the
//     validation at 6), and the saved fp8_state.safetensors are byte-equal at 3 and at 6. The
//     state must matter for this to test anything: the same delayed resume without the file
//     (fresh scales) logs other losses. Evaluation runs at 3, before the save, so the amaxes its
//     forwards record are part of what resumes;
//   - the file holds Transformer Engine's state: each scale is fp8_max / the newest amax of its
//     history (most_recent), scale_inv its inverse, the history rolled as TE rolls it;
//   - the FP8 args are recorded; a resume under another recipe or format, or from a checkpoint
//     without FP8 state, starts fresh scaling state with a note; another history length cuts or
//     extends the histories; a run without FP8 loads an FP8 checkpoint;
//   - a malformed file is a one-line error naming it;
//   - under mpirun: PP2 (each stage's layers gathered to rank 0) and DP2 (evaluation before the
//     save) resume bit for bit, through the async and the streamed saves; a TP2
//     checkpoint converted to TP1 carries the file byte for byte and resumes in one process
//     with the state loaded.
#include "ckpt/checkpoint_fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint_contents.h"
#include "ckpt/checkpoint_io.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/gpt_model.h"
#include "support/parity_runs.h"
#include "support/paths.h"
#include "support/walk_corpus.h"
#include "train/tiny_training.h"

namespace megatron::ckpt {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kDelayed = {"--bf16",  "--fp8-format",           "hybrid", "--fp8-recipe",
                                           "delayed", "--fp8-amax-history-len", "4",      "--eval-interval",
                                           "3",       "--train-iters",          "6"};
const std::vector<std::string> kTensorwise = {
    "--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise", "--eval-interval", "3", "--train-iters", "6"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Iteration lines without the fields that depend on the clock: iteration -> the rest.
std::map<int64_t, std::string> numbers(const std::string& log) {
  std::map<int64_t, std::string> lines;
  static const std::regex it(R"( iteration +(\d+)/)");
  static const std::regex clock(
      R"(^ \[[^\]]*\]| elapsed time per iteration \(ms\): [0-9.]+ \|| tokens per second: \d+ \| ETA: [0-9:]+ \|)");
  std::istringstream in(log);
  std::string s;
  while (std::getline(in, s)) {
    std::smatch m;
    if (s.find("consumed samples") == std::string::npos || !std::regex_search(s, m, it)) continue;
    lines[std::stoll(m[1])] = std::regex_replace(s, clock, "");
  }
  return lines;
}

std::string validation(const std::string& log, const std::string& at) {
  const size_t p = log.find(" validation loss at iteration " + at + " |");
  return p == std::string::npos ? std::string("missing") : log.substr(p, log.find('\n', p) - p);
}

std::string fp8_file(const std::string& ckpt_dir, int64_t iteration) {
  return ckpt_dir + "/" + iteration_dir_name(iteration) + "/" + kFp8StateFileName;
}

struct Resumed {
  std::string full, first, second;
};

// 6 iterations straight (saving at 3 and 6), and 3 + save + resume + 3 (saving at 3 and 6).
Resumed straight_and_resumed(const std::string& dir, const std::vector<std::string>& recipe) {
  Resumed r;
  r.full = test::train_tiny(dir, with(recipe, {"--save", dir + "/straight", "--save-interval", "3"}));
  r.first = test::train_tiny(dir, with(recipe, {"--save", dir + "/a", "--save-interval", "3", "--exit-interval", "3"}));
  r.second = test::train_tiny(dir, with(recipe, {"--load", dir + "/a", "--save", dir + "/b", "--save-interval", "3"}));
  return r;
}

// *dir_out := the scratch directory (checkpoints "a" saved at 3, "straight" at 3 and 6).
void expect_resume_is_exact(const std::string& name, const std::vector<std::string>& recipe,
                            std::string* dir_out = nullptr) {
  const std::string dir = test::scratch_dir(name);
  if (dir_out != nullptr) *dir_out = dir;
  test::write_tiny_corpus(dir);
  const Resumed r = straight_and_resumed(dir, recipe);
  EXPECT_NE(r.second.find("successfully loaded checkpoint from " + dir + "/a at iteration 3"), std::string::npos)
      << r.second;
  EXPECT_EQ(r.second.find("FP8 starts with fresh scaling state"), std::string::npos) << r.second;
  const auto want = numbers(r.full), got_a = numbers(r.first), got_b = numbers(r.second);
  ASSERT_EQ(want.size(), 6u) << r.full;
  ASSERT_EQ(got_a.size(), 3u) << r.first;
  ASSERT_EQ(got_b.size(), 3u) << r.second;
  for (const auto& [i, line] : got_a) EXPECT_EQ(line, want.at(i)) << "iteration " << i;
  for (const auto& [i, line] : got_b) EXPECT_EQ(line, want.at(i)) << "iteration " << i << " after resume";
  EXPECT_EQ(validation(r.second, "6"), validation(r.full, "6"));
  EXPECT_NE(validation(r.full, "6"), "missing");
  // The state's bytes: at the save point, and after the resumed iterations.
  EXPECT_EQ(test::read_file(fp8_file(dir + "/a", 3)), test::read_file(fp8_file(dir + "/straight", 3)));
  EXPECT_EQ(test::read_file(fp8_file(dir + "/b", 6)), test::read_file(fp8_file(dir + "/straight", 6)));
  EXPECT_EQ(test::read_file(dir + "/b/iter_0000006/model.safetensors"),
            test::read_file(dir + "/straight/iter_0000006/model.safetensors"));
}

TEST(CheckpointFp8, DelayedScalingResumesBitExactly) {
  std::string dir;
  expect_resume_is_exact("ckpt_fp8_delayed", kDelayed, &dir);
  // Without the state the resume differs: the test above needs the file.
  fs::copy(dir + "/a", dir + "/c", fs::copy_options::recursive);
  fs::remove(fp8_file(dir + "/c", 3));
  const std::string fresh = test::train_tiny(dir, with(kDelayed, {"--load", dir + "/c"}));
  EXPECT_NE(fresh.find(" > the checkpoint holds no FP8 scaling state: FP8 starts with fresh scaling state (scales 1, "
                       "amax histories 0)\n"),
            std::string::npos)
      << fresh;
  const std::string full = test::train_tiny(dir, kDelayed);
  ASSERT_EQ(numbers(fresh).count(4), 1u) << fresh;
  EXPECT_NE(numbers(fresh).at(4), numbers(full).at(4)) << "fresh scales must change iteration 4";
}

TEST(CheckpointFp8, TensorwiseScalingResumesBitExactly) { expect_resume_is_exact("ckpt_fp8_tensorwise", kTensorwise); }

// Delayed, history 4, most_recent, margin 0, after 3 updates and the evaluation at 3: per
// operand, history = [eval's amax (forward operands; 0 for the output gradient), a1, a2, a3]
// (TE's roll), scale = fp8_max / a3, scale_inv = 1 / scale.
TEST(CheckpointFp8, FileHoldsTransformerEnginesDelayedState) {
  const std::string dir = test::scratch_dir("ckpt_fp8_contents");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, with(kDelayed, {"--save", dir + "/a", "--save-interval", "3", "--exit-interval", "3"}));
  const LoadedCheckpoint ck = load_checkpoint_dir(dir + "/a");
  const std::optional<Fp8StateInfo> info = read_fp8_state_info(ck, 2);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->recipe, backend::Fp8Recipe::kDelayed);
  EXPECT_EQ(info->format, backend::Fp8Mix::kHybrid);
  EXPECT_EQ(info->history_len, 4);
  const SafetensorsFile& f = ck.tensor_files.at(kFp8StateFileName);
  EXPECT_EQ(f.tensors().size(), 2u * 4 * 3);
  EXPECT_EQ(f.metadata().at("fp8_recipe"), "delayed");
  EXPECT_EQ(f.metadata().at("fp8_format"), "hybrid");
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* linear :
         {"self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2"}) {
      const std::string base = "decoder.layers." + std::to_string(layer) + "." + linear;
      const SafetensorsTensor& h = f.at(base + ".fp8_amax_history");
      ASSERT_EQ(h.shape, (std::vector<int64_t>{4, 3}));
      const auto* hist = reinterpret_cast<const float*>(h.data);
      const auto* scale = reinterpret_cast<const float*>(f.at(base + ".fp8_scale").data);
      const auto* scale_inv = reinterpret_cast<const float*>(f.at(base + ".fp8_scale_inv").data);
      for (int r = 0; r < 3; ++r) {
        const float fp8_max = r == 2 ? 57344.0f : 448.0f;  // hybrid: E5M2 for the output gradient
        for (int row = 1; row < 4; ++row) EXPECT_GT(hist[row * 3 + r], 0.0f) << base << " row " << row << " " << r;
        EXPECT_EQ(scale[r], fp8_max / hist[3 * 3 + r]) << base << " operand " << r;
        EXPECT_EQ(scale_inv[r], 1.0f / scale[r]) << base << " operand " << r;
        if (r < 2) {
          EXPECT_GT(hist[r], 0.0f) << base << ": the evaluation's amax of operand " << r;
        } else {
          EXPECT_EQ(hist[r], 0.0f) << base << ": no backward in the evaluation";
        }
      }
    }
  }
  const std::string meta = test::read_file(ck.directory + "/metadata.json");
  for (const char* arg : {R"("--fp8-format": "hybrid")", R"("--fp8-recipe": "delayed")", R"("--fp8-margin": 0)",
                          R"("--fp8-amax-history-len": 4)", R"("--fp8-amax-compute-algo": "most_recent")"}) {
    EXPECT_NE(meta.find(arg), std::string::npos) << arg << "\n" << meta;
  }
}

TEST(CheckpointFp8, ResumeUnderOtherFp8FlagsFollowsTransformerEngine) {
  const std::string dir = test::scratch_dir("ckpt_fp8_args");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, with(kDelayed, {"--save", dir + "/a", "--save-interval", "3", "--exit-interval", "3"}));
  const std::string load = dir + "/a";

  const std::string recipe = test::train_tiny(dir, with(kTensorwise, {"--load", load}));
  EXPECT_NE(recipe.find("    --fp8-recipe: \"delayed\" -> \"tensorwise\"\n"), std::string::npos) << recipe;
  EXPECT_NE(recipe.find(" > the checkpoint's FP8 scaling state is for --fp8-format hybrid --fp8-recipe delayed, "
                        "this run's hybrid tensorwise: FP8 starts with fresh scaling state (scales 1, amax histories "
                        "0)\n"),
            std::string::npos)
      << recipe;

  const std::string format = test::train_tiny(dir, with(kDelayed, {"--fp8-format", "e4m3", "--load", load}));
  EXPECT_NE(format.find("    --fp8-format: \"hybrid\" -> \"e4m3\"\n"), std::string::npos) << format;
  EXPECT_NE(format.find("is for --fp8-format hybrid --fp8-recipe delayed, this run's e4m3 delayed: FP8 starts with "
                        "fresh scaling state"),
            std::string::npos)
      << format;

  // Another history length: cut (TE keeps rows [0, L)) or zero-extended.
  const std::string longer = test::train_tiny(dir, with(kDelayed, {"--fp8-amax-history-len", "6", "--load", load}));
  EXPECT_NE(longer.find(" > the checkpoint's FP8 amax histories of 4 entries are extended with zero entries to 6 "
                        "(--fp8-amax-history-len, as Transformer Engine adjusts them)\n"),
            std::string::npos)
      << longer;
  const std::string shorter = test::train_tiny(dir, with(kDelayed, {"--fp8-amax-history-len", "2", "--load", load}));
  EXPECT_NE(shorter.find("amax histories of 4 entries are cut to their first 2"), std::string::npos) << shorter;
  EXPECT_EQ(numbers(shorter).size(), 3u) << shorter;

  // Margin and algorithm: the state is kept (no note), the new values apply from the next update.
  const std::string margin = test::train_tiny(dir, with(kDelayed, {"--fp8-margin", "1", "--load", load}));
  EXPECT_NE(margin.find("    --fp8-margin: 0 -> 1\n"), std::string::npos) << margin;
  EXPECT_EQ(margin.find("fresh scaling state"), std::string::npos) << margin;

  // A checkpoint without FP8 into an FP8 run, and an FP8 checkpoint into a run without.
  test::train_tiny(dir, {"--bf16", "--eval-interval", "3", "--train-iters", "6", "--save", dir + "/plain",
                         "--save-interval", "3", "--exit-interval", "3"});
  const std::string into_fp8 = test::train_tiny(dir, with(kDelayed, {"--load", dir + "/plain"}));
  EXPECT_NE(into_fp8.find(" > the checkpoint holds no FP8 scaling state: FP8 starts with fresh scaling state"),
            std::string::npos)
      << into_fp8;
  EXPECT_NE(into_fp8.find("    --fp8-format: (absent) -> \"hybrid\"\n"), std::string::npos) << into_fp8;
  const std::string without =
      test::train_tiny(dir, {"--bf16", "--eval-interval", "3", "--train-iters", "6", "--load", load});
  EXPECT_NE(without.find("successfully loaded checkpoint from " + load + " at iteration 3"), std::string::npos)
      << without;
  EXPECT_EQ(without.find("FP8"), std::string::npos) << without;
}

// Rewrites `path` with `tensors` (the file's own, edited) and its FP8 metadata.
void rewrite(const std::string& path, const std::function<void(std::vector<TensorToWrite>&, StringMap&)>& edit) {
  const std::string bytes = test::read_file(path);  // the map below goes away with the file
  std::vector<std::vector<uint8_t>> data;
  std::vector<TensorToWrite> tensors;
  StringMap meta;
  {
    const SafetensorsFile f(path);
    meta = {{"fp8_format", f.metadata().at("fp8_format")}, {"fp8_recipe", f.metadata().at("fp8_recipe")}};
    for (const SafetensorsTensor& t : f.tensors()) data.emplace_back(t.data, t.data + t.bytes);
    size_t i = 0;
    for (const SafetensorsTensor& t : f.tensors()) {
      TensorToWrite w;
      w.name = t.name;
      w.dtype = t.dtype;
      w.shape = t.shape;
      w.data = data[i++].data();
      tensors.push_back(std::move(w));
    }
  }
  edit(tensors, meta);
  write_safetensors(path, tensors, meta);
}

TEST(CheckpointFp8, MalformedStateIsAOneLineErrorNamingTheFile) {
  const std::string dir = test::scratch_dir("ckpt_fp8_bad");
  test::write_tiny_corpus(dir);
  test::train_tiny(dir, with(kDelayed, {"--save", dir + "/a", "--save-interval", "3", "--exit-interval", "3"}));
  const std::string good = fp8_file(dir + "/a", 3);
  struct Case {
    const char* what;
    std::function<void(std::vector<TensorToWrite>&, StringMap&)> edit;
    std::string error;
  };
  std::vector<float> wide(5 * 3, 1.0f);
  const std::vector<Case> cases = {
      {"missing tensor",
       [](std::vector<TensorToWrite>& t, StringMap&) {
         std::erase_if(t, [](const TensorToWrite& w) { return w.name == "decoder.layers.1.mlp.linear_fc2.fp8_scale"; });
       },
       "fp8_state.safetensors: tensor 'decoder.layers.1.mlp.linear_fc2.fp8_scale' is missing (the model has 2 "
       "layers)"},
      {"history lengths differ",
       [&](std::vector<TensorToWrite>& t, StringMap&) {
         for (TensorToWrite& w : t) {
           if (w.name == "decoder.layers.1.self_attention.linear_qkv.fp8_amax_history") {
             w.shape = {5, 3};
             w.data = wide.data();
           }
         }
       },
       "fp8_state.safetensors: tensor 'decoder.layers.1.self_attention.linear_qkv.fp8_amax_history' has shape [5,3], "
       "expected [4,3] (the other histories')"},
      {"extra tensor",
       [&](std::vector<TensorToWrite>& t, StringMap&) {
         TensorToWrite w = t.front();
         w.name = "decoder.layers.2.mlp.linear_fc1.fp8_scale";
         t.push_back(w);
       },
       "fp8_state.safetensors: tensor 'decoder.layers.2.mlp.linear_fc1.fp8_scale' is not FP8 state of the model's 2 "
       "layers"},
      {"unknown recipe", [](std::vector<TensorToWrite>&, StringMap& m) { m["fp8_recipe"] = "mxfp8"; },
       "fp8_state.safetensors: __metadata__ fp8_recipe is 'mxfp8', expected tensorwise or delayed"},
  };
  for (const Case& c : cases) {
    const std::string bad = dir + "/bad";
    fs::remove_all(bad);
    fs::copy(dir + "/a", bad, fs::copy_options::recursive);
    rewrite(fp8_file(bad, 3), c.edit);
    try {
      read_checkpoint_model(load_checkpoint_dir(bad));
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m, bad + "/iter_0000003/" + c.error) << c.what;
      EXPECT_EQ(m.find('\n'), std::string::npos) << c.what;
    }
  }
  // The file as saved is accepted by every reader, and a run refuses a malformed one.
  EXPECT_NO_THROW(read_checkpoint_model(load_checkpoint_dir(dir + "/a")));
  EXPECT_THROW(test::train_tiny(dir, with(kDelayed, {"--load", dir + "/bad"})), Error);
}

// Under mpirun (the megatron binary), on the walk corpus's parity GPT.
std::vector<std::string> parity_flags(const std::string& dir) {
  return test::with(test::tiny_train_flags(dir, 2, "0"),
                    {"--fp8-format", "hybrid", "--fp8-recipe", "delayed", "--fp8-amax-history-len", "4",
                     "--fp8-amax-compute-algo", "max"});
}

// Straight 10 iterations vs 5 + save (--async-save) + resume + 5 (the streamed save) under
// `layout` on `np` ranks: the same losses and grad norms, and the same FP8 state files.
void expect_parallel_resume_is_exact(const std::string& name, const std::vector<std::string>& layout, int np) {
  const std::string dir = test::scratch_dir(name);
  test::write_walk_corpus(dir);
  std::vector<std::string> base = parity_flags(dir);
  base.insert(base.end(), layout.begin(), layout.end());
  const test::CommandResult whole = test::run_ranks(
      test::with(base, {"--save", dir + "/whole", "--save-interval", "5", "--log-jsonl", dir + "/whole.jsonl"}), np);
  ASSERT_EQ(whole.status, 0) << whole.output;
  const test::CommandResult first = test::run_ranks(
      test::with(base, {"--save", dir + "/a", "--save-interval", "5", "--exit-interval", "5", "--async-save"}), np);
  ASSERT_EQ(first.status, 0) << first.output;
  const test::CommandResult second =
      test::run_ranks(test::with(base, {"--load", dir + "/a", "--no-ckpt-fully-parallel-save", "--save", dir + "/b",
                                        "--save-interval", "5", "--log-jsonl", dir + "/b.jsonl"}),
                      np);
  ASSERT_EQ(second.status, 0) << second.output;
  const auto ref = test::read_jsonl(dir + "/whole.jsonl"), got = test::read_jsonl(dir + "/b.jsonl");
  ASSERT_EQ(ref.size(), 10u);
  ASSERT_EQ(got.size(), 5u);
  for (const auto& [i, v] : got) {
    EXPECT_EQ(v.loss, ref.at(i).loss) << "iteration " << i;
    EXPECT_EQ(v.grad_norm, ref.at(i).grad_norm) << "iteration " << i;
  }
  EXPECT_EQ(test::read_file(fp8_file(dir + "/a", 5)), test::read_file(fp8_file(dir + "/whole", 5)));
  // The streamed save writes the bytes of the parallel one.
  EXPECT_EQ(test::read_file(fp8_file(dir + "/b", 10)), test::read_file(fp8_file(dir + "/whole", 10)));
}

TEST(CheckpointFp8, PipelineStagesSaveTheirLayersAndResumeBitExactly) {
  expect_parallel_resume_is_exact("ckpt_fp8_pp2", {"--pipeline-model-parallel-size", "2"}, 2);
}

// The validation at 5 runs before the save: its forwards record amaxes of each DP rank's own
// samples, which the save reduces over DP as the next update would.
TEST(CheckpointFp8, DataParallelRanksSaveOneStateAndResumeBitExactly) {
  expect_parallel_resume_is_exact("ckpt_fp8_dp2", {"--eval-interval", "5", "--eval-iters", "2"}, 2);
}

// The save and load address local layers by their global numbers (GPTModel's order, chunk after
// chunk): those of the layers' declared weights.
TEST(CheckpointFp8, StageLayersAreTheDeclaredLayers) {
  model::GPTConfig c;
  c.num_layers = 8;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.padded_vocab_size = c.vocab_size = 32;
  for (int64_t stage = 0; stage < 2; ++stage) {
    model::PipelineStageOptions pipe;
    pipe.pp = 2;
    pipe.stage = stage;
    pipe.virtual_chunks = 2;
    model::ParameterSet declared;
    model::GPTModel::declare_stage_parameters(c, pipe, &declared);
    std::vector<int64_t> layers;
    const std::regex qkv(R"(decoder\.layers\.(\d+)\.self_attention\.linear_qkv\.weight)");
    for (const model::Parameter& p : declared.params()) {
      std::smatch m;
      if (std::regex_match(p.name, m, qkv)) layers.push_back(std::stoll(m[1]));
    }
    EXPECT_EQ(stage_global_layers(c, pipe), layers) << "stage " << stage;
    EXPECT_EQ(layers.size(), 4u);
  }
}

TEST(CheckpointFp8, ReshardCarriesTheStateFromTp2ToTp1) {
  const std::string dir = test::scratch_dir("ckpt_fp8_reshard");
  test::write_walk_corpus(dir);
  const auto base = test::with(parity_flags(dir), {"--make-vocab-size-divisible-by", "128"});
  const test::CommandResult tp2 =
      test::run_ranks(test::with(base, {"--tensor-model-parallel-size", "2", "--save", dir + "/tp2", "--save-interval",
                                        "5", "--log-jsonl", dir + "/tp2.jsonl"}),
                      2);
  ASSERT_EQ(tp2.status, 0) << tp2.output;
  std::string cmd = test::megatron_binary() + " convert --load " + dir + "/tp2 --iteration 5 --save " + dir +
                    "/tp1 --target-tensor-parallel-size 1 --make-vocab-size-divisible-by 256";
  const test::CommandResult conv = test::run_command(cmd, true);
  ASSERT_EQ(conv.status, 0) << conv.output;
  EXPECT_EQ(test::read_file(fp8_file(dir + "/tp1", 5)), test::read_file(fp8_file(dir + "/tp2", 5)));

  const test::CommandResult one = test::run_ranks(test::with(base, {"--make-vocab-size-divisible-by", "256", "--load",
                                                                    dir + "/tp1", "--log-jsonl", dir + "/one.jsonl"}),
                                                  1);
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_EQ(one.output.find("fresh scaling state"), std::string::npos) << one.output;
  // One process quantizes with the TP2 run's scales: its losses are TP2's to the FP8 parity
  // bound of trainer_fp8_parallel_test (1e-4 relative, fp32 addition order tipping FP8 codes).
  const auto ref = test::read_jsonl(dir + "/tp2.jsonl"), got = test::read_jsonl(dir + "/one.jsonl");
  ASSERT_EQ(got.size(), 5u);
  for (const auto& [i, v] : got) EXPECT_NEAR(v.loss, ref.at(i).loss, 1e-4 * ref.at(i).loss) << "iteration " << i;
}

}  // namespace
}  // namespace megatron::ckpt
