// safetensors: round trip of every dtype; an independent reader and writer (Debian's python3
// with struct/json/numpy, no safetensors package) agree with ours both ways; truncated and
// corrupted files are megatron::Error naming the file, never a crash.
#include "ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "support/paths.h"

namespace megatron::ckpt {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::remove(path.c_str());  // a fresh file: ext4 flushes on close after truncating one with data
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Test tensors of every dtype, with values the Python side recomputes on its own:
//   f32[i] = i * 0.25 - 3, bf16[i] = (i - 8) * 0.5, f16[i] = i * 0.125 - 1,
//   i32[i] = i * 1000003 - 5000, i64[i] = i * 1000000000007 - 3.
struct Fixture {
  std::vector<float> f32;
  std::vector<uint16_t> bf16, f16;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<float> scalar{42.5f};
  std::vector<ckpt::TensorToWrite> tensors;

  Fixture() {
    for (int i = 0; i < 24; ++i) f32.push_back(static_cast<float>(i) * 0.25f - 3.0f);
    for (int i = 0; i < 7; ++i) bf16.push_back(float_to_bf16(static_cast<float>(i - 8) * 0.5f));  // odd count
    for (int i = 0; i < 5; ++i) f16.push_back(float_to_fp16(static_cast<float>(i) * 0.125f - 1.0f));
    for (int i = 0; i < 6; ++i) i32.push_back(i * 1000003 - 5000);
    for (int i = 0; i < 3; ++i) i64.push_back(int64_t{i} * 1000000000007 - 3);
    // Deliberately small-dtype first: the writer must still align everything.
    tensors.push_back({"layers.0.bf16", DType::kBF16, {7}, bf16.data(), {14}, "tp=2,pp=1,partition_axis=0"});
    tensors.push_back({"f16", DType::kF16, {5, 1}, f16.data(), {}, ckpt::kDefaultTensorLayout});
    tensors.push_back({"weight.f32", DType::kF32, {2, 3, 4}, f32.data(), {2, 3, 8}, "tp=2,pp=1,partition_axis=2"});
    tensors.push_back({"i32", DType::kI32, {6}, i32.data(), {}, ckpt::kDefaultTensorLayout});
    tensors.push_back({"i64", DType::kI64, {3}, i64.data(), {}, ckpt::kDefaultTensorLayout});
    tensors.push_back({"scalar", DType::kF32, {}, scalar.data(), {}, ckpt::kDefaultTensorLayout});
    tensors.push_back({"empty", DType::kF32, {0, 3}, nullptr, {}, ckpt::kDefaultTensorLayout});
  }
};

TEST(Safetensors, RoundTripAllDtypes) {
  const std::string dir = test::scratch_dir("safetensors_roundtrip");
  const std::string path = dir + "/t.safetensors";
  Fixture fx;
  const ckpt::StringMap meta{{"format", "megatron.cpp"}, {"note", "\xc3\xa9\n\"q\""}};
  const int64_t size = ckpt::write_safetensors(path, fx.tensors, meta);
  EXPECT_EQ(size, static_cast<int64_t>(read_bytes(path).size()));

  ckpt::SafetensorsFile f(path);
  EXPECT_EQ(f.size_bytes(), size);
  ASSERT_EQ(f.tensors().size(), fx.tensors.size());
  for (const ckpt::TensorToWrite& w : fx.tensors) {
    const ckpt::SafetensorsTensor& t = f.at(w.name);
    EXPECT_EQ(t.dtype, w.dtype) << w.name;
    EXPECT_EQ(t.shape, w.shape) << w.name;
    EXPECT_EQ(t.global_shape, w.global_shape.empty() ? w.shape : w.global_shape) << w.name;
    EXPECT_EQ(t.layout, w.layout) << w.name;
    int64_t numel = 1;
    for (int64_t d : w.shape) numel *= d;
    EXPECT_EQ(t.numel, numel);
    ASSERT_EQ(t.bytes, numel * dtype_size(w.dtype)) << w.name;
    if (numel > 0) {
      EXPECT_EQ(std::memcmp(t.data, w.data, static_cast<size_t>(t.bytes)), 0) << w.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(dtype_size(w.dtype)), 0u) << w.name;
      EXPECT_EQ(t.offset % dtype_size(w.dtype), 0) << w.name;
    } else {
      EXPECT_EQ(t.data, nullptr);
    }
  }
  EXPECT_EQ(f.metadata().at("format"), "megatron.cpp");
  EXPECT_EQ(f.metadata().at("note"), "\xc3\xa9\n\"q\"");
  EXPECT_EQ(f.metadata().at("weight.f32.global_shape"), "[2,3,8]");
  EXPECT_EQ(f.metadata().at("layers.0.bf16.layout"), "tp=2,pp=1,partition_axis=0");
  EXPECT_EQ(f.find("nope"), nullptr);
  try {
    f.at("nope");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  // Header length is a multiple of 8 and the padding is spaces.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  // Larger dtypes come first in the data area.
  EXPECT_LT(f.at("i64").offset, f.at("weight.f32").offset);
  EXPECT_LT(f.at("weight.f32").offset, f.at("f16").offset);
}

// Tensors produced when their turn comes (TensorToWrite::fill) give the very same file as
// tensors in memory, each produced once, in the data order (larger dtypes first, then as given).
TEST(Safetensors, FilledTensorsWriteTheSameFile) {
  const std::string dir = test::scratch_dir("safetensors_fill");
  Fixture fx;
  ckpt::write_safetensors(dir + "/data.safetensors", fx.tensors);
  std::vector<ckpt::TensorToWrite> lazy = fx.tensors;
  std::vector<std::string> order;
  for (ckpt::TensorToWrite& t : lazy) {
    const void* src = t.data;
    int64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape) bytes *= d;
    t.data = nullptr;
    t.fill = [&order, name = t.name, src, bytes](void* dst) {
      order.push_back(name);
      std::memcpy(dst, src, static_cast<size_t>(bytes));
    };
  }
  ckpt::write_safetensors(dir + "/filled.safetensors", lazy);
  EXPECT_EQ(read_bytes(dir + "/filled.safetensors"), read_bytes(dir + "/data.safetensors"));
  const ckpt::SafetensorsFile f(dir + "/data.safetensors");
  std::vector<std::string> expected;
  for (const ckpt::SafetensorsTensor& t : f.tensors()) {
    if (t.bytes > 0) expected.push_back(t.name);
  }
  EXPECT_EQ(order, expected) << "one call per tensor with bytes, in file order";
}

