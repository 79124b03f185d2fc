// CUDA backend vs the CPU reference: memory (zero fill, tracker counts), fill, init_normal, copy and dtype
// conversions (bit for bit), add/scale (bit for bit), bias_grad ("+=", fixed-order fp32 sums),
// sum_squares (double), all_finite, count_zeros and AdamW (bit for bit). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/normal_math_check.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/normal_math.h"
#include "core/tensor.h"

namespace megatron::backend {
namespace {

using test::get;
using test::random_tensor;
using test::set;
using test::test_rng;
using test::values;

constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    cpu_ = make_cpu_backend();
    gpu_ = make_cuda_backend(0);
  }

  Tensor to_gpu(const Tensor& host, MemoryKind kind = MemoryKind::kOther) {
    Tensor d = gpu_->empty(host.shape(), host.dtype(), kind);
    gpu_->copy(host, d);
    return d;
  }
  Tensor to_cpu(const Tensor& dev) { return to_host(*gpu_, dev); }
  Tensor convert_cpu(const Tensor& host, DType dtype) {
    Tensor h = Tensor::cpu(host.shape(), dtype);
    cpu_->copy(host, h);
    return h;
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> gpu_;
};

std::string hex_of(const Tensor& t, int64_t i) {
  std::ostringstream os;
  os << std::hex;
  switch (dtype_size(t.dtype())) {
    case 2:
      os << "0x" << static_cast<const uint16_t*>(t.data())[i];
      break;
    case 4:
      os << "0x" << static_cast<const uint32_t*>(t.data())[i];
      break;
    default:
      os << "0x" << static_cast<const uint64_t*>(t.data())[i];
      break;
  }
  return os.str();
}

// Bitwise equality of two host tensors; on failure names the first differing element.
void expect_bitwise(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const int64_t size = dtype_size(actual.dtype());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(static_cast<const char*>(actual.data()) + i * size,
                    static_cast<const char*>(expected.data()) + i * size, static_cast<size_t>(size)) != 0) {
      if (first < 0) first = i;
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << what << " " << actual.describe() << ": " << differ << " elements differ; first at " << first
                       << ": got " << (first >= 0 ? get(actual, first) : 0.0) << " ("
                       << (first >= 0 ? hex_of(actual, first) : "") << "), expected "
                       << (first >= 0 ? get(expected, first) : 0.0) << " ("
                       << (first >= 0 ? hex_of(expected, first) : "") << ")";
}

std::string name(DType d) { return std::string(dtype_name(d)); }

// ---- construction and memory -----------------------------------------------------------------

TEST_F(CudaBackendTest, MakeRejectsMissingDevices) {
  EXPECT_THROW(make_cuda_backend(cuda_device_count()), Error);
  EXPECT_THROW(make_cuda_backend(-1), Error);
  EXPECT_EQ(gpu_->device(), Device::kCUDA);
}

TEST_F(CudaBackendTest, EmptyIsZeroFilledAndCountedUnderItsKind) {
  MemoryTracker& tracker = memory_tracker(Device::kCUDA);
  for (int k = 0; k < kNumMemoryKinds; ++k) {
    const auto kind = static_cast<MemoryKind>(k);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
      const MemorySnapshot before = tracker.snapshot();
      {
        Tensor t = gpu_->empty({3, 5, 7}, dtype, kind);
        EXPECT_EQ(t.device(), Device::kCUDA);
        const MemorySnapshot during = tracker.snapshot();
        EXPECT_EQ(during.current[k] - before.current[k], 105 * dtype_size(dtype))
            << memory_kind_name(kind) << " " << name(dtype);
        EXPECT_EQ(during.current_total - before.current_total, 105 * dtype_size(dtype));
        Tensor h = to_cpu(t);
        Tensor zeros = Tensor::cpu({3, 5, 7}, dtype);
        expect_bitwise(h, zeros, "empty() contents");
        // A same-dtype transfer stages nothing; a converting one frees its staging buffer.
        if (is_float(dtype)) {
          Tensor other = Tensor::cpu({105}, dtype == DType::kF32 ? DType::kBF16 : DType::kF32);
          gpu_->copy(t, other);
          gpu_->copy(other, t);
        }
        const MemorySnapshot after_copies = tracker.snapshot();
        EXPECT_EQ(after_copies.current, during.current) << "copy() left staging memory behind";
      }
      const MemorySnapshot after = tracker.snapshot();
      EXPECT_EQ(after.current, before.current) << "freeing " << memory_kind_name(kind) << " " << name(dtype);
    }
  }
  // Zero-element tensors are legal and count nothing.
  const MemorySnapshot before = tracker.snapshot();
  Tensor z = gpu_->empty({0, 4}, DType::kF32, MemoryKind::kActivations);
  EXPECT_EQ(tracker.snapshot().current_total, before.current_total);
  gpu_->fill(z, 1.0f);
  gpu_->synchronize();
}

