#include "obs/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "obs/metrics_jsonl.h"
#include "obs/tensorboard_tags.h"
#include "support/paths.h"

namespace megatron::obs {
namespace {

namespace fs = std::filesystem;

std::string from_hex(const std::string& hex) {
  std::string out;
  std::string digits;
  for (char c : hex)
    if (c != ' ') digits.push_back(c);
  for (size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

std::string to_hex(const std::string& bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

using test::read_file;

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// The payloads of a TFRecord file; fails the test on a bad CRC or a cut record. (The
// independent check is tests/obs/tensorboard_reader_test.py; this one is for counting.)
std::vector<std::string> read_records(const std::string& path) {
  const std::string blob = read_file(path);
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < blob.size()) {
    EXPECT_GE(blob.size() - pos, 12u) << "cut header at " << pos;
    if (blob.size() - pos < 12) break;
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(blob[pos + i]);
    EXPECT_EQ(le32(blob, pos + 8), crc32c_mask(crc32c(blob.data() + pos, 8))) << "length CRC at " << pos;
    EXPECT_GE(blob.size() - pos - 12, length + 4) << "cut record at " << pos;
    if (blob.size() - pos - 12 < length + 4) break;
    const std::string data = blob.substr(pos + 12, length);
    EXPECT_EQ(le32(blob, pos + 12 + length), crc32c_mask(crc32c(data))) << "data CRC at " << pos;
    records.push_back(data);
    pos += 12 + length + 4;
  }
  return records;
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// The scalar of docs/megatron-formats.md, "TensorBoard event files" ("lm loss" = 2.5, step 42,
// wall_time 1700000000.5), whose bytes were produced there by python-protobuf 4.21 and TensorFlow's
// framing.
TEST(TensorBoardWriter, EncodesScalarEventLikePythonProtobuf) {
  const std::string event = tensorboard::encode_scalar_event(1700000000.5, 42, "lm loss", 2.5f);
  EXPECT_EQ(to_hex(event),
            "09000020"
            "40fc54d941"
            "102a"
            "2a100a0e0a076c6d206c6f7373"
            "1500002040");
  const std::string record = tensorboard::frame_record(event);
  EXPECT_EQ(to_hex(record),
            "1d00000000000000"
            "602fdf23" +
                to_hex(event) + "f7147a84");
}

TEST(TensorBoardWriter, EncodesFileVersionEvent) {
  // 0x09 + double 1.0 (3ff0000000000000 little-endian) + 0x1a len 13 "brain.Event:2".
  EXPECT_EQ(tensorboard::encode_file_version_event(1.0), from_hex("09 000000000000f03f 1a 0d") + "brain.Event:2");
}

// Varint corners: proto3 leaves out step 0; a negative int64 takes ten bytes; a length >= 128
// takes two; simple_value 0 is still written (oneof member).
TEST(TensorBoardWriter, EncodesVarintCorners) {
  const std::string tail_a = from_hex("2a 0a 0a 08 0a 01") + "a" + from_hex("15 00000000");
  EXPECT_EQ(tensorboard::encode_scalar_event(0.0, 0, "a", 0.0f), tail_a);
  EXPECT_EQ(tensorboard::encode_scalar_event(0.0, 300, "a", 0.0f), from_hex("10 ac 02") + tail_a);
  EXPECT_EQ(tensorboard::encode_scalar_event(0.0, -1, "a", 0.0f),
            from_hex("10 ff ff ff ff ff ff ff ff ff 01") + tail_a);
  EXPECT_EQ(tensorboard::encode_scalar_event(0.0, int64_t{1} << 40, "a", 0.0f),
            from_hex("10 80 80 80 80 80 20") + tail_a);
  const std::string tag(200, 'x');
  const std::string event = tensorboard::encode_scalar_event(0.0, 0, tag, 1.0f);
  // Value = 0a c8 01 <200> 15 <4> (208 bytes); Summary = 0a d0 01 <208> (211); Event = 2a d3 01 <211>.
  EXPECT_EQ(event.size(), 3u + 211u);
  EXPECT_EQ(event.substr(0, 9), from_hex("2a d3 01 0a d0 01 0a c8 01"));
  EXPECT_EQ(event.substr(event.size() - 5), from_hex("15 0000803f"));
}

TEST(TensorBoardWriter, FileNameAndFirstRecord) {
  const std::string dir = test::scratch_dir("tb_name") + "/nested/run";  // created by the writer
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    // The file_version record is on disk before any scalar.
    const auto records = read_records(path);
    ASSERT_EQ(records.size(), 1u);
    EXPECT_EQ(records[0].substr(0, 1), from_hex("09"));
    EXPECT_EQ(records[0].substr(9), from_hex("1a 0d") + "brain.Event:2");
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(fs::path(path).parent_path().string(), dir);
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.substr(0, prefix.size()), prefix) << name;
  const std::string stamp = name.substr(prefix.size(), 10);
  for (char c : stamp) EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c))) << name;
  EXPECT_NEAR(std::stod(stamp), static_cast<double>(std::time(nullptr)), 60.0);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string host_part = str_cat(".", host, ".");
  EXPECT_EQ(name.substr(prefix.size() + 10, host_part.size()), host_part) << name;
  // The file_version wall time is now.
  double wall_time;
  const std::string first = read_records(path)[0];
  std::memcpy(&wall_time, first.data() + 1, 8);
  EXPECT_NEAR(wall_time, static_cast<double>(std::time(nullptr)), 60.0);
}

TEST(TensorBoardWriter, TwoWritersInOneSecondGetTwoFiles) {
  const std::string dir = test::scratch_dir("tb_two");
  TensorBoardWriter a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(event_files(dir).size(), 2u);
}

// --tensorboard-queue-size: events stay in memory until `queue_size` are pending, then all go
// out; flush() and the destructor write the rest.
TEST(TensorBoardWriter, QueueSizeFlushAndDestructor) {
  const std::string dir = test::scratch_dir("tb_queue");
  std::string path;
  {
    TensorBoardWriter w(dir, 3);
    path = w.path();
    w.add_scalar("lm loss", 1.0, 1);
    w.add_scalar("lm loss", 2.0, 2);
    EXPECT_EQ(w.pending(), 2);
    EXPECT_EQ(read_records(path).size(), 1u);
    w.add_scalar("lm loss", 3.0, 3);  // third pending event: written
    EXPECT_EQ(w.pending(), 0);
    EXPECT_EQ(read_records(path).size(), 4u);
    w.add_scalar("lm loss", 4.0, 4);
    EXPECT_EQ(read_records(path).size(), 4u);
    w.flush();
    EXPECT_EQ(read_records(path).size(), 5u);
    w.add_scalar("lm loss", 5.0, 5);
  }
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 6u);
  // Records are in order and hold what was given (wall time skipped: 9 bytes).
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(records[i].substr(9), tensorboard::encode_scalar_event(0.0, i, "lm loss", static_cast<float>(i)))
        << "record " << i;
  }
  // The default queue holds Megatron's 1000 events.
  TensorBoardWriter d(dir);
  for (int i = 0; i < 999; ++i) d.add_scalar("x", i, i);
  EXPECT_EQ(d.pending(), 999);
  d.add_scalar("x", 999, 999);
  EXPECT_EQ(d.pending(), 0);
  EXPECT_EQ(read_records(d.path()).size(), 1001u);
}