// A file laid out by create_safetensors_file and filled by two writers in random pieces, in
// random order, is byte for byte the file write_safetensors writes; out-of-range writes are
// refused, and a writer refuses a file that is missing or not laid out for this header.
TEST(Safetensors, RangeWritersFillTheSameFile) {
  const std::string dir = test::scratch_dir("safetensors_ranges");
  Fixture fx;
  const ckpt::StringMap meta{{"format", "x"}};
  ckpt::write_safetensors(dir + "/whole.safetensors", fx.tensors, meta);
  std::vector<ckpt::TensorToWrite> shapes = fx.tensors;
  for (ckpt::TensorToWrite& t : shapes) t.data = nullptr;  // the header needs no data
  const ckpt::SafetensorsHeader h = ckpt::make_safetensors_header(shapes, meta);
  const std::string path = dir + "/ranges.safetensors";
  ckpt::create_safetensors_file(path, h);
  EXPECT_EQ(static_cast<int64_t>(read_bytes(path).size()), h.file_bytes());

  struct Piece {
    size_t tensor;
    int64_t offset, bytes;
  };
  std::vector<Piece> pieces;
  std::mt19937 rng(7);
  for (size_t i = 0; i < fx.tensors.size(); ++i) {
    for (int64_t at = 0; at < h.data_sizes[i];) {
      const int64_t n = std::min<int64_t>(h.data_sizes[i] - at, 1 + static_cast<int64_t>(rng() % 9));
      pieces.push_back({i, at, n});
      at += n;
    }
  }
  std::shuffle(pieces.begin(), pieces.end(), rng);
  ckpt::SafetensorsRangeWriter a(path, h), b(path, h);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    const char* src = static_cast<const char*>(fx.tensors[p.tensor].data) + p.offset;
    (k % 2 ? a : b).write(p.tensor, p.offset, src, p.bytes);
  }
  EXPECT_DEATH(a.write(0, h.data_sizes[0] - 1, fx.bf16.data(), 2), "bytes");
  a.finish();
  b.finish();
  EXPECT_EQ(read_bytes(path), read_bytes(dir + "/whole.safetensors"));

  EXPECT_THROW(ckpt::SafetensorsRangeWriter(dir + "/missing.safetensors", h), Error);
  EXPECT_THROW(ckpt::SafetensorsRangeWriter(dir + "/whole.safetensors", ckpt::make_safetensors_header(shapes, {})),
               Error);
  EXPECT_THROW(ckpt::create_safetensors_file(path, h), Error) << "an existing file is never overwritten";
}

