// `megatron convert` and `megatron generate` with Hugging Face Llamas from the command line: a
// random Llama with a SentencePiece tokenizer.model (cli/hf_llama_fixture.h) imports with its
// tokenizer recorded and copied, `generate` needs no tokenizer flag, prepends <s> (its greedy text
// differs from the same run without BOS), stops at config.json's eos_token_id, takes and prints
// token ids with --token-ids and its --dump-logits match the numpy Llama, a tokenizer.json's
// template gives the BOS, and `--save-hf`
// gives the tokenizer and the token ids back; a trained Llama exports in shards; wrong flag
// combinations are one-line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/safetensors.h"
#include "cli/hf_llama_fixture.h"
#include "support/paths.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;

test::CommandResult tool(const std::string& command, const std::string& flags) {
  return test::run_command(test::megatron_binary() + " " + command + " " + flags, true);
}

TEST(ConvertCommandLlama, ImportedLlamaGeneratesWithItsTokenizerAndExportsItBack) {
  const std::string dir = test::scratch_dir("convert_command_llama");
  ASSERT_EQ(test::make_hf_llama(dir, "llama2", "llama2"), "");
  test::CommandResult r = tool("convert", "--load-hf " + dir + "/llama2/hf_in --save " + dir + "/ck");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string abs = fs::absolute(dir).lexically_normal().string();
  EXPECT_NE(r.output.find("imported Hugging Face LlamaForCausalLM (2 layers, hidden 48, 4 heads, 4 key/value heads, "
                          "rope_theta 10000.0): 15 tensors, padded vocab 64 -> 128"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tokenizer: Llama2Tokenizer " + abs + "/ck/release/tokenizer.model"), std::string::npos)
      << r.output;
  EXPECT_TRUE(test::read_file(dir + "/ck/release/tokenizer.model") == test::read_file(dir + "/sp.model"));

  r = tool("generate", "--load " + dir + "/ck --prompt 'the cat' --max-new-tokens 6 --temperature 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("the cat", 0), 0u) << r.output;
  const test::CommandResult no_bos =
      tool("generate", "--load " + dir +
                           "/ck --prompt 'the cat' --max-new-tokens 6 --temperature 0 --tokenizer-type "
                           "SentencePieceTokenizer --tokenizer-model " +
                           dir + "/sp.model");
  ASSERT_EQ(no_bos.status, 0) << no_bos.output;
  EXPECT_NE(r.output, no_bos.output) << "<s> first changes what a random model continues with";
  const test::CommandResult sampled = tool(
      "generate", "--load " + dir + "/ck --prompt 'the cat' --max-new-tokens 6 --temperature 1 --top-k 5 --seed 3");
  ASSERT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_EQ(sampled.output, tool("generate", "--load " + dir +
                                                 "/ck --prompt 'the cat' --max-new-tokens 6 "
                                                 "--temperature 1 --top-k 5 --seed 3")
                                .output);

  r = tool("convert", "--load " + dir + "/ck --save-hf " + dir + "/hf_out");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exported iteration 0 as Hugging Face LlamaForCausalLM: 21 tensors in 1 file, vocab 64 "
                          "(64 dummy rows dropped), 1 tokenizer files"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(test::read_file(dir + "/hf_out/tokenizer.model") == test::read_file(dir + "/sp.model"));
  const std::string config = test::read_file(dir + "/hf_out/config.json");
  EXPECT_NE(config.find("\"bos_token_id\": 1,"), std::string::npos) << config;
  EXPECT_NE(config.find("\"eos_token_id\": 2,"), std::string::npos) << config;
  // Token ids in and out, and the logits after each token against the numpy Llama.
  r = tool("generate", "--load " + dir +
                           "/ck --token-ids --prompt '1 5 9 33' --max-new-tokens 5 --temperature 0 "
                           "--dump-logits " +
                           dir + "/dump.safetensors");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("1 5 9 33 ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), ' '), 3 + 5) << r.output;
  const test::CommandResult checked =
      test::run_command("/usr/bin/python3 " + test::source_dir() + "/tests/convert/hf_llama_reference.py check-dump " +
                            dir + "/llama2/hf_in " + dir + "/dump.safetensors",
                        true);
  EXPECT_EQ(checked.status, 0) << checked.output;
  r = tool("generate", "--load " + dir + "/ck --token-ids --prompt '1 64'");
  EXPECT_EQ(r.output, "error: [--prompt] token id 64 is outside the vocabulary of 64\n");
  // The export imports again with the same result.
  r = tool("convert", "--load-hf " + dir + "/hf_out --save " + dir + "/ck2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(tool("generate", "--load " + dir + "/ck2 --prompt 'the cat' --max-new-tokens 6 --temperature 0").output,
            tool("generate", "--load " + dir + "/ck --prompt 'the cat' --max-new-tokens 6 --temperature 0").output);
}

// Llama 3's kind of tokenizer: a tokenizer.json whose post-processor puts <bos> first.
TEST(ConvertCommandLlama, ATokenizerJsonIsRecordedAndItsTemplateGivesTheBos) {
  const std::string dir = test::scratch_dir("convert_command_llama_hf_tokenizer");
  ASSERT_EQ(test::make_hf_llama(dir, "llama", "llama2", /*byte_level=*/true), "");
  test::CommandResult r = tool("convert", "--load-hf " + dir + "/llama/hf_in --save " + dir + "/ck");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string abs = fs::absolute(dir).lexically_normal().string();
  EXPECT_NE(r.output.find("tokenizer: HuggingFaceTokenizer " + abs + "/ck/release\n"), std::string::npos) << r.output;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(test::read_file(dir + "/ck/release/" + f) == test::read_file(dir + "/llama/hf_in/" + f)) << f;
  }
  r = tool("generate", "--load " + dir + "/ck --prompt 'ab' --max-new-tokens 3 --temperature 0 --dump-logits " + dir +
                           "/dump.safetensors");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("ab", 0), 0u) << r.output;
  const ckpt::SafetensorsFile dump(dir + "/dump.safetensors");
  const ckpt::SafetensorsTensor& tokens = dump.at("prompt.0.tokens");
  ASSERT_EQ(tokens.shape, std::vector<int64_t>({2}));
  int32_t ids[2];
  std::memcpy(ids, tokens.data, sizeof(ids));
  EXPECT_EQ(ids[0], 258) << "<bos> once, from the template";
  EXPECT_EQ(ids[1], 256) << "\"ab\" merged";
  r = tool("convert", "--load " + dir + "/ck --save-hf " + dir + "/hf_out");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(", 2 tokenizer files"), std::string::npos) << r.output;
  EXPECT_TRUE(test::read_file(dir + "/hf_out/tokenizer.json") == test::read_file(dir + "/llama/hf_in/tokenizer.json"));
}

TEST(ConvertCommandLlama, GenerationStopsAtTheConfigsEosTokenId) {
  const std::string dir = test::scratch_dir("convert_command_llama_stop");
  ASSERT_EQ(test::make_hf_llama(dir, "stop", "stop"), "");
  test::CommandResult r = tool("convert", "--load-hf " + dir + "/stop/hf_in --save " + dir + "/ck");
  ASSERT_EQ(r.status, 0) << r.output;
  // Its greedy token is always 5, config.json's eos_token_id [5]: nothing is added.
  r = tool("generate", "--load " + dir + "/ck --prompt 'the cat' --max-new-tokens 5 --temperature 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "the cat\n");
}

// A Llama trained here with Llama2Tokenizer records its tokenizer.model: generate and --save-hf
// need no tokenizer flag.
TEST(ConvertCommandLlama, ATrainedLlamaFindsTheTokenizerItWasTrainedWith) {
  const std::string dir = test::scratch_dir("convert_command_llama_sp_trained");
  const std::string sp = test::sentencepiece_model(dir);
  ASSERT_TRUE(fs::exists(sp)) << sp;
  {
    std::ofstream jsonl(dir + "/corpus.jsonl");
    for (int d = 0; d < 20; ++d) jsonl << "{\"text\": \"the cat sat on the mat and the dog ran in the park.\"}\n";
  }
  test::CommandResult r =
      tool("preprocess", "--input " + dir + "/corpus.jsonl --output-prefix " + dir +
                             "/c --tokenizer-type Llama2Tokenizer --tokenizer-model " + sp + " --append-eod");
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("train",
           "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 "
           "--global-batch-size 2 --train-iters 2 --lr 0.001 --log-interval 1 --eval-interval 1000 --eval-iters 1 "
           "--split 100,0,0 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
           "--make-vocab-size-divisible-by 16 --device cpu --data-path " +
               dir +
               "/c_text_document "
               "--data-cache-path " +
               dir + "/cache --save " + dir +
               "/ck --tokenizer-type Llama2Tokenizer "
               "--tokenizer-model " +
               sp);
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("generate", "--load " + dir + "/ck --prompt 'the cat' --max-new-tokens 3 --temperature 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("the cat", 0), 0u) << r.output;
  r = tool("convert", "--load " + dir + "/ck --save-hf " + dir + "/hf");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(test::read_file(dir + "/hf/tokenizer.model") == test::read_file(sp));
  const std::string config = test::read_file(dir + "/hf/config.json");
  EXPECT_NE(config.find("\"bos_token_id\": 1,"), std::string::npos) << config;
  EXPECT_NE(config.find("\"eos_token_id\": 2,"), std::string::npos) << config;
}

// A Llama trained with GPT-2's BPE exports its vocabulary for transformers' GPT2Tokenizer.
TEST(ConvertCommandLlama, AGpt2BpeLlamaExportsVocabMergesAndTheirTokenizerClass) {
  const std::string dir = test::scratch_dir("convert_command_llama_gpt2");
  {
    std::ofstream jsonl(dir + "/corpus.jsonl");
    for (int d = 0; d < 20; ++d) jsonl << "{\"text\": \"the cat sat on the mat. the dog sat on the log.\"}\n";
  }
  const std::string vocab = " --vocab-file " + test::gpt2_vocab_file() + " --merge-file " + test::gpt2_merge_file();
  test::CommandResult r = tool("preprocess", "--input " + dir + "/corpus.jsonl --output-prefix " + dir +
                                                 "/c --tokenizer-type GPT2BPETokenizer --append-eod" + vocab);
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("train",
           "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 "
           "--global-batch-size 2 --train-iters 2 --lr 0.001 --log-interval 1 --eval-interval 1000 --eval-iters 1 "
           "--split 100,0,0 --swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
           "--device cpu --data-path " +
               dir + "/c_text_document --data-cache-path " + dir + "/cache --save " + dir + "/ck" + vocab);
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("convert", "--load " + dir + "/ck --save-hf " + dir + "/hf" + vocab);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(", 3 tokenizer files"), std::string::npos) << r.output;
  EXPECT_TRUE(test::read_file(dir + "/hf/vocab.json") == test::read_file(test::gpt2_vocab_file()));
  EXPECT_TRUE(test::read_file(dir + "/hf/merges.txt") == test::read_file(test::gpt2_merge_file()));
  EXPECT_NE(test::read_file(dir + "/hf/tokenizer_config.json").find("\"tokenizer_class\": \"GPT2Tokenizer\""),
            std::string::npos);
  const std::string config = test::read_file(dir + "/hf/config.json");
  EXPECT_NE(config.find("\"bos_token_id\": 50256,"), std::string::npos) << config;
  EXPECT_NE(config.find("\"eos_token_id\": 50256,"), std::string::npos) << config;
}

TEST(ConvertCommandLlama, TrainedLlamaExportsInShardsAndFlagsAreChecked) {
  const std::string dir = test::scratch_dir("convert_command_llama_train");
  test::CommandResult r =
      tool("train",
           "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 "
           "--micro-batch-size 2 --global-batch-size 2 --train-iters 2 --lr 0.001 --log-interval 1 --eval-iters 1 "
           "--device cpu --mock-data --tokenizer-type NullTokenizer --vocab-size 8000 --split 99,1,0 --swiglu "
           "--normalization RMSNorm --position-embedding-type rope --group-query-attention --num-query-groups 2 "
           "--disable-bias-linear --untie-embeddings-and-output-weights --save " +
               dir + "/ck --save-interval 2");
  ASSERT_EQ(r.status, 0) << r.output;
  r = tool("convert", "--load " + dir + "/ck --save-hf " + dir + "/hf --max-shard-size 100KB");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("as Hugging Face LlamaForCausalLM: 21 tensors in "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: no tokenizer files written"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/hf/model.safetensors.index.json"));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir + "/hf"))
    shards += e.path().filename().string().rfind("model-", 0) == 0;
  EXPECT_GT(shards, 4) << "the vocabulary tensors (2 MB) alone, the layers in pieces of at most 100 KB";

  auto error = [&](const std::string& flags) { return tool("convert", flags).output; };
  EXPECT_EQ(error("--load " + dir + "/ck --save-hf " + dir + "/x --max-shard-size 5XB"),
            "error: [--max-shard-size] expected a size such as 5GB, 500MB, 2GiB or a number of bytes, got '5XB'\n");
  EXPECT_EQ(error("--load " + dir + "/ck --save " + dir + "/x --max-shard-size 5GB"),
            "error: [--max-shard-size] applies to --save-hf only\n");
  EXPECT_EQ(error("--load " + dir + "/ck --save " + dir + "/x --tokenizer-type Llama2Tokenizer"),
            "error: [--tokenizer-type] does not apply to resharding (the checkpoint's records are kept)\n");
  EXPECT_EQ(error("--load " + dir + "/ck --save-hf " + dir + "/x --tokenizer-type TikTokenizer --tokenizer-model x"),
            "error: [--tokenizer-type] TikTokenizer has no Hugging Face tokenizer files (export without the tokenizer "
            "flags)\n");
  EXPECT_FALSE(fs::exists(dir + "/x"));
}

}  // namespace
}  // namespace megatron
