// End-to-end tests of data/preprocess.h and `megatron preprocess`: worker-count
// invariance, Encoder.encode semantics (sentences, --append-eod, empty documents),
// several --json-keys, bad input (file:line, no files left), --skip-invalid-lines,
// compressed input and the CLI's flag checks. Byte equality with Megatron itself is
// checked by preprocess_reference_test.py (node + numpy reference).
#include "data/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer/gpt2_bpe_tokenizer.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

using test::read_file;

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

const GPT2BPETokenizer& tokenizer() {
  static const GPT2BPETokenizer tok(test::gpt2_vocab_file(), test::gpt2_merge_file());
  return tok;
}

std::vector<int32_t> encode(const std::string& text) {
  std::vector<int32_t> ids;
  tokenizer().encode(text, &ids);
  return ids;
}

PreprocessOptions options_for(const std::string& input, const std::string& prefix) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.vocab_file = test::gpt2_vocab_file();
  o.tokenizer.merge_file = test::gpt2_merge_file();
  o.progress = nullptr;
  o.info = nullptr;
  return o;
}

// The first `n` Brown documents, with lists of sentences and empty documents mixed in.
std::string brown_corpus(int n) {
  std::ifstream f(test::source_dir() + "/data/brown/brown.jsonl");
  std::string line, out;
  for (int i = 0; i < n && std::getline(f, line); ++i) {
    out += line + "\n";
    if (i % 9 == 4) out += "{\"text\": [\"A list of\", \"\", \" sentences.\"], \"id\": " + std::to_string(i) + "}\n";
    if (i % 13 == 6) out += "{\"text\": \"\"}\r\n";
  }
  return out;
}

std::string cli_prefix() {
  return str_cat(test::megatron_binary(), " preprocess --tokenizer-type GPT2BPETokenizer --vocab-file '",
                 test::gpt2_vocab_file(), "' --merge-file '", test::gpt2_merge_file(), "'");
}

