#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

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

// Opens `fifo` for writing and closes it again, every 50 ms, until `done`: it releases an
// open(2) that waits for a writer, so that a reader which blocks fails its test instead of
// hanging it. O_NONBLOCK: with no reader waiting the open fails at once (ENXIO).
class FifoWriterPoke {
 public:
  explicit FifoWriterPoke(const std::string& fifo)
      : thread_([this, fifo] {
          while (!done_) {
            const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
            if (fd >= 0) ::close(fd);
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        }) {}
  ~FifoWriterPoke() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(MappedFile, RefusesAFifoWithoutWaitingAndADirectory) {
  const std::string dir = test::scratch_dir("mapped_fifo");
  const std::string fifo = dir + "/pipe.idx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    FifoWriterPoke poke(fifo);  // without the check, open(2) waits for it, then maps 0 bytes
    try {
      MappedFile m(fifo);
      FAIL() << "mapped a FIFO";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), fifo + ": is a FIFO (named pipe), not a regular file");
    }
  }
  try {
    MappedFile m(dir);
    FAIL() << "mapped a directory";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": is a directory, not a regular file");
  }
  try {
    MappedFile m("/dev/null");
    FAIL() << "mapped a device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/null: is a character device, not a regular file");
  }
  // A link to a regular file is fine.
  { std::ofstream(dir + "/real") << "xyz"; }
  std::filesystem::create_symlink(dir + "/real", dir + "/link");
  EXPECT_EQ(MappedFile(dir + "/link").size(), 3);
}

TEST(AtomicFile, AFifoUnderTheTemporaryNameIsAnErrorNotAHang) {
  const std::string dir = test::scratch_dir("atomic_fifo");
  const std::string path = dir + "/out.bin";
  const std::string temp = str_cat(path, ".tmp-", ::getpid());
  ASSERT_EQ(::mkfifo(temp.c_str(), 0600), 0);
  // A reader keeps the FIFO open, so that a blocking writer's open would succeed and its
  // writes would go into the pipe.
  const int reader = ::open(temp.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  try {
    AtomicFile f(path);
    FAIL() << "wrote into a FIFO";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a FIFO (named pipe), not a regular file"), std::string::npos) << e.what();
  }
  ::close(reader);
  EXPECT_FALSE(file_exists(path));
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