TEST_F(CudaBackendTest, LargeAllocationIsCountedExactly) {
  MemoryTracker& tracker = memory_tracker(Device::kCUDA);
  const MemorySnapshot before = tracker.snapshot();
  const int64_t n = 50304LL * 768;  // the GPT-2 embedding
  Tensor t = gpu_->empty({50304, 768}, DType::kBF16, MemoryKind::kParams);
  const MemorySnapshot during = tracker.snapshot();
  EXPECT_EQ(
      during.current[static_cast<int>(MemoryKind::kParams)] - before.current[static_cast<int>(MemoryKind::kParams)],
      2 * n);
  EXPECT_EQ(gpu_->count_zeros(t), n);  // and really zero-filled
}

// ---- fill --------------------------------------------------------------------------------

// copy_to_host_async into host_staging returns before the copy and reads src in stream order:
// src overwritten by an op queued after it leaves dst with the old values once synchronised.
TEST_F(CudaBackendTest, AsyncCopyToHostReadsTheSourceInStreamOrder) {
  auto rng = test_rng();
  const Tensor values = random_tensor({100003}, rng, DType::kF32);
  Tensor src = to_gpu(values);
  Tensor staged = gpu_->host_staging({100003}, DType::kF32);
  EXPECT_EQ(staged.device(), Device::kCPU);
  gpu_->copy_to_host_async(src, staged);
  gpu_->fill(src, 7.0f);
  gpu_->synchronize();
  expect_bitwise(staged, values, "staged copy");
  // Into ordinary host memory it works too (CUDA completes that copy before returning).
  Tensor plain = Tensor::cpu({100003}, DType::kF32);
  gpu_->copy_to_host_async(src, plain);
  gpu_->synchronize();
  EXPECT_EQ(plain.data_as<float>()[5], 7.0f);
  Tensor wrong = Tensor::cpu({100003}, DType::kBF16);
  EXPECT_DEATH(gpu_->copy_to_host_async(src, wrong), "same dtype and size");
}

TEST_F(CudaBackendTest, FillMatchesCpuBitForBit) {
  const float fills[] = {1.5f, -3.3f, 1e-6f, 7e4f, -42.7f, 0.1f};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (int64_t n : {1, 7, 129, 1000, 100003}) {
      for (float v : fills) {
        Tensor expected = Tensor::cpu({n}, dtype);
        cpu_->fill(expected, v);
        Tensor d = gpu_->empty({n}, dtype, MemoryKind::kOther);
        gpu_->fill(d, v);
        expect_bitwise(to_cpu(d), expected,
                       "fill(" + std::to_string(v) + ") " + name(dtype) + " n=" + std::to_string(n));
      }
    }
  }
}

// The parameter initialisation: the GPU's Box-Muller (core/normal_math.h) writes the CPU's bits
// for every element: 4M fp32 normals of one stream (the float result of two uniforms lands
// next to a rounding boundary often enough that libm-vs-CUDA log/cos would differ somewhere in
// there), every dtype, and the index maps of a row block and a column shard.
TEST_F(CudaBackendTest, InitNormalMatchesCpuBitForBit) {
  struct Case {
    int64_t n;
    NormalInit init;
  };
  const Case cases[] = {
      {int64_t{1} << 22, {1234, 7, 1.0f, 0, int64_t{1} << 22, int64_t{1} << 22}},
      {100003, {0x123456789abcdefULL, 1ULL << 40, 0.02f, 100003 * 3, 100003, 100003}},  // row block of rank 3
      {3 * 1000, {5, 9, 0.0025f, 1000, 1000, 4000}},                                    // rank 1's 1000 of 4000 columns
      {1, {2, 3, -1.5f, 0, 1, 1}},
  };
  for (DType dtype : kFloatTypes) {
    for (const Case& c : cases) {
      if (dtype != DType::kF32 && c.n > 1000000) continue;
      Tensor expected = Tensor::cpu({c.n}, dtype);
      cpu_->init_normal(expected, c.init);
      Tensor d = gpu_->empty({c.n}, dtype, MemoryKind::kOther);
      gpu_->init_normal(d, c.init);
      expect_bitwise(to_cpu(d), expected, "init_normal " + name(dtype) + " n=" + std::to_string(c.n));
    }
  }
}