// A tokenizer type preprocess does not have is the error, not the files other types need.
TEST(Preprocess, AnUnsupportedTokenizerTypeSaysSo) {
  const std::string dir = test::scratch_dir("preprocess_tokenizer_type");
  write_file(dir + "/in.jsonl", "{\"text\": \"x\"}\n");
  const auto r =
      test::run_command(str_cat(test::megatron_binary(), " preprocess --input '", dir, "/in.jsonl' --output-prefix '",
                                dir, "/out' --tokenizer-type BertWordPieceLowerCase"),
                        true);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(
      r.output.find("error: [--tokenizer-type] 'BertWordPieceLowerCase' is not supported (expected GPT2BPETokenizer|"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--vocab-file"), std::string::npos) << r.output;
}

TEST(Preprocess, OutputDoesNotDependOnWorkerCount) {
  const std::string dir = test::scratch_dir("preprocess_workers");
  write_file(dir + "/in.jsonl", brown_corpus(120));
  std::string reference_bin, reference_idx;
  for (int64_t workers : {1, 2, 4, 7}) {
    PreprocessOptions o = options_for(dir + "/in.jsonl", dir + "/w" + std::to_string(workers));
    o.workers = workers;
    o.append_eod = true;
    o.batch_bytes = 16384;  // many small batches: completion order differs from input order
    const PreprocessStats stats = preprocess_jsonl(o);
    EXPECT_EQ(stats.skipped_lines, 0);
    const std::string prefix = preprocess_output_prefix(o.output_prefix, "text");
    const std::string bin = read_file(prefix + ".bin"), idx = read_file(prefix + ".idx");
    if (workers == 1) {
      reference_bin = bin;
      reference_idx = idx;
      IndexedDataset ds(prefix);
      EXPECT_EQ(ds.document_count(), stats.documents);
      EXPECT_GT(ds.token_count(), 100000);
    } else {
      EXPECT_TRUE(bin == reference_bin) << "workers=" << workers;
      EXPECT_TRUE(idx == reference_idx) << "workers=" << workers;
    }
  }
}

TEST(Preprocess, DocumentsRoundTripToTheirText) {
  // A round trip (docs/design.md, "Tests"): write -> read -> decode gives back the raw text.
  const std::string dir = test::scratch_dir("preprocess_roundtrip");
  const std::string corpus = brown_corpus(30);
  write_file(dir + "/in.jsonl", corpus);
  PreprocessOptions o = options_for(dir + "/in.jsonl", dir + "/out");
  o.workers = 3;
  preprocess_jsonl(o);
  IndexedDataset ds(preprocess_output_prefix(o.output_prefix, "text"));
  std::ifstream f(test::source_dir() + "/data/brown/brown.jsonl");
  std::string line;
  std::getline(f, line);
  const size_t begin = line.find("\"text\":\"") + 8;
  std::vector<int64_t> ids;
  ds.get(0, 0, -1, &ids);
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  const std::string decoded = tokenizer().decode(ids32);
  EXPECT_EQ(decoded.substr(0, 40), line.substr(begin, 40));
  EXPECT_EQ(ids32, encode(decoded));
}

TEST(Preprocess, SentencesEodAndEmptyDocuments) {
  const std::string dir = test::scratch_dir("preprocess_semantics");
  write_file(dir + "/in.jsonl",
             "{\"text\": \"Hello world\"}\n"
             "{\"text\": \"\"}\n"
             "{\"text\": [\"First one.\", \"\", \" Second one.\"]}\n"
             "{\"text\": []}\n"
             "{\"text\": [\"\", \"\"]}\n"
             "{\"text\": \"Last\"}");
  for (bool eod : {false, true}) {
    PreprocessOptions o = options_for(dir + "/in.jsonl", dir + (eod ? "/eod" : "/plain"));
    o.append_eod = eod;
    o.workers = 2;
    const PreprocessStats stats = preprocess_jsonl(o);
    EXPECT_EQ(stats.documents, 6);
    IndexedDataset ds(preprocess_output_prefix(o.output_prefix, "text"));
    EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);  // 50257 < 65500
    ASSERT_EQ(ds.document_count(), 6);
    ASSERT_EQ(ds.sequence_count(), 4);
    // Documents -> sequences: 0 -> [0,1), 1 empty, 2 -> [1,3), 3 and 4 empty, 5 -> [3,4).
    const std::vector<int64_t> expected_doc_idx = {0, 1, 1, 3, 3, 3, 4};
    for (int64_t k = 0; k <= 6; ++k) EXPECT_EQ(ds.document_index(k), expected_doc_idx[static_cast<size_t>(k)]) << k;
    auto seq = [&](int64_t i) {
      std::vector<int64_t> ids;
      ds.get(i, 0, -1, &ids);
      return std::vector<int32_t>(ids.begin(), ids.end());
    };
    auto with_eod = [&](std::vector<int32_t> v, bool add) {
      if (add) v.push_back(tokenizer().eod());
      return v;
    };
    EXPECT_EQ(seq(0), with_eod(encode("Hello world"), eod));
    EXPECT_EQ(seq(1), encode("First one."));  // EOD only on a document's last sentence
    EXPECT_EQ(seq(2), with_eod(encode(" Second one."), eod));
    EXPECT_EQ(seq(3), with_eod(encode("Last"), eod));
    EXPECT_EQ(tokenizer().eod(), 50256);
  }
}

TEST(Preprocess, SeveralJsonKeysEachGetTheirDataset) {
  const std::string dir = test::scratch_dir("preprocess_keys");
  write_file(dir + "/in.jsonl",
             "{\"title\": \"T one\", \"text\": \"Body one\"}\n"
             "{\"text\": [\"Body\", \" two\"], \"title\": \"\"}\n");
  PreprocessOptions o = options_for(dir + "/in.jsonl", dir + "/both");
  o.json_keys = {"text", "title", "text"};  // a repeated key is one dataset, as in Megatron
  o.append_eod = true;
  preprocess_jsonl(o);
  for (const std::string key : {"text", "title"}) {
    PreprocessOptions single = options_for(dir + "/in.jsonl", dir + "/single");
    single.json_keys = {key};
    single.append_eod = true;
    preprocess_jsonl(single);
    for (const std::string ext : {".bin", ".idx"}) {
      EXPECT_EQ(read_file(preprocess_output_prefix(o.output_prefix, key) + ext),
                read_file(preprocess_output_prefix(single.output_prefix, key) + ext))
          << key << ext;
    }
  }
  IndexedDataset title(preprocess_output_prefix(o.output_prefix, "title"));
  EXPECT_EQ(title.document_count(), 2);
  EXPECT_EQ(title.sequence_count(), 1);
}

TEST(Preprocess, BadLinesStopWithFileAndLineAndLeaveNoFiles) {
  struct Case {
    std::string line, reason;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"unterminated}", "invalid JSON: unterminated string"},
      {"{\"text\": \"bad \xFF byte\"}", "invalid UTF-8 at byte 15"},
      {"{\"text\": \"lone \\udc00\"}", "key 'text': lone surrogate \\udc00"},
      {"{\"body\": \"no text key\"}", "missing key 'text' (the line's keys: 'body'; choose them with --json-keys)"},
      {"{\"text\": 42}", "key 'text' is a number"},
      {"{\"text\": [\"ok\", null]}", "key 'text': list element 1 is null"},
      {"", "blank line"},
      {"[\"text\"]", "the JSON value is a list, not an object"},
      {"{\"title\": \"t\", \"text\": \"x\"} trailing", "invalid JSON: extra data at byte 29"},
  };
  const std::string dir = test::scratch_dir("preprocess_bad");
  const std::string good = "{\"text\": \"fine\", \"title\": \"t\"}\n";
  // A previous run's outputs under the same prefix must survive a failed run.
  write_file(dir + "/out_text_document.bin", "old bin");
  write_file(dir + "/out_text_document.idx", "old idx");
  for (const Case& c : cases) {
    write_file(dir + "/in.jsonl", good + good + good + c.line + "\n" + good);
    for (const char* workers : {"1", "3"}) {
      const auto r = test::run_command(str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir,
                                               "/out' --json-keys text title --workers ", workers),
                                       true);
      EXPECT_NE(r.status, 0) << c.line;
      EXPECT_NE(r.output.find(str_cat("error: ", dir, "/in.jsonl:4: ", c.reason)), std::string::npos)
          << "case: " << c.line << "\noutput: " << r.output;
      EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"in.jsonl", "out_text_document.bin", "out_text_document.idx"}))
          << c.line;
    }
  }
  EXPECT_EQ(read_file(dir + "/out_text_document.bin"), "old bin");
  EXPECT_EQ(read_file(dir + "/out_text_document.idx"), "old idx");
}

