#include "core/file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/paths.h"

namespace megatron {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(AtomicFile, CommitRenamesIntoPlace) {
  std::string dir = test::scratch_dir("atomic_commit");
  std::string path = dir + "/out.txt";
  {
    AtomicFile f(path);
    f.write("hello ");
    f.write("world");
    EXPECT_FALSE(file_exists(path));  // nothing under the final name before commit
    EXPECT_TRUE(file_exists(f.temp_path()));
    f.commit();
  }
  EXPECT_EQ(read_all(path), "hello world");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(AtomicFile, AbandonedWriteLeavesNothingAndKeepsOldFile) {
  std::string dir = test::scratch_dir("atomic_abandon");
  std::string path = dir + "/out.txt";
  { std::ofstream(path) << "previous"; }
  {
    AtomicFile f(path);
    f.write("partial");
  }
  EXPECT_EQ(read_all(path), "previous");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(MappedFile, MapsContentAndNamesMissingFile) {
  std::string dir = test::scratch_dir("mapped");
  { std::ofstream(dir + "/a") << "abc"; }
  MappedFile m(dir + "/a");
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), 3), "abc");
  try {
    MappedFile missing(dir + "/nope");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nope: cannot open: No such file or directory"), std::string::npos);
  }
}

TEST(SpillFile, ReadsBackWhatWasWrittenAndLeavesNoFile) {
  std::string dir = test::scratch_dir("spill");
  SpillFile s(dir + "/x");
  for (int64_t i = 0; i < 100000; ++i) s.write(&i, 8);
  s.rewind();
  int64_t v, expected = 0;
  while (s.read(&v, 8) == 8) EXPECT_EQ(v, expected++);
  EXPECT_EQ(expected, 100000);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 0);
}

}  // namespace
}  // namespace megatron
