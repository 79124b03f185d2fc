#include "data/npy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::data {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string error_of(const std::string& path) {
  try {
    NpyFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Headers as numpy 1.24's np.save writes them (printed with /usr/bin/python3): the dict, 21 minus
// the digits of shape[0] spaces of growth room, then spaces and '\n' up to a 64-byte boundary.
TEST(Npy, HeaderMatchesNpSave) {
  const std::string magic("\x93NUMPY\x01\x00", 8);
  auto expect_header = [&](NpyDType dtype, std::vector<int64_t> shape, const std::string& dict, int64_t total) {
    const std::string h = npy_header(dtype, shape);
    ASSERT_EQ(static_cast<int64_t>(h.size()), total) << dict;
    EXPECT_EQ(h.substr(0, 8), magic);
    EXPECT_EQ(static_cast<unsigned char>(h[8]) | static_cast<unsigned char>(h[9]) << 8, total - 10);
    EXPECT_EQ(h.substr(10, dict.size()), dict);
    EXPECT_EQ(h.substr(10 + dict.size()),
              std::string(static_cast<size_t>(total - 11 - static_cast<int64_t>(dict.size())), ' ') + "\n");
  };
  expect_header(NpyDType::kInt32, {10}, "{'descr': '<i4', 'fortran_order': False, 'shape': (10,), }", 128);
  expect_header(NpyDType::kInt32, {11, 2}, "{'descr': '<i4', 'fortran_order': False, 'shape': (11, 2), }", 128);
  expect_header(NpyDType::kUInt8, {3}, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", 128);
  expect_header(NpyDType::kInt64, {0}, "{'descr': '<i8', 'fortran_order': False, 'shape': (0,), }", 128);
  expect_header(NpyDType::kUInt32, {4}, "{'descr': '<u4', 'fortran_order': False, 'shape': (4,), }", 128);
  expect_header(NpyDType::kInt16, {2}, "{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", 128);
  // A long first dimension eats the growth room; the header is still 64-aligned.
  expect_header(NpyDType::kInt64, {123456789012345},
                "{'descr': '<i8', 'fortran_order': False, 'shape': (123456789012345,), }", 128);
}

// np.save(np.arange(10, dtype=np.int32)) is 168 bytes: 118 = 'v' is the header length.
TEST(Npy, WritesAndMapsBack) {
  const std::string dir = test::scratch_dir("npy_roundtrip");
  std::vector<int32_t> a(10);
  std::iota(a.begin(), a.end(), 0);
  write_npy(dir + "/a.npy", NpyDType::kInt32, {10}, a.data());
  const std::string bytes = read_bytes(dir + "/a.npy");
  ASSERT_EQ(bytes.size(), 168u);
  EXPECT_EQ(bytes[8], 'v');
  NpyFile f(dir + "/a.npy");
  EXPECT_EQ(f.dtype(), NpyDType::kInt32);
  EXPECT_EQ(f.shape(), std::vector<int64_t>{10});
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(f.at(i), i);
  EXPECT_NO_THROW(f.expect(NpyDType::kInt32, {10}));
  EXPECT_THROW(f.expect(NpyDType::kUInt32, {10}), Error);
  EXPECT_THROW(f.expect(NpyDType::kInt32, {10, 1}), Error);

  std::vector<uint32_t> big = {0u, 4294967295u};
  write_npy(dir + "/u.npy", NpyDType::kUInt32, {2}, big.data());
  EXPECT_EQ(NpyFile(dir + "/u.npy").at(1), 4294967295);
  std::vector<int32_t> rows = {0, 0, 1, 5, 2, 7};
  write_npy(dir + "/r.npy", NpyDType::kInt32, {3, 2}, rows.data());
  NpyFile r(dir + "/r.npy");
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r.at(5), 7);
}

TEST(Npy, RejectsBadFilesNamingThePath) {
  const std::string dir = test::scratch_dir("npy_bad");
  std::vector<int32_t> a(4, 1);
  write_npy(dir + "/ok.npy", NpyDType::kInt32, {4}, a.data());
  const std::string ok = read_bytes(dir + "/ok.npy");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  std::string truncated = write("short.npy", ok.substr(0, ok.size() - 1));
  EXPECT_NE(error_of(truncated).find(truncated), std::string::npos);
  EXPECT_NE(error_of(truncated).find("needs"), std::string::npos);
  std::string magic = ok;
  magic[1] = 'X';
  EXPECT_NE(error_of(write("magic.npy", magic)).find("bad magic"), std::string::npos);
  std::string fortran = ok;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_NE(error_of(write("fortran.npy", fortran)).find("fortran_order"), std::string::npos);
  std::string descr = ok;
  descr.replace(descr.find("<i4"), 3, "<f4");
  EXPECT_NE(error_of(write("descr.npy", descr)).find("unsupported .npy dtype"), std::string::npos);
  std::string bigger = ok + std::string(4, '\0');
  EXPECT_NE(error_of(write("long.npy", bigger)).find("needs"), std::string::npos);
  EXPECT_NE(error_of(dir + "/missing.npy").find("missing.npy"), std::string::npos);
}

// Dimensions whose product overflows int64 must not wrap around to a size that matches the
// file: 2^50 * 2^14 = 2^64 would wrap to 0 elements and accept a header-only file.
TEST(Npy, RejectsShapesWhoseProductOverflows) {
  const std::string dir = test::scratch_dir("npy_overflow");
  const std::string header = npy_header(NpyDType::kInt32, {int64_t{1} << 50, int64_t{1} << 14});
  const std::string path = dir + "/huge.npy";
  std::ofstream(path, std::ios::binary) << header;
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ": file is " + std::to_string(header.size()) +
                   " bytes but its header (<i4 (1125899906842624, 16384)) needs more than 2^63 bytes"),
            std::string::npos)
      << e;
  // A zero dimension makes the others harmless: an empty array.
  const std::string empty = dir + "/empty.npy";
  std::ofstream(empty, std::ios::binary) << npy_header(NpyDType::kInt32, {int64_t{1} << 50, 0, int64_t{1} << 50});
  EXPECT_EQ(NpyFile(empty).element_count(), 0);
}

}  // namespace
}  // namespace megatron::data