TEST(Preprocess, SkipInvalidLinesCountsAndReportsThem) {
  const std::string dir = test::scratch_dir("preprocess_skip");
  write_file(dir + "/in.jsonl",
             "{\"text\": \"one\"}\n"
             "not json\n"
             "{\"text\": \"two\"}\n"
             "\n"
             "{\"text\": 7}\n"
             "{\"text\": \"three\"}\n");
  const auto r = test::run_command(str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir,
                                           "/out' --skip-invalid-lines --workers 2"),
                                   true);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("skipped 3 invalid line(s) of " + dir + "/in.jsonl (first: 2, 4, 5; line 2: invalid JSON"),
            std::string::npos)
      << r.output;
  IndexedDataset ds(dir + "/out_text_document");
  EXPECT_EQ(ds.document_count(), 3);
  std::vector<int64_t> ids;
  ds.get(2, 0, -1, &ids);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), encode("three"));
}

// An input whose every line is invalid is no dataset: --skip-invalid-lines then still fails,
// naming the input and the count, and leaves no output behind.
TEST(Preprocess, SkippingEveryLineIsAnError) {
  const std::string dir = test::scratch_dir("preprocess_skip_all");
  write_file(dir + "/in.jsonl", "not json\n{\"other\": \"x\"}\n\n");
  const auto r = test::run_command(
      str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir, "/out' --skip-invalid-lines"),
      true);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(str_cat("error: ", dir,
                                  "/in.jsonl: all 3 lines are invalid and were skipped (line 1: "
                                  "invalid JSON")),
            std::string::npos)
      << r.output;
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"in.jsonl"}));
  // An empty input is an empty dataset, as in Megatron.
  write_file(dir + "/empty.jsonl", "");
  PreprocessOptions o = options_for(dir + "/empty.jsonl", dir + "/empty");
  o.skip_invalid_lines = true;
  EXPECT_EQ(preprocess_jsonl(o).documents, 0);
  EXPECT_EQ(IndexedDataset(dir + "/empty_text_document").document_count(), 0);
}