TEST(Safetensors, WriterRejectsBadInput) {
  const std::string dir = test::scratch_dir("safetensors_writer");
  float x[2] = {1, 2};
  auto fails = [&](const std::vector<ckpt::TensorToWrite>& t, const ckpt::StringMap& m, const std::string& what) {
    try {
      ckpt::write_safetensors(dir + "/bad.safetensors", t, m);
      ADD_FAILURE() << "no throw for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  };
  fails({{"a", DType::kF32, {2}, x}, {"a", DType::kF32, {2}, x}}, {}, "duplicate tensor name 'a'");
  fails({{"", DType::kF32, {2}, x}}, {}, "empty name");
  fails({{"__metadata__", DType::kF32, {2}, x}}, {}, "reserved");
  fails({{"a", DType::kF32, {2}, nullptr}}, {}, "has no data");
  fails({{"a", DType::kF32, {-1}, x}}, {}, "invalid shape");
  fails({{"a", DType::kF32, {2}, x}}, {{"a.layout", "x"}}, "collides");
  EXPECT_FALSE(file_exists(dir + "/bad.safetensors"));
}

TEST(Safetensors, DtypeNames) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    EXPECT_EQ(ckpt::parse_safetensors_dtype(ckpt::safetensors_dtype_name(d)), d);
  }
  EXPECT_FALSE(ckpt::parse_safetensors_dtype("F64"));
  EXPECT_FALSE(ckpt::parse_safetensors_dtype("f32"));
  EXPECT_EQ(ckpt::parse_shape("[1, 2,3]"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ckpt::parse_shape("[]"), std::vector<int64_t>{});
  EXPECT_FALSE(ckpt::parse_shape("[1.5]"));
  EXPECT_FALSE(ckpt::parse_shape("[-1]"));
  EXPECT_FALSE(ckpt::parse_shape("{}"));
}

// The independent side: reads our file with struct/json/numpy and checks every value, then
// writes its own file (no padding, tensors in name order, unaligned) for us to read.
const char* kPythonReference = R"PY(
import json, struct, sys
import numpy as np

ours, theirs = sys.argv[1], sys.argv[2]
raw = open(ours, 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert (8 + n) % 8 == 0, 'data area not 8-aligned'
header = json.loads(raw[8:8 + n].decode('utf-8'))
meta = header.pop('__metadata__')
data = raw[8 + n:]
np_dtype = {'F32': '<f4', 'F16': '<f2', 'I32': '<i4', 'I64': '<i8'}
size = {'F32': 4, 'F16': 2, 'BF16': 2, 'I32': 4, 'I64': 8}
spans = sorted(tuple(e['data_offsets']) for e in header.values())
pos = 0
for b, e in spans:
    assert b == pos, ('hole or overlap', b, pos)
    pos = e
assert pos == len(data), ('trailing bytes', pos, len(data))

def load(name):
    e = header[name]
    b, end = e['data_offsets']
    buf = data[b:end]
    assert len(buf) == int(np.prod(e['shape'], dtype=np.int64)) * size[e['dtype']], name
    if e['dtype'] == 'BF16':
        u = np.frombuffer(buf, dtype='<u2').astype(np.uint32) << 16
        return u.view(np.float32).reshape(e['shape']), e['dtype']
    return np.frombuffer(buf, dtype=np_dtype[e['dtype']]).reshape(e['shape']), e['dtype']

def check(name, dtype, shape, expected):
    a, dt = load(name)
    assert dt == dtype, (name, dt)
    assert list(a.shape) == shape, (name, a.shape)
    assert np.array_equal(a.reshape(-1), np.asarray(expected).reshape(-1)), (name, a, expected)

check('weight.f32', 'F32', [2, 3, 4], np.arange(24, dtype=np.float32) * np.float32(0.25) - np.float32(3))
check('layers.0.bf16', 'BF16', [7], (np.arange(7, dtype=np.float32) - 8) * 0.5)
check('f16', 'F16', [5, 1], (np.arange(5, dtype=np.float16) * np.float16(0.125) - np.float16(1)))
check('i32', 'I32', [6], np.arange(6, dtype=np.int64) * 1000003 - 5000)
check('i64', 'I64', [3], np.arange(3, dtype=np.int64) * 1000000000007 - 3)
check('scalar', 'F32', [], [42.5])
check('empty', 'F32', [0, 3], np.zeros((0, 3), dtype=np.float32))
assert meta['weight.f32.global_shape'] == '[2,3,8]', meta
assert meta['layers.0.bf16.layout'] == 'tp=2,pp=1,partition_axis=0', meta
assert meta['note'] == '\u00e9\n"q"', meta

# Our reader on a file from an independent writer: name order, no padding, odd offsets.
tensors = {
    'a_f16': ('F16', [3], np.array([1.5, -2.0, 65504.0], dtype='<f2').tobytes()),
    'b_i64': ('I64', [2], np.array([-(2**62), 2**40 + 1], dtype='<i8').tobytes()),
    'c_bf16': ('BF16', [2], (np.array([3.0, -0.5], dtype=np.float32).view(np.uint32) >> 16).astype('<u2').tobytes()),
    'd_f32': ('F32', [2, 2], np.array([[0.1, 0.2], [0.3, 1e30]], dtype='<f4').tobytes()),
    'e_i32': ('I32', [1], np.array([-7], dtype='<i4').tobytes()),
}
hdr, blob = {'__metadata__': {'source': 'python'}}, b''
for name, (dt, shape, b) in tensors.items():
    hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(blob), len(blob) + len(b)]}
    blob += b