// The doubles behind init_normal: the device's ln, cos and Box-Muller equal the host's entry
// points bit for bit at every one of the 2^24 values each uniform can take. (The float
// comparison above would miss an FMA contraction on either side: it changes ~4% of the
// doubles but almost never the rounded float.)
TEST_F(CudaBackendTest, NormalMathDoublesMatchTheHostOverTheWholeDomain) {
  const int64_t n = int64_t{1} << 24;
  const NormalMathValues d = normal_math_on_device(0, n);
  int64_t differ[3] = {0, 0, 0};
  int64_t first[3] = {-1, -1, -1};
  for (int64_t i = 0; i < n; ++i) {
    const double u1 = 1.0 - static_cast<double>(i) * (1.0 / 16777216.0);
    const double u2 = static_cast<double>(i) * (1.0 / 16777216.0);
    const double host[3] = {normal_math::log_positive_host(u1), normal_math::cos_two_pi_host(u2),
                            normal_math::box_muller_host(u1, u2)};
    const double dev[3] = {d.log_u1[static_cast<size_t>(i)], d.cos_u2[static_cast<size_t>(i)],
                           d.normal[static_cast<size_t>(i)]};
    for (int f = 0; f < 3; ++f) {
      if (std::memcmp(&host[f], &dev[f], sizeof(double)) != 0) {
        if (differ[f]++ == 0) first[f] = i;
      }
    }
  }
  EXPECT_EQ(differ[0], 0) << "log_positive differs first at i = " << first[0];
  EXPECT_EQ(differ[1], 0) << "cos_two_pi differs first at i = " << first[1];
  EXPECT_EQ(differ[2], 0) << "box_muller differs first at i = " << first[2];
}

// ---- copy --------------------------------------------------------------------------------

// fp32 values that exercise every rounding path: ties to even for bf16 and fp16, fp16
// subnormals and overflow, fp32 subnormals, signed zeros, infinities, NaNs with payloads, and
// random values over a wide exponent range.
Tensor conversion_probe(std::mt19937_64& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          1e6f,
                          -1e30f,
                          6.1e-5f,
                          6.0e-5f,
                          5.96e-8f,
                          2.98e-8f,
                          2.99e-8f,
                          1e-7f,
                          -3e-7f,
                          1e-40f,
                          -1e-45f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min()};
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  v.push_back(from_bits(0x7fc00000u));  // quiet NaN
  v.push_back(from_bits(0xffc12345u));  // negative NaN with payload
  v.push_back(from_bits(0x7f800001u));  // signalling NaN
  v.push_back(from_bits(0x3f808000u));  // 1 + 2^-8: bf16 tie, rounds to even (down)
  v.push_back(from_bits(0x3f818000u));  // 1 + 3*2^-8: bf16 tie, rounds up
  v.push_back(from_bits(0x3f801000u));  // 1 + 2^-11: fp16 tie, to even (down)
  v.push_back(from_bits(0x3f803000u));  // 1 + 3*2^-11: fp16 tie, up
  v.push_back(from_bits(0x7f7fffffu));  // rounds to bf16 inf
  std::uniform_int_distribution<int> expo(-30, 30);
  while (v.size() < 4099) v.push_back(test::random_value(rng) * std::ldexp(1.0f, expo(rng)));
  Tensor t = Tensor::cpu({static_cast<int64_t>(v.size())}, DType::kF32);
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