TEST(Preprocess, CompressedInputGivesTheSameOutput) {
  const std::string dir = test::scratch_dir("preprocess_compressed");
  write_file(dir + "/in.jsonl", brown_corpus(20));
  const auto plain = test::run_command(
      str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir, "/plain' --append-eod --workers 2"),
      true);
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_NE(plain.output.find("Opening " + dir + "/in.jsonl"), std::string::npos) << plain.output;
  for (const std::string tool : {"gzip", "xz", "zstd -q"}) {
    ASSERT_EQ(test::run_command(str_cat(tool, " -c < '", dir, "/in.jsonl' > '", dir, "/in.z'")).status, 0);
    const auto r = test::run_command(
        str_cat(cli_prefix(), " --input '", dir, "/in.z' --output-prefix '", dir, "/z' --append-eod --workers 2"),
        true);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(read_file(dir + "/z_text_document.bin"), read_file(dir + "/plain_text_document.bin")) << tool;
    EXPECT_EQ(read_file(dir + "/z_text_document.idx"), read_file(dir + "/plain_text_document.idx")) << tool;
  }
  // Truncated: an error naming the file, and no outputs.
  const std::string z = read_file(dir + "/in.z");
  write_file(dir + "/cut.zst", z.substr(0, z.size() / 2));
  const auto r = test::run_command(
      str_cat(cli_prefix(), " --input '", dir, "/cut.zst' --output-prefix '", dir, "/cut' --workers 2"), true);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("error: " + dir + "/cut.zst: corrupt or truncated zstd input"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir + "/cut_text_document.bin"));
  EXPECT_FALSE(fs::exists(dir + "/cut_text_document.idx"));
}

TEST(Preprocess, ProgressLinesFollowMegatron) {
  const std::string dir = test::scratch_dir("preprocess_progress");
  write_file(dir + "/in.jsonl", brown_corpus(10));
  const auto r = test::run_command(str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir,
                                           "/out' --log-interval 4 --workers 2 2>&1 >/dev/null"));
  EXPECT_EQ(r.status, 0);
  // "Processed {count} documents ({docs/s} docs/s, {MB/s} MB/s)." + our percent/ETA.
  EXPECT_NE(r.output.find("Processed 4 documents ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Processed 12 documents ("), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Processed 13 documents"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" MB/s). ["), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("% of input, ETA "), std::string::npos) << r.output;
}

TEST(Preprocess, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1000.0), "1000.0");
  EXPECT_EQ(python_float_repr(2345.678), "2345.678");
  EXPECT_EQ(python_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1.5e16), "1.5e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
}

TEST(Preprocess, MissingInputAndUnsupportedFlagsAreOneLineErrors) {
  const std::string dir = test::scratch_dir("preprocess_flags");
  write_file(dir + "/in.jsonl", "{\"text\": \"x\"}\n");
  const std::string base = str_cat(cli_prefix(), " --input '", dir, "/in.jsonl' --output-prefix '", dir, "/out'");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {str_cat(cli_prefix(), " --input '", dir, "/nope.jsonl' --output-prefix '", dir, "/out'"),
       str_cat("error: ", dir, "/nope.jsonl: cannot open input")},
      {base + " --partitions 2", "error: [--partitions] 2 is not supported yet"},
      {base + " --split-sentences", "error: [--split-sentences] is not supported yet"},
      {base + " --dataset-impl lazy", "error: [--dataset-impl] lazy is not supported"},
      {base + " --workers 0", "error: [--workers] must be at least 1"},
      {base + " --log-interval 0", "error: [--log-interval] must be at least 1"},
      {base + " --tokenizer-model m.model", "error: [--tokenizer-model]"},
      {str_cat(test::megatron_binary(),
               " preprocess --input x --output-prefix y --tokenizer-type "
               "GPTSentencePieceTokenizer --vocab-file v --merge-file m"),
       "error: [--tokenizer-model] is required by --tokenizer-type GPTSentencePieceTokenizer; [--vocab-file] is not "
       "used by --tokenizer-type GPTSentencePieceTokenizer; [--merge-file] is not used"},
      {str_cat(test::megatron_binary(), " preprocess --input x --output-prefix y --tokenizer-type BertWordPieceCase"),
       "error: [--tokenizer-type] 'BertWordPieceCase' is not supported"},
      {str_cat(test::megatron_binary(),
               " preprocess --input x --output-prefix y --tokenizer-type Llama2Tokenizer "
               "--tokenizer-model '",
               dir, "/in.jsonl'"),
       str_cat("error: [--tokenizer-model] ", dir, "/in.jsonl is not a SentencePiece model")},
  };
  for (const auto& [cmd, expected] : cases) {
    const auto r = test::run_command(cmd + " 2>&1 >/dev/null");  // stderr only
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_EQ(r.output.find(expected), 0u) << cmd << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;  // one line
  }
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"in.jsonl"}));
  // Accepted no-op flags of preprocess_data.py.
  const auto ok = test::run_command(base +
                                        " --partitions 1 --dataset-impl mmap --keep-newlines --lang english"
                                        " --keep-sequential-samples --vocab-extra-ids 0",
                                    true);
  EXPECT_EQ(ok.status, 0) << ok.output;
}

}  // namespace
}  // namespace megatron::data