TEST(TensorBoardWriter, ErrorsNameThePath) {
  const std::string dir = test::scratch_dir("tb_errors");
  const std::string file = dir + "/not_a_dir";
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter w(file + "/tb");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  try {
    TensorBoardWriter w(dir, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tensorboard-queue-size"), std::string::npos) << e.what();
  }
  if (::geteuid() != 0) {  // root ignores permissions
    const std::string ro = dir + "/read_only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    try {
      TensorBoardWriter w(ro);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(ro + "/events.out.tfevents."), std::string::npos) << e.what();
    }
    fs::permissions(ro, fs::perms::owner_all);
  }
}

// ---------------------------------------------------------------- the independent Python reader

std::string reader_script() { return test::source_dir() + "/tests/obs/tensorboard_reader_test.py"; }

struct DumpedScalar {
  std::string tag_json;
  int64_t step;
  uint32_t bits;
};

// Runs the Python reader's --dump on `path`; returns its exit status and the scalars.
int python_dump(const std::string& path, std::vector<DumpedScalar>* scalars, std::string* output) {
  const auto r = test::run_command("/usr/bin/python3 '" + reader_script() + "' --dump '" + path + "'", true);
  *output = r.output;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    std::stringstream ls(line);
    std::string col;
    while (std::getline(ls, col, '\t')) cols.push_back(col);
    if (cols.size() == 5 && cols[0] == "scalar")
      scalars->push_back({cols[1], std::stoll(cols[2]), static_cast<uint32_t>(std::stoul(cols[3], nullptr, 16))});
  }
  return r.status;
}