h = json.dumps(hdr).encode('utf-8')
with open(theirs, 'wb') as f:
    f.write(struct.pack('<Q', len(h)) + h + blob)
print('python reference OK')
)PY";

TEST(Safetensors, IndependentPythonReaderAndWriterAgree) {
  const std::string dir = test::scratch_dir("safetensors_python");
  Fixture fx;
  ckpt::write_safetensors(dir + "/ours.safetensors", fx.tensors, {{"note", "\xc3\xa9\n\"q\""}});
  write_bytes(dir + "/reference.py", kPythonReference);
  const test::CommandResult r = test::run_command(
      "/usr/bin/python3 " + dir + "/reference.py " + dir + "/ours.safetensors " + dir + "/theirs.safetensors", true);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("python reference OK"), std::string::npos) << r.output;

  ckpt::SafetensorsFile f(dir + "/theirs.safetensors");
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("source"), "python");
  auto get = [&](const std::string& name, auto sample) {
    const ckpt::SafetensorsTensor& t = f.at(name);
    std::vector<decltype(sample)> v(static_cast<size_t>(t.numel));
    std::memcpy(v.data(), t.data, static_cast<size_t>(t.bytes));  // unaligned in this file
    return v;
  };
  const auto f16 = get("a_f16", uint16_t{});
  EXPECT_EQ(fp16_to_float(f16[0]), 1.5f);
  EXPECT_EQ(fp16_to_float(f16[1]), -2.0f);
  EXPECT_EQ(fp16_to_float(f16[2]), 65504.0f);
  EXPECT_EQ(get("b_i64", int64_t{}), (std::vector<int64_t>{-(int64_t{1} << 62), (int64_t{1} << 40) + 1}));
  const auto bf = get("c_bf16", uint16_t{});
  EXPECT_EQ(bf16_to_float(bf[0]), 3.0f);
  EXPECT_EQ(bf16_to_float(bf[1]), -0.5f);
  EXPECT_EQ(get("d_f32", float{}), (std::vector<float>{0.1f, 0.2f, 0.3f, 1e30f}));
  EXPECT_EQ(f.at("d_f32").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(f.at("d_f32").global_shape, (std::vector<int64_t>{2, 2}));  // no metadata: the shape
  EXPECT_EQ(f.at("d_f32").layout, "");
  EXPECT_EQ(get("e_i32", int32_t{}), (std::vector<int32_t>{-7}));
}