TEST_F(CudaBackendTest, CopyConvertsLikeTheCpuInEveryDirection) {
  auto rng = test_rng();
  const Tensor probe = conversion_probe(rng);
  const int64_t n = probe.numel();
  for (DType from : kFloatTypes) {
    const Tensor src_host = convert_cpu(probe, from);
    const Tensor src_dev = to_gpu(src_host);
    for (DType to : kFloatTypes) {
      const std::string what = name(from) + " -> " + name(to);
      const Tensor expected = convert_cpu(src_host, to);
      {  // host -> device
        Tensor d = gpu_->empty({n}, to, MemoryKind::kOther);
        gpu_->copy(src_host, d);
        expect_bitwise(to_cpu(d), expected, "host->device " + what);
      }
      {  // device -> host
        Tensor h = Tensor::cpu({n}, to);
        gpu_->copy(src_dev, h);
        expect_bitwise(h, expected, "device->host " + what);
      }
      {  // device -> device
        Tensor d = gpu_->empty({n}, to, MemoryKind::kOther);
        gpu_->copy(src_dev, d);
        expect_bitwise(to_cpu(d), expected, "device->device " + what);
      }
      {  // host -> host through the CUDA backend
        Tensor h = Tensor::cpu({n}, to);
        gpu_->copy(src_host, h);
        expect_bitwise(h, expected, "host->host " + what);
      }
    }
  }
  // And directly against core/dtype.h's conversions.
  const Tensor probe_dev = to_gpu(probe);
  Tensor bf = gpu_->empty({n}, DType::kBF16, MemoryKind::kOther);
  Tensor hf = gpu_->empty({n}, DType::kF16, MemoryKind::kOther);
  gpu_->copy(probe_dev, bf);
  gpu_->copy(probe_dev, hf);
  const Tensor bf_h = to_cpu(bf), hf_h = to_cpu(hf);
  int64_t bad_bf = 0, bad_hf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = probe.data_as<const float>()[i];
    if (bf_h.data_as<const uint16_t>()[i] != float_to_bf16(x) && bad_bf++ == 0) {
      ADD_FAILURE() << "bf16 of " << x << " [" << i << "]: got " << hex_of(bf_h, i) << ", float_to_bf16 gives 0x"
                    << std::hex << float_to_bf16(x);
    }
    if (hf_h.data_as<const uint16_t>()[i] != float_to_fp16(x) && bad_hf++ == 0) {
      ADD_FAILURE() << "fp16 of " << x << " [" << i << "]: got " << hex_of(hf_h, i) << ", float_to_fp16 gives 0x"
                    << std::hex << float_to_fp16(x);
    }
  }
  EXPECT_EQ(bad_bf, 0);
  EXPECT_EQ(bad_hf, 0);
}

TEST_F(CudaBackendTest, CopyRoundTripsEveryDtypeAndShape) {
  auto rng = test_rng();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : {Shape{1}, Shape{7}, Shape{127, 129}, Shape{2048, 3, 5}}) {
      Tensor h = Tensor::cpu(shape, dtype);
      std::uniform_int_distribution<int64_t> big(-(int64_t{1} << 40), int64_t{1} << 40);
      std::uniform_int_distribution<int32_t> small(-50304, 50304);
      for (int64_t i = 0; i < h.numel(); ++i) {
        if (dtype == DType::kI64) {
          h.data_as<int64_t>()[i] = big(rng);
        } else if (dtype == DType::kI32) {
          h.data_as<int32_t>()[i] = small(rng);
        } else {
          set(h, i, test::random_value(rng));
        }
      }
      Tensor d = to_gpu(h);
      Tensor d2 = gpu_->empty(shape, dtype, MemoryKind::kOther);
      gpu_->copy(d, d2);
      expect_bitwise(to_cpu(d2), h, "round trip " + name(dtype) + shape_string(shape));
    }
  }
}

// ---- add / scale ---------------------------------------------------------------------------

TEST_F(CudaBackendTest, AddMatchesCpuBitForBitIncludingAliasing) {
  auto rng = test_rng();
  struct Case {
    DType a, b, out;
  };
  const Case cases[] = {{DType::kF32, DType::kF32, DType::kF32},   {DType::kBF16, DType::kBF16, DType::kBF16},
                        {DType::kF16, DType::kF16, DType::kF16},   {DType::kBF16, DType::kF32, DType::kF32},
                        {DType::kF32, DType::kBF16, DType::kBF16}, {DType::kF16, DType::kBF16, DType::kF32}};
  for (const Case& c : cases) {
    for (int64_t n : {1, 7, 127, 129, 1000, 2048 * 768}) {
      const std::string what = "add " + name(c.a) + "+" + name(c.b) + "->" + name(c.out) + " n=" + std::to_string(n);
      const Tensor a = random_tensor({n}, rng, c.a), b = random_tensor({n}, rng, c.b);
      Tensor expected = Tensor::cpu({n}, c.out);
      cpu_->add(a, b, expected);
      const Tensor ad = to_gpu(a), bd = to_gpu(b);
      Tensor od = gpu_->empty({n}, c.out, MemoryKind::kOther);
      gpu_->add(ad, bd, od);
      expect_bitwise(to_cpu(od), expected, what);
      if (c.a == c.out) {  // out aliases a
        Tensor alias = to_gpu(a);
        gpu_->add(alias, bd, alias);
        expect_bitwise(to_cpu(alias), expected, what + " (out = a)");
      }
      if (c.b == c.out) {  // out aliases b
        Tensor alias = to_gpu(b);
        gpu_->add(ad, alias, alias);
        expect_bitwise(to_cpu(alias), expected, what + " (out = b)");
      }
    }
  }
}