TEST(TensorBoardWriter, PythonReaderDecodesWhatWeWrite) {
  const std::string dir = test::scratch_dir("tb_python");
  std::string path;
  {
    TensorBoardWriter w(dir, 4);
    path = w.path();
    w.add_scalar(std::string(tb_tags::kLmLoss), 10.5, 1);
    w.add_scalar(std::string(tb_tags::kLmLossVsSamples), 10.5, 64);
    w.add_scalar(std::string(tb_tags::kLearningRate), 1.5e-4, 2);
    w.add_scalar("negative step", -3.25, -7);
    w.add_scalar("zero", 0.0, 0);
    w.add_scalar("inf", std::numeric_limits<double>::infinity(), 5);
  }
  std::vector<DumpedScalar> got;
  std::string output;
  ASSERT_EQ(python_dump(path, &got, &output), 0) << output;
  const std::vector<DumpedScalar> want = {
      {"\"lm loss\"", 1, float_bits(10.5f)},
      {"\"lm loss vs samples\"", 64, float_bits(10.5f)},
      {"\"learning-rate\"", 2, float_bits(static_cast<float>(1.5e-4))},
      {"\"negative step\"", -7, float_bits(-3.25f)},
      {"\"zero\"", 0, 0u},
      {"\"inf\"", 5, 0x7F800000u},
  };
  ASSERT_EQ(got.size(), want.size()) << output;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tag_json, want[i].tag_json) << i;
    EXPECT_EQ(got[i].step, want[i].step) << i;
    EXPECT_EQ(got[i].bits, want[i].bits) << i;
  }
  EXPECT_NE(output.find("version\tbrain.Event:2\t"), std::string::npos) << output;
}

// The Python reader must reject a file with one flipped bit, wherever it is.
TEST(TensorBoardWriter, PythonReaderRejectsCorruptFiles) {
  const std::string dir = test::scratch_dir("tb_corrupt");
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.add_scalar("lm loss", 2.5, 42);
  }
  const std::string good = read_file(path);
  const size_t first = good.size() - (12 + 29 + 4);  // start of the scalar record (29-byte Event)
  // length, length CRC, data (step byte), data CRC
  for (size_t at : {first, first + 9, first + 12 + 10, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x04;
    const std::string bad_path = dir + "/bad.tfevents";
    std::ofstream(bad_path, std::ios::binary) << bad;
    std::vector<DumpedScalar> got;
    std::string output;
    EXPECT_EQ(python_dump(bad_path, &got, &output), 1) << "flip at " << at << ": " << output;
    EXPECT_NE(output.find("CRC mismatch"), std::string::npos) << output;
  }
  const std::string cut_path = dir + "/cut.tfevents";
  std::ofstream(cut_path, std::ios::binary) << good.substr(0, good.size() - 3);
  std::vector<DumpedScalar> got;
  std::string output;
  EXPECT_EQ(python_dump(cut_path, &got, &output), 1) << output;
  EXPECT_NE(output.find("truncated"), std::string::npos) << output;
}