// Every truncation of a valid file is an Error naming the file.
TEST(Safetensors, EveryTruncationIsAnError) {
  const std::string dir = test::scratch_dir("safetensors_truncated");
  Fixture fx;
  ckpt::write_safetensors(dir + "/good.safetensors", fx.tensors);
  const std::string good = read_bytes(dir + "/good.safetensors");
  const std::string path = dir + "/cut.safetensors";
  for (size_t cut = 0; cut < good.size(); ++cut) {
    write_bytes(path, good.substr(0, cut));
    try {
      ckpt::SafetensorsFile f(path);
      ADD_FAILURE() << "a file cut at " << cut << " of " << good.size() << " bytes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  write_bytes(path, good + "x");
  EXPECT_THROW(ckpt::SafetensorsFile{path}, Error);
}

// Random byte corruption: either still a consistent file or an Error; never a crash.
TEST(Safetensors, RandomCorruptionNeverCrashes) {
  const std::string dir = test::scratch_dir("safetensors_corrupt");
  Fixture fx;
  ckpt::write_safetensors(dir + "/good.safetensors", fx.tensors);
  const std::string good = read_bytes(dir + "/good.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  const std::string path = dir + "/bad.safetensors";
  std::mt19937 rng(1234);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = rng() % (8 + n);  // the length and the header
      bad[pos] = static_cast<char>(trial % 2 == 0 ? rng() % 256 : "0123456789[]{},:\"-e. "[rng() % 21]);
    }
    write_bytes(path, bad);
    try {
      ckpt::SafetensorsFile f(path);
      for (const ckpt::SafetensorsTensor& t : f.tensors()) {  // accepted: everything must be in bounds
        ASSERT_GE(t.offset, 8 + static_cast<int64_t>(0));
        ASSERT_LE(t.offset + t.bytes, f.size_bytes());
      }
      ++accepted;
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 2000);
  std::printf("random corruption: %d rejected, %d still consistent\n", rejected, accepted);
}

std::string make_file(const std::string& header, const std::string& data, int64_t declared = -1) {
  const uint64_t n = declared >= 0 ? static_cast<uint64_t>(declared) : header.size();
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[static_cast<size_t>(b)] = static_cast<char>((n >> (8 * b)) & 0xFF);
  return out + header + data;
}

TEST(Safetensors, EachDefectHasItsMessage) {
  const std::string dir = test::scratch_dir("safetensors_defects");
  const std::string path = dir + "/x.safetensors";
  const std::string d8(8, '\1');
  struct Case {
    std::string bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"abc", "fewer than the 8-byte header length"},
      {make_file("{}", "", 1000), "exceeds the file size"},
      {make_file("[]", ""), "does not start with '{'"},
      {make_file("{\"a\":", ""), "header is not a JSON object"},
      {make_file(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", d8), "unsupported dtype 'F64'"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", d8), "run past the data area"},
      {make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           d8),
       "overlaps"},
      {make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), "gap of 4 bytes"},
      {make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8), "4 bytes after the last tensor"},
      {make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8), "needs 12"},
      {make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "non-negative integer"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8), "non-negative integer"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8), "end before they begin"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d8), "not a pair"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2]}})", d8), "missing 'data_offsets'"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", d8), "unexpected field 'x'"},
      {make_file(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
           d8),
       "duplicate key 'a'"},
      {make_file(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       "is not a string"},
      {make_file(R"({"__metadata__":[],"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8),
       "is not an object"},
      {make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", d8), "overflows"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"a.global_shape":"x"}})", d8),
       "is not a shape"},
      {make_file("{\"\xff\":{}}", ""), "header is not a JSON object"},
  };
  for (const Case& c : cases) {
    write_bytes(path, c.bytes);
    try {
      ckpt::SafetensorsFile f(path);
      ADD_FAILURE() << "accepted; expected: " << c.message;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path + ": safetensors: "), std::string::npos) << what;
      EXPECT_NE(what.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << what;
    }
  }
  // The same shapes, correct, are accepted (so the cases above fail for their defect only).
  write_bytes(path, make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8));
  EXPECT_EQ(ckpt::SafetensorsFile(path).at("a").numel, 2);
  EXPECT_THROW(ckpt::SafetensorsFile(dir + "/missing.safetensors"), Error);
}

}  // namespace
}  // namespace megatron::ckpt