TEST_F(CudaBackendTest, ScaleMatchesCpuBitForBit) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 129, 1000, 3 * 768 * 768 + 5}) {
      for (float alpha : {0.37f, -2.0f, 1.0f / 65536.0f}) {
        Tensor h = random_tensor({n}, rng, dtype);
        Tensor d = to_gpu(h);
        cpu_->scale(h, alpha);
        gpu_->scale(d, alpha);
        expect_bitwise(to_cpu(d), h, "scale " + name(dtype) + " n=" + std::to_string(n));
      }
    }
  }
}

// ---- bias_grad ------------------------------------------------------------------------------

// dbias (+=) column sums. Reference: the double sum dbias0 + sum_r dy[r, c]. Any fp32
// summation of N terms in any order has error <= (N-1) u sum|terms| (u = 2^-24), so GPU and
// CPU (different orders) each stay within gamma = N u of the reference, scaled by the column's
// sum of magnitudes; a 16-bit dbias adds one rounding (u16 |value|). A dbias that was
// overwritten instead of accumulated misses by |dbias0| >> that bound.
TEST_F(CudaBackendTest, BiasGradAccumulatesLikeCpu) {
  auto rng = test_rng();
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},       {7, 129},     {1000, 127}, {129, 1000},  {2048, 768},
                                                {2048, 3072}, {16384, 768}, {3, 50304},  {256, 50304}, {100000, 7}};
  for (DType dy_dtype : kFloatTypes) {
    std::vector<DType> db_dtypes = {DType::kF32};  // the fp32 main grad, or the model dtype
    if (dy_dtype != DType::kF32) db_dtypes.push_back(dy_dtype);
    for (DType db_dtype : db_dtypes) {
      for (auto [rows, cols] : shapes) {
        const std::string what = "bias_grad dy " + name(dy_dtype) + "[" + std::to_string(rows) + ", " +
                                 std::to_string(cols) + "] -> " + name(db_dtype);
        const Tensor dy = random_tensor({rows, cols}, rng, dy_dtype);
        const Tensor db0 = random_tensor({cols}, rng, db_dtype);
        Tensor db_cpu = test::clone(db0);
        cpu_->bias_grad(dy, db_cpu);
        const Tensor dyd = to_gpu(dy);
        Tensor dbd = to_gpu(db0);
        gpu_->bias_grad(dyd, dbd);
        const Tensor db_gpu = to_cpu(dbd);

        std::vector<double> ref(static_cast<size_t>(cols)), mag(static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c) {
          ref[c] = get(db0, c);
          mag[c] = std::abs(get(db0, c));
        }
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const double v = get(dy, r * cols + c);
            ref[c] += v;
            mag[c] += std::abs(v);
          }
        }
        const double u16 = db_dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
        int64_t misses = 0, worst = -1;
        double worst_ratio = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          double bound = static_cast<double>(rows + 1) * std::ldexp(1.0, -24) * mag[c];
          if (db_dtype != DType::kF32) bound = bound * (1 + u16) + u16 * std::abs(ref[c]);
          bound = 2 * bound + 1e-30;  // vs the CPU: both within the bound of the reference
          const double err = std::abs(get(db_gpu, c) - get(db_cpu, c));
          if (err > bound) ++misses;
          if (err / bound > worst_ratio) {
            worst_ratio = err / bound;
            worst = c;
          }
        }
        EXPECT_EQ(misses, 0) << what << ": " << misses << " columns out of bound; worst column " << worst << ": gpu "
                             << get(db_gpu, worst) << ", cpu " << get(db_cpu, worst) << ", reference " << ref[worst]
                             << " (error/bound " << worst_ratio << ")";
        // Deterministic: the same inputs give the same bits.
        Tensor again = to_gpu(db0);
        gpu_->bias_grad(dyd, again);
        expect_bitwise(to_cpu(again), db_gpu, what + " (rerun)");
      }
    }
  }
}

