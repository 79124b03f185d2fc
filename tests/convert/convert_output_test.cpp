// convert/convert_output.h: a converter's output appears whole or not at all, never over
// something that exists, and the temporary directory never stays behind.
#include "convert/convert_output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::convert {
namespace {

namespace fs = std::filesystem;

using test::read_file;

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  ckpt::write_checkpoint_files(dir, {ckpt::CheckpointFile::text_file(name, text)});
}

bool leftovers(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find("convert_tmp") != std::string::npos) return true;
  }
  return false;
}

TEST(ConvertOutput, WritesANewDirectoryOrNothing) {
  const std::string dir = test::scratch_dir("convert_output");
  convert::write_new_directory(dir + "/a/", "--save",
                               [](const std::string& tmp) { write_text(tmp, "x.txt", "hello"); });
  EXPECT_EQ(read_file(dir + "/a/x.txt"), "hello");

  // A failure inside fill leaves no output and no temporary directory.
  EXPECT_THROW(convert::write_new_directory(dir + "/b", "--save",
                                            [](const std::string& tmp) {
                                              write_text(tmp, "x.txt", "partial");
                                              throw Error("disk full");
                                            }),
               Error);
  EXPECT_FALSE(fs::exists(dir + "/b"));
  EXPECT_FALSE(leftovers(dir));

  // An existing non-empty directory is refused and unchanged; an empty one is replaced.
  try {
    convert::write_new_directory(dir + "/a", "--save-hf", [](const std::string&) {});
    ADD_FAILURE() << "must refuse";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[--save-hf] " + dir + "/a already exists and is not empty (convert writes a new directory)");
  }
  EXPECT_EQ(read_file(dir + "/a/x.txt"), "hello");
  fs::create_directories(dir + "/empty");
  convert::write_new_directory(dir + "/empty", "--save", [](const std::string& tmp) { write_text(tmp, "y.txt", "y"); });
  EXPECT_EQ(read_file(dir + "/empty/y.txt"), "y");
  write_text(dir, "file", "f");
  EXPECT_THROW(convert::write_new_directory(dir + "/file", "--save", [](const std::string&) {}), Error);
  EXPECT_FALSE(leftovers(dir));
}

TEST(ConvertOutput, CheckpointLayout) {
  const std::string dir = test::scratch_dir("convert_output_checkpoint");
  const std::vector<ckpt::CheckpointFile> files = {ckpt::CheckpointFile::text_file("metadata.json", "{}")};
  convert::write_new_checkpoint(dir + "/it", "--save", 42, false, files);
  EXPECT_EQ(read_file(dir + "/it/latest_checkpointed_iteration.txt"), "42");
  EXPECT_EQ(read_file(dir + "/it/iter_0000042/metadata.json"), "{}");
  convert::write_new_checkpoint(dir + "/rel", "--save", 0, true, files);
  EXPECT_EQ(read_file(dir + "/rel/latest_checkpointed_iteration.txt"), "release");
  EXPECT_EQ(read_file(dir + "/rel/release/metadata.json"), "{}");
}

}  // namespace
}  // namespace megatron::convert