// Writes the file that tests/obs/tensorboard_reader_test.py decodes and compares with values
// it computes itself: every Megatron tag for 12 iterations (value = k * 1.5 + it * 0.25, exact
// in binary; step = iteration, or it * 64 for "vs samples" tags), then special values. The
// same scalars go to metrics.jsonl, plus one line of mixed types. Run by the Python test with
// MT_TB_FIXTURE_DIR set; without it, writes to scratch space and checks the record count.
TEST(TensorBoardWriter, WritesFixtureForPythonReader) {
  const char* env = std::getenv("MT_TB_FIXTURE_DIR");
  const std::string dir = env != nullptr ? std::string(env) : test::scratch_dir("tb_fixture");
  const double wall_time = 1700000000.5;
  const double inf = std::numeric_limits<double>::infinity();
  int64_t count = 0;
  {
    TensorBoardWriter tb(dir + "/tb", 7);
    MetricsJsonlWriter jsonl(dir + "/metrics.jsonl");
    auto add = [&](const std::string& tag, int64_t step, double value) {
      tb.add_scalar(tag, value, step, wall_time);
      jsonl.write({{"tag", tag}, {"step", step}, {"value", value}});
      ++count;
    };
    for (int it = 1; it <= 12; ++it) {
      int k = 0;
      for (std::string_view tag : tb_tags::kAll) {
        add(std::string(tag), tb_tags::is_vs_samples(tag) ? it * 64 : it, k * 1.5 + it * 0.25);
        ++k;
      }
    }
    add("special/tenth", 1, 0.1);
    add("special/nan", 2, std::nan(""));
    add("special/inf", 3, inf);
    add("special/neg_inf", 4, -inf);
    add("special/zero", 0, 0.0);
    add("special/negative_step", -5, -2.5);
    add("special/big_step", (int64_t{1} << 40) + 3, 3.0e38);
    add("special/float_overflow", 6, 1.0e39);
    add("special/denormal", 7, 1.0e-45);
    add("special/" + std::string(200, 'x'), 8, 1.0);
    add("\xe6\x8d\x9f\xe5\xa4\xb1/unicode \"quoted\"", 9, 123.456);
    jsonl.write({{"iteration", 10},
                 {"consumed_samples", int64_t{640}},
                 {"lr", 1.5e-4},
                 {"lm_loss", 10.5},
                 {"grad_norm", std::optional<double>{}},
                 {"skipped", false},
                 {"note", "quote\" backslash\\ newline\n tab\t ctrl\x01 \xe6\x8d\x9f\xe5\xa4\xb1"},
                 {"big", (int64_t{1} << 62) + 1},
                 {"neg", -7},
                 {"whole", 640.0},
                 {"third", 1.0 / 3.0}});
  }
  const auto files = event_files(dir + "/tb");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(read_records(files[0]).size()), 1 + count);
}

// Tag table: the Megatron spellings and the x-axis rule.
TEST(TensorBoardTags, MegatronSpellings) {
  EXPECT_EQ(std::size(tb_tags::kAll), 20u);
  EXPECT_EQ(tb_tags::kLmLoss, "lm loss");
  EXPECT_EQ(tb_tags::kLmLossValidationPplVsSamples, "lm loss validation ppl vs samples");
  int vs_samples = 0;
  for (std::string_view tag : tb_tags::kAll) vs_samples += tb_tags::is_vs_samples(tag) ? 1 : 0;
  EXPECT_EQ(vs_samples, 9);  // 7 training pairs + 2 validation pairs
  EXPECT_FALSE(tb_tags::is_vs_samples(tb_tags::kIterationTime));
  EXPECT_FALSE(tb_tags::is_vs_samples(tb_tags::kThroughput));
}

}  // namespace
}  // namespace megatron::obs