TEST_F(CudaBackendTest, BiasGradTwiceAddsTwice) {
  auto rng = test_rng();
  const Tensor dy = random_tensor({2048, 768}, rng, DType::kBF16);
  const Tensor db0 = random_tensor({768}, rng, DType::kF32);
  Tensor db_cpu = test::clone(db0);
  cpu_->bias_grad(dy, db_cpu);
  cpu_->bias_grad(dy, db_cpu);
  const Tensor dyd = to_gpu(dy);
  Tensor dbd = to_gpu(db0);
  gpu_->bias_grad(dyd, dbd);
  gpu_->bias_grad(dyd, dbd);
  // 4096 bf16 terms of magnitude <= 1 per column: 2 * 4097 * 2^-24 * 4096 ~ 4e-3 absolute.
  test::expect_close(to_cpu(dbd), values(db_cpu), 4e-3, 0.0, "bias_grad twice");
}

// add / scale read 16-byte vectors when every pointer is aligned and fall back to the scalar
// kernels otherwise: views one element into their buffers give the CPU's bits too. bias_grad
// reads the same columns element by element when dy is misaligned or cols % 8 (fp32: 4) != 0,
// in the same order: the aligned run's bits.
TEST_F(CudaBackendTest, AddScaleAndBiasGradOnMisalignedViews) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 9, 1001, 2048 * 768}) {
      const std::string what = name(dtype) + " n=" + std::to_string(n) + " at element 1";
      const Tensor a = random_tensor({n}, rng, dtype), b = random_tensor({n}, rng, dtype);
      Tensor expected = Tensor::cpu({n}, dtype);
      cpu_->add(a, b, expected);
      Tensor abuf = gpu_->empty({n + 1}, dtype, MemoryKind::kOther),
             bbuf = gpu_->empty({n + 1}, dtype, MemoryKind::kOther);
      Tensor obuf = gpu_->empty({n + 1}, dtype, MemoryKind::kOther);
      Tensor av = abuf.flat_view(1, {n}), bv = bbuf.flat_view(1, {n}), ov = obuf.flat_view(1, {n});
      gpu_->copy(a, av);
      gpu_->copy(b, bv);
      gpu_->add(av, bv, ov);
      expect_bitwise(to_cpu(ov), expected, "add " + what);
      Tensor scaled = test::clone(a);
      cpu_->scale(scaled, 0.37f);
      gpu_->scale(av, 0.37f);
      expect_bitwise(to_cpu(av), scaled, "scale " + what);
    }
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1000, 768}, {129, 1000}, {16384, 768}}) {
      const std::string what =
          "bias_grad " + name(dtype) + "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
      const Tensor dy = random_tensor({rows, cols}, rng, dtype);
      const Tensor db0 = random_tensor({cols}, rng, DType::kF32);
      Tensor dbd = to_gpu(db0);
      gpu_->bias_grad(to_gpu(dy), dbd);
      Tensor buf = gpu_->empty({rows * cols + 1}, dtype, MemoryKind::kOther);
      Tensor dyv = buf.flat_view(1, {rows, cols});
      gpu_->copy(dy, dyv);
      Tensor dbv = to_gpu(db0);
      gpu_->bias_grad(dyv, dbv);
      expect_bitwise(to_cpu(dbv), to_cpu(dbd), what + " misaligned vs aligned");
    }
  }
}

// ---- reductions ----------------------------------------------------------------------------

// Both sides square exactly in double and sum n non-negative terms in double (different
// orders): each is within (n-1) 2^-53 S of the exact sum S, so they differ by < 2 n 2^-53 S.
TEST_F(CudaBackendTest, SumSquaresMatchesCpuDouble) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 1000, 1 << 20 | 3, 768 * 50304}) {
      Tensor h = Tensor::cpu({n}, dtype);
      std::uniform_int_distribution<int> expo(-6, 6);  // magnitudes 2^-6 .. 2^6 (fine for fp16)
      for (int64_t i = 0; i < n; ++i) set(h, i, test::random_value(rng) * std::ldexp(1.0f, expo(rng)));
      const double expected = cpu_->sum_squares(h);
      const Tensor d = to_gpu(h);
      const double got = gpu_->sum_squares(d);
      const double tol = 2.0 * static_cast<double>(n) * std::ldexp(1.0, -53) * expected;
      EXPECT_NEAR(got, expected, tol) << "sum_squares " << name(dtype) << " n=" << n << " (relative error "
                                      << std::abs(got - expected) / expected << ")";
      EXPECT_EQ(gpu_->sum_squares(d), got) << "sum_squares is not deterministic, n=" << n;
      // A view that starts off the 16-byte grid (element-by-element loads) sums the same chunks
      // in the same order as an aligned copy of it (vector loads): the same bits.
      for (int64_t off : {1, 2, 3}) {
        if (off >= n) break;
        const Tensor view = d.slice(off, n);
        const double aligned = gpu_->sum_squares(to_gpu(to_cpu(view)));
        EXPECT_EQ(gpu_->sum_squares(view), aligned) << "sum_squares " << name(dtype) << " n=" << n << " offset " << off;
      }
    }
  }
  Tensor empty = gpu_->empty({0}, DType::kF32, MemoryKind::kOther);
  EXPECT_EQ(gpu_->sum_squares(empty), 0.0);
}

// sum_squares_each: one wait for many tensors (the gradient norm over a rank's counted ranges),
// each value the bits sum_squares gives it: mixed dtypes and sizes, unaligned views, an empty one.
TEST_F(CudaBackendTest, SumSquaresEachGivesEachTensorsSumSquares) {
  auto rng = test_rng();
  std::vector<Tensor> parts;
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 1000, 1 << 20 | 3}) {
      Tensor h = Tensor::cpu({n}, dtype);
      for (int64_t i = 0; i < n; ++i) set(h, i, test::random_value(rng));
      const Tensor d = to_gpu(h);
      parts.push_back(d);
      if (n > 3) parts.push_back(d.slice(3, n));
    }
  }
  parts.push_back(gpu_->empty({0}, DType::kF32, MemoryKind::kOther));
  const std::vector<double> each = gpu_->sum_squares_each(parts);
  ASSERT_EQ(each.size(), parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(each[i], gpu_->sum_squares(parts[i])) << "part " << i << ": " << parts[i].describe();
  }
  EXPECT_EQ(each.back(), 0.0);
  EXPECT_TRUE(gpu_->sum_squares_each({}).empty());
}

TEST_F(CudaBackendTest, AllFiniteFindsEveryNonFinite) {
  auto rng = test_rng();
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 1000, (1 << 20) + 1}) {
      Tensor h = random_tensor({n}, rng, dtype);
      EXPECT_TRUE(gpu_->all_finite(to_gpu(h))) << name(dtype) << " n=" << n;
      for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
        for (float b : bad) {
          Tensor hb = test::clone(h);
          set(hb, pos, b);
          EXPECT_EQ(gpu_->all_finite(to_gpu(hb)), cpu_->all_finite(hb));
          EXPECT_FALSE(gpu_->all_finite(to_gpu(hb))) << name(dtype) << " n=" << n << " " << b << " at " << pos;
        }
      }
    }
  }
  // Values that overflow fp16 are inf once stored.
  Tensor big = Tensor::cpu({3}, DType::kF32);
  big.data_as<float>()[1] = 1e5f;
  Tensor big16 = gpu_->empty({3}, DType::kF16, MemoryKind::kOther);
  gpu_->copy(big, big16);
  EXPECT_FALSE(gpu_->all_finite(big16));
  EXPECT_TRUE(gpu_->all_finite(to_gpu(big)));
  Tensor ints = gpu_->empty({5}, DType::kI32, MemoryKind::kOther);
  EXPECT_TRUE(gpu_->all_finite(ints));
}

TEST_F(CudaBackendTest, CountZerosMatchesCpu) {
  auto rng = test_rng();
  for (DType dtype : kFloatTypes) {
    for (int64_t n : {1, 7, 1000, (1 << 20) + 7}) {
      Tensor h = random_tensor({n}, rng, dtype);
      EXPECT_EQ(gpu_->count_zeros(to_gpu(h)), 0) << name(dtype);
      std::uniform_int_distribution<int64_t> pos(0, n - 1);
      for (int z = 0; z < 50; ++z) set(h, pos(rng), (z % 2) ? 0.0 : -0.0);
      set(h, n - 1, 0.0);
      if (dtype == DType::kF16 && n > 1) set(h, 0, 1e-7);  // an fp16 subnormal: not zero
      const int64_t expected = cpu_->count_zeros(h);
      EXPECT_GT(expected, 0);
      EXPECT_EQ(gpu_->count_zeros(to_gpu(h)), expected) << name(dtype) << " n=" << n;
    }
  }
}

// ---- AdamW ---------------------------------------------------------------------------------

TEST_F(CudaBackendTest, AdamWMatchesCpuBitForBit) {
  auto rng = test_rng();
  std::uniform_int_distribution<int> expo(-12, 4);
  for (int64_t n : {1, 7, 1000, (1 << 20) + 3}) {
    for (int64_t first_step : {1, 2, 10, 1000}) {
      for (float wd : {0.0f, 0.1f}) {
        Tensor p = random_tensor({n}, rng), m = random_tensor({n}, rng, DType::kF32, 1e-4f, 1e-2f);
        Tensor v = Tensor::cpu({n});
        for (int64_t i = 0; i < n; ++i) v.data_as<float>()[i] = std::abs(test::random_value(rng, 1e-8f, 1e-3f));
        Tensor pd = to_gpu(p), md = to_gpu(m), vd = to_gpu(v);
        for (int64_t step = first_step; step < first_step + 3; ++step) {
          Tensor g = Tensor::cpu({n});
          for (int64_t i = 0; i < n; ++i) g.data_as<float>()[i] = test::random_value(rng) * std::ldexp(1.0f, expo(rng));
          AdamWStep s;
          s.lr = step % 2 ? 3e-4f : 6e-4f;
          s.beta1 = 0.9f;
          s.beta2 = 0.95f;
          s.eps = 1e-8f;
          s.weight_decay = wd;
          s.step = step;
          s.grad_scale = step % 3 == 0 ? 0.3f : 1.0f;  // a clipping step now and then
          cpu_->adamw_update(p, g, m, v, s);
          gpu_->adamw_update(pd, to_gpu(g), md, vd, s);
          const std::string what =
              "adamw n=" + std::to_string(n) + " step " + std::to_string(step) + " wd=" + std::to_string(wd);
          expect_bitwise(to_cpu(pd), p, what + " param");
          expect_bitwise(to_cpu(md), m, what + " exp_avg");
          expect_bitwise(to_cpu(vd), v, what + " exp_avg_sq");
        }
      }
    }
  }
}

// The one-launch AdamW over segments (tiles of 16384 elements crossing segment boundaries,
// gaps, a segment inside one tile) equals the CPU's per-segment reference bit for bit, and so
// does the bf16/fp16/fp32 model copy — also when the copy starts 2 or 4 elements into its
// buffer (a distributed-optimizer shard: the 4-element stores need the copy aligned to 4 of
// its elements, else it is written element by element), leaving the buffer's other elements.
TEST_F(CudaBackendTest, AdamWSegmentsMatchCpuBitForBit) {
  auto rng = test_rng();
  const int64_t n = 3 * 16384 + 1001;
  // (offset, numel, decay): one spanning tiles, a tiny one, a gap, one ending at n.
  const std::vector<int64_t> rows = {0, 20000, 1, 20000, 3, 0, 20010, 16384, 1, 36394, 13000, 0, 49500, n - 49500, 1};
  Tensor seg = Tensor::cpu({5, 3}, DType::kI64);
  std::copy(rows.begin(), rows.end(), seg.data_as<int64_t>());
  const Tensor seg_d = to_gpu(seg);
  for (DType copy_dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t copy_offset : {0, 2, 4}) {
      Tensor p = random_tensor({n}, rng), m = random_tensor({n}, rng, DType::kF32, 1e-4f, 1e-2f);
      Tensor v = Tensor::cpu({n});
      for (int64_t i = 0; i < n; ++i) v.data_as<float>()[i] = std::abs(test::random_value(rng, 1e-8f, 1e-3f));
      Tensor copy_buffer = random_tensor({n + 4}, rng, copy_dtype);
      Tensor pd = to_gpu(p), md = to_gpu(m), vd = to_gpu(v), copy_buffer_d = to_gpu(copy_buffer);
      Tensor copy = copy_buffer.flat_view(copy_offset, {n}), copy_d = copy_buffer_d.flat_view(copy_offset, {n});
      for (int64_t step = 1; step <= 3; ++step) {
        const Tensor g = random_tensor({n}, rng, DType::kF32, 1e-6f, 1e-1f);
        AdamWStep s;
        s.lr = 3e-4f;
        s.beta2 = 0.95f;
        s.weight_decay = 0.1f;
        s.step = step;
        s.grad_scale = step == 2 ? 0.25f : 1.0f;
        cpu_->adamw_update_segments(p, g, m, v, seg, s, copy);
        gpu_->adamw_update_segments(pd, to_gpu(g), md, vd, seg_d, s, copy_d);
      }
      const std::string what =
          "adamw segments, copy " + std::string(dtype_name(copy_dtype)) + " at element " + std::to_string(copy_offset);
      expect_bitwise(to_cpu(pd), p, what + ": param");
      expect_bitwise(to_cpu(md), m, what + ": exp_avg");
      expect_bitwise(to_cpu(vd), v, what + ": exp_avg_sq");
      expect_bitwise(to_cpu(copy_buffer_d), copy_buffer, what + ": model copy buffer");
    }
  }
}

}  // namespace
}  // namespace megatron::backend
