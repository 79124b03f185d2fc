// CUDA backend layernorm and embeddings (backend/cuda/cuda_norm.cu) against the CPU
// reference on GPT shapes and awkward sizes, in fp32, bf16 and fp16: values within the
// stated tolerances, "(+=)" gradients, dx aliasing dy, and bit-identical reruns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/layernorm_paths.h"
#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::backend {
namespace {

using namespace megatron::test;

// ---- tests ------------------------------------------------------------------------------------

// [rows, h]: GPT hidden sizes 768/1024/2048/12288 at 2048 and 8192 rows, awkward sizes, and
// h = 25000, too long for the registers (the generic path) and for the forward's shared-memory
// row cache (the global-memory path). The fast path's configurations (cuda_norm.cu): h = 8, 12
// (one chunk, whole and partial), 96 and 1536 (1 and 2 warps per row), 4104 and 6144 (8 and 16
// warps), 8192 (16 warps; fp32 also 16) and 12288 (16 warps; fp32 the generic path); 4097 rows
// of 64 (a backward block with a partial last row group). The forward's warp-per-row kernel
// (16-bit rows up to 24 chunks of 8 per lane): 2560 (GPT-3 2.7B, 10 chunks), 2568 (11, the last
// partial), 3072 (12), 4104 (17, partial), 5120 (20) and 6144 (24; fp32 takes the row groups
// beyond 3072); the row groups' forward on a grid of the resident blocks: 8192 and 12288. The backward's fewer parts
// (ln_backward_parts): 513 x 5120 (n / 4 = 128 parts of 5 rows, the last short) and 258 x 12288
// (64 parts of 16-warp rows).
const std::vector<std::pair<int64_t, int64_t>> kLayernormShapes = {
    {1, 1},       {1, 7},        {1, 8},       {5, 12},      {7, 127},     {17, 96},   {129, 129},  {33, 1536},
    {9, 4104},    {4, 6144},     {3, 8192},    {4097, 64},   {1000, 1000}, {3, 25000}, {2048, 768}, {2048, 1024},
    {2048, 2048}, {2048, 12288}, {8192, 1024}, {8192, 2560}, {37, 2568},   {5, 3072},  {513, 5120}, {258, 12288}};

// x with the offset of a residual stream (mean ~ 3) on top of its random spread: a variance
// computed as E[x^2] - E[x]^2 in fp32 would fail the tolerances below.
Tensor layernorm_input(int64_t n, int64_t h, DType dt, uint64_t seed) {
  Tensor x = host_random({n, h}, DType::kF32, seed);
  Tensor out = Tensor::cpu({n, h}, dt);
  for (int64_t i = 0; i < x.numel(); ++i) set(out, i, get(x, i) + 3.0);
  return out;
}

TEST(CudaNorm, LayernormForwardMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const float eps = 1e-5f;
  uint64_t seed = 7;
  // Both forward kernels for rows that fit a warp (layernorm_paths.h); longer rows take the
  // same path either way.
  for (bool warp : {false, true}) {
    set_layernorm_warp_forward(*gpu, warp);
    for (const auto& [n, h] : kLayernormShapes) {
      for (DType dt : kFloatTypes) {
        const std::string what = shape_name({n, h}, dt) + (warp ? " (warp per row)" : "");
        const Tensor x = layernorm_input(n, h, dt, ++seed);
        const Tensor gamma = host_random({h}, dt, ++seed), beta = host_random({h}, dt, ++seed);
        Tensor want = cpu->empty({n, h}, dt, MemoryKind::kOther);
        Tensor want_mean = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor want_rstd = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
        cpu->layernorm_forward(x, gamma, beta, eps, want, want_mean, want_rstd);
        Tensor xd = to_device(*gpu, x), gd = to_device(*gpu, gamma), bd = to_device(*gpu, beta);
        Tensor outd = gpu->empty({n, h}, dt, MemoryKind::kOther);
        Tensor meand = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor rstdd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        gpu->layernorm_forward(xd, gd, bd, eps, outd, meand, rstdd);
        const Tensor got = to_host(*gpu, outd);
        // Error budget of the GPU's fp32 statistics (the CPU sums in double): a sum of h terms
        // of size <= 4, each thread adding <= 49 in sequence and then a 10-level tree, is
        // within ~60 * 2^-24 * 4 ~ 1.5e-5 of exact in the worst case, ~1e-6 typically, so the
        // mean (~3) is within 1e-6 + 2e-6 |mean| (7e-6).
        EXPECT_TRUE(close(to_host(*gpu, meand), want_mean, 1e-6, 2e-6, 0, "layernorm mean " + what));
        // The variance is a sum of squares of x - mean (no cancellation): the same relative
        // bound, ~1e-6 typical; rstd = 1/sqrt halves it. 1e-5 relative.
        EXPECT_TRUE(close(to_host(*gpu, rstdd), want_rstd, 0.0, 1e-5, 0, "layernorm rstd " + what));
        // out = (x - mean) rstd gamma + beta: the mean's error (7e-6) times rstd (<= ~2) and
        // |gamma| <= 1 gives 1.4e-5 absolute; 3e-5 absolute plus 1e-5 relative for the
        // products. 16-bit: 1 ulp of the CPU's rounded value.
        EXPECT_TRUE(close(got, want, 3e-5, 1e-5, 1, "layernorm out " + what));
        Tensor again = gpu->empty({n, h}, dt, MemoryKind::kOther);
        gpu->layernorm_forward(xd, gd, bd, eps, again, meand, rstdd);
        EXPECT_TRUE(bitwise(to_host(*gpu, again), got, "layernorm out rerun " + what));
      }
    }
  }
}

TEST(CudaNorm, LayernormBackwardMatchesTheCpuAccumulatesAndIsDeterministic) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const float eps = 1e-5f;
  uint64_t seed = 70;
  for (const auto& [n, h] : kLayernormShapes) {
    for (DType dt : kFloatTypes) {
      const std::string what = shape_name({n, h}, dt);
      const Tensor x = layernorm_input(n, h, dt, ++seed);
      const Tensor gamma = host_random({h}, dt, ++seed), beta = host_random({h}, dt, ++seed);
      const Tensor dy = host_random({n, h}, dt, ++seed);
      // The CPU's mean and rstd feed both backwards, so only the backward is compared.
      Tensor out = cpu->empty({n, h}, dt, MemoryKind::kOther);
      Tensor mean = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      Tensor rstd = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
      cpu->layernorm_forward(x, gamma, beta, eps, out, mean, rstd);
      // dgamma, dbeta are fp32 main gradients that start nonzero ("+=").
      const Tensor dgamma0 = host_random({h}, DType::kF32, ++seed), dbeta0 = host_random({h}, DType::kF32, ++seed);
      Tensor want_dx = cpu->empty({n, h}, dt, MemoryKind::kOther);
      Tensor want_dg = clone(dgamma0), want_db = clone(dbeta0);
      cpu->layernorm_backward(dy, x, gamma, mean, rstd, want_dx, want_dg, want_db);

      Tensor dyd = to_device(*gpu, dy), xd = to_device(*gpu, x), gd = to_device(*gpu, gamma);
      Tensor meand = to_device(*gpu, mean), rstdd = to_device(*gpu, rstd);
      Tensor dxd = gpu->empty({n, h}, dt, MemoryKind::kOther);
      Tensor dgd = to_device(*gpu, dgamma0), dbd = to_device(*gpu, dbeta0);
      gpu->layernorm_backward(dyd, xd, gd, meand, rstdd, dxd, dgd, dbd);
      const Tensor got_dx = to_host(*gpu, dxd), got_dg = to_host(*gpu, dgd), got_db = to_host(*gpu, dbd);

      // dx = rstd (g - mean(g) - xhat mean(g xhat)), |dx| ~ rstd |g| <= ~2: the GPU's fp32
      // row sums (vs double) move mean(g), mean(g xhat) by ~1e-6 of their O(1) terms, times
      // rstd and |xhat| <= ~3: 1e-5 absolute and relative. 16-bit: 1 ulp.
      EXPECT_TRUE(close(got_dx, want_dx, 1e-5, 1e-5, 1, "layernorm dx " + what));
      // dgamma, dbeta: fp32 sums over n rows in different orders (the CPU adds the rows in
      // sequence, the GPU in chunks of 64 then chunk totals). A sequential fp32 sum of n terms
      // is typically within sqrt(n) 2^-24 |running sum| of exact; bounded per column by
      // 2e-6 * sum |terms| (8e-3 for n = 8192, 40x the typical error), while one row lost or
      // counted twice moves a column by ~|term| ~ 0.5.
      std::vector<double> abs_g(static_cast<size_t>(h), 0.0), abs_b(static_cast<size_t>(h), 0.0);
      for (int64_t r = 0; r < n; ++r) {
        const double m = get(mean, r), s = get(rstd, r);
        for (int64_t j = 0; j < h; ++j) {
          const double d = get(dy, r * h + j);
          abs_g[j] += std::abs(d * (get(x, r * h + j) - m) * s);
          abs_b[j] += std::abs(d);
        }
      }
      int64_t bad = 0, worst = -1;
      double worst_ratio = 0.0;
      for (int64_t j = 0; j < h; ++j) {
        const double eg = std::abs(get(got_dg, j) - get(want_dg, j)) / (1e-6 + 2e-6 * abs_g[j]);
        const double eb = std::abs(get(got_db, j) - get(want_db, j)) / (1e-6 + 2e-6 * abs_b[j]);
        const double ratio = std::max(eg, eb);
        if (!(ratio <= 1.0)) {
          ++bad;
          if (worst < 0 || ratio > worst_ratio) worst = j, worst_ratio = ratio;
        }
      }
      EXPECT_EQ(bad, 0) << "layernorm dgamma/dbeta " << what << ": " << bad << " of " << h
                        << " columns out of tolerance; worst column " << worst << " at " << worst_ratio
                        << "x the tolerance: dgamma got " << get(got_dg, std::max<int64_t>(worst, 0)) << " want "
                        << get(want_dg, std::max<int64_t>(worst, 0)) << ", dbeta got "
                        << get(got_db, std::max<int64_t>(worst, 0)) << " want "
                        << get(want_db, std::max<int64_t>(worst, 0));

      // Deterministic: the same inputs and starting gradients give the same bits.
      Tensor dgd2 = to_device(*gpu, dgamma0), dbd2 = to_device(*gpu, dbeta0);
      Tensor dxd2 = gpu->empty({n, h}, dt, MemoryKind::kOther);
      gpu->layernorm_backward(dyd, xd, gd, meand, rstdd, dxd2, dgd2, dbd2);
      EXPECT_TRUE(bitwise(to_host(*gpu, dgd2), got_dg, "layernorm dgamma rerun " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, dbd2), got_db, "layernorm dbeta rerun " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, dxd2), got_dx, "layernorm dx rerun " + what));

      // dx may alias dy: the parameter gradients read dy before dx overwrites it.
      Tensor dyd3 = to_device(*gpu, dy);
      Tensor dgd3 = to_device(*gpu, dgamma0), dbd3 = to_device(*gpu, dbeta0);
      gpu->layernorm_backward(dyd3, xd, gd, meand, rstdd, dyd3, dgd3, dbd3);
      EXPECT_TRUE(bitwise(to_host(*gpu, dyd3), got_dx, "layernorm dx in place " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, dgd3), got_dg, "layernorm dgamma with dx in place " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, dbd3), got_db, "layernorm dbeta with dx in place " + what));
    }
  }
}

// The fast path reads 16-byte vectors when every row is 16-byte aligned and the same chunks
// element by element otherwise, with the same arithmetic in the same order: views one element
// into their buffers (2- or 4-byte aligned) give the same bits as aligned tensors, forward and
// backward, including the parameter gradients.
TEST(CudaNorm, LayernormOnMisalignedViewsGivesTheAlignedBits) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const float eps = 1e-5f;
  uint64_t seed = 900;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {3, 8}, {129, 768}, {64, 1024}, {5, 12288}};
  for (bool warp : {false, true}) {
    set_layernorm_warp_forward(*gpu, warp);
    for (const auto& [n, h] : shapes) {
      for (DType dt : kFloatTypes) {
        const std::string what = "misaligned " + shape_name({n, h}, dt) + (warp ? " (warp per row)" : "");
        const Tensor x = layernorm_input(n, h, dt, ++seed), dy = host_random({n, h}, dt, ++seed);
        const Tensor gamma = host_random({h}, dt, ++seed), beta = host_random({h}, dt, ++seed);
        const Tensor dg0 = host_random({h}, DType::kF32, ++seed), db0 = host_random({h}, DType::kF32, ++seed);
        Tensor gd = to_device(*gpu, gamma), bd = to_device(*gpu, beta);
        // Aligned.
        Tensor xd = to_device(*gpu, x), dyd = to_device(*gpu, dy);
        Tensor outd = gpu->empty({n, h}, dt, MemoryKind::kOther), dxd = gpu->empty({n, h}, dt, MemoryKind::kOther);
        Tensor meand = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor rstdd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor dgd = to_device(*gpu, dg0), dbd = to_device(*gpu, db0);
        gpu->layernorm_forward(xd, gd, bd, eps, outd, meand, rstdd);
        gpu->layernorm_backward(dyd, xd, gd, meand, rstdd, dxd, dgd, dbd);
        // Views at element 1 of buffers one element longer.
        Tensor xbuf = gpu->empty({n * h + 1}, dt, MemoryKind::kOther);
        Tensor dybuf = gpu->empty({n * h + 1}, dt, MemoryKind::kOther);
        Tensor obuf = gpu->empty({n * h + 1}, dt, MemoryKind::kOther);
        Tensor dxbuf = gpu->empty({n * h + 1}, dt, MemoryKind::kOther);
        Tensor xv = xbuf.flat_view(1, {n, h}), dyv = dybuf.flat_view(1, {n, h});
        Tensor ov = obuf.flat_view(1, {n, h}), dxv = dxbuf.flat_view(1, {n, h});
        gpu->copy(x, xv);
        gpu->copy(dy, dyv);
        Tensor mean2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor rstd2 = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
        Tensor dg2 = to_device(*gpu, dg0), db2 = to_device(*gpu, db0);
        gpu->layernorm_forward(xv, gd, bd, eps, ov, mean2, rstd2);
        gpu->layernorm_backward(dyv, xv, gd, mean2, rstd2, dxv, dg2, db2);
        EXPECT_TRUE(bitwise(to_host(*gpu, ov), to_host(*gpu, outd), "layernorm out " + what));
        EXPECT_TRUE(bitwise(to_host(*gpu, mean2), to_host(*gpu, meand), "layernorm mean " + what));
        EXPECT_TRUE(bitwise(to_host(*gpu, rstd2), to_host(*gpu, rstdd), "layernorm rstd " + what));
        EXPECT_TRUE(bitwise(to_host(*gpu, dxv), to_host(*gpu, dxd), "layernorm dx " + what));
        EXPECT_TRUE(bitwise(to_host(*gpu, dg2), to_host(*gpu, dgd), "layernorm dgamma " + what));
        EXPECT_TRUE(bitwise(to_host(*gpu, db2), to_host(*gpu, dbd), "layernorm dbeta " + what));
      }
    }
  }
}

// GPT-2 124M's shape, [16 x 1024, 768]: the fused backward's 256 blocks of 64 rows and the
// reduce give the same dgamma / dbeta bits on every run, and dx in place gives dx's bits.
TEST(CudaNorm, LayernormParameterGradientsAreBitwiseDeterministicAtGptScale) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const int64_t n = 16384, h = 768;
  uint64_t seed = 1200;
  for (DType dt : kFloatTypes) {
    const std::string what = shape_name({n, h}, dt);
    const Tensor x = layernorm_input(n, h, dt, ++seed), dy = host_random({n, h}, dt, ++seed);
    const Tensor gamma = host_random({h}, dt, ++seed), beta = host_random({h}, dt, ++seed);
    const Tensor dg0 = host_random({h}, DType::kF32, ++seed), db0 = host_random({h}, DType::kF32, ++seed);
    Tensor xd = to_device(*gpu, x), dyd = to_device(*gpu, dy), gd = to_device(*gpu, gamma), bd = to_device(*gpu, beta);
    Tensor outd = gpu->empty({n, h}, dt, MemoryKind::kOther);
    Tensor meand = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    Tensor rstdd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    gpu->layernorm_forward(xd, gd, bd, 1e-5f, outd, meand, rstdd);
    Tensor dx1 = gpu->empty({n, h}, dt, MemoryKind::kOther);
    Tensor dg1 = to_device(*gpu, dg0), db1 = to_device(*gpu, db0);
    gpu->layernorm_backward(dyd, xd, gd, meand, rstdd, dx1, dg1, db1);
    const Tensor want_dg = to_host(*gpu, dg1), want_db = to_host(*gpu, db1), want_dx = to_host(*gpu, dx1);
    for (int run = 0; run < 3; ++run) {
      Tensor dyi = to_device(*gpu, dy);
      Tensor dgi = to_device(*gpu, dg0), dbi = to_device(*gpu, db0);
      gpu->layernorm_backward(dyi, xd, gd, meand, rstdd, dyi, dgi, dbi);  // dx in place
      EXPECT_TRUE(bitwise(to_host(*gpu, dgi), want_dg, "layernorm dgamma run " + std::to_string(run) + " " + what));
      EXPECT_TRUE(bitwise(to_host(*gpu, dbi), want_db, "layernorm dbeta run " + std::to_string(run) + " " + what));
      EXPECT_TRUE(
          bitwise(to_host(*gpu, dyi), want_dx, "layernorm dx in place run " + std::to_string(run) + " " + what));
    }
    // dbeta = dbeta0 + the column sums of dy: within the fp32 summation bound of the double sum
    // (n terms of magnitude <= 1: (n + 1) 2^-24 * sum |dy| <= ~1e-3 relative to n).
    const Tensor got_db = want_db;
    int64_t bad = 0;
    for (int64_t j = 0; j < h; ++j) {
      double ref = get(db0, j), mag = std::abs(get(db0, j));
      for (int64_t r = 0; r < n; ++r) {
        ref += get(dy, r * h + j);
        mag += std::abs(get(dy, r * h + j));
      }
      bad += std::abs(get(got_db, j) - ref) > static_cast<double>(n + 1) * std::ldexp(1.0, -24) * mag;
    }
    EXPECT_EQ(bad, 0) << "layernorm dbeta " << what << ": columns off the double column sum";
  }
}

// Activations of different dtypes (the generic kernels), and parameters of another dtype than
// the activations (the fast path converts gamma / beta on load), against the CPU.
TEST(CudaNorm, LayernormWithMixedDtypesMatchesTheCpu) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  struct Case {
    DType x, param, out;
  };
  const Case cases[] = {{DType::kBF16, DType::kF32, DType::kBF16},
                        {DType::kF32, DType::kBF16, DType::kF32},
                        {DType::kBF16, DType::kBF16, DType::kF32},
                        {DType::kF32, DType::kF32, DType::kF16}};
  const int64_t n = 129, h = 768;
  uint64_t seed = 1500;
  for (const Case& c : cases) {
    const std::string what = std::string("x ") + std::string(dtype_name(c.x)) + " params " +
                             std::string(dtype_name(c.param)) + " out/dx " + std::string(dtype_name(c.out));
    const Tensor x = layernorm_input(n, h, c.x, ++seed), dy = host_random({n, h}, c.out, ++seed);
    const Tensor gamma = host_random({h}, c.param, ++seed), beta = host_random({h}, c.param, ++seed);
    Tensor want = cpu->empty({n, h}, c.out, MemoryKind::kOther);
    Tensor mean = cpu->empty({n}, DType::kF32, MemoryKind::kOther),
           rstd = cpu->empty({n}, DType::kF32, MemoryKind::kOther);
    cpu->layernorm_forward(x, gamma, beta, 1e-5f, want, mean, rstd);
    Tensor want_dx = cpu->empty({n, h}, c.out, MemoryKind::kOther);
    Tensor want_dg = cpu->empty({h}, DType::kF32, MemoryKind::kOther),
           want_db = cpu->empty({h}, DType::kF32, MemoryKind::kOther);
    cpu->layernorm_backward(dy, x, gamma, mean, rstd, want_dx, want_dg, want_db);

    Tensor xd = to_device(*gpu, x), gd = to_device(*gpu, gamma), bd = to_device(*gpu, beta), dyd = to_device(*gpu, dy);
    Tensor outd = gpu->empty({n, h}, c.out, MemoryKind::kOther);
    Tensor meand = gpu->empty({n}, DType::kF32, MemoryKind::kOther),
           rstdd = gpu->empty({n}, DType::kF32, MemoryKind::kOther);
    gpu->layernorm_forward(xd, gd, bd, 1e-5f, outd, meand, rstdd);
    // The tolerances of LayernormForwardMatchesTheCpu / LayernormBackward...: out within
    // 3e-5 + 1e-5 |out| or 1 ulp; dx within 1e-5 + 1e-5 |dx| or 1 ulp (the CPU's statistics
    // feed the backward).
    EXPECT_TRUE(close(to_host(*gpu, outd), want, 3e-5, 1e-5, 1, "layernorm out " + what));
    Tensor md = to_device(*gpu, mean), rd = to_device(*gpu, rstd);
    Tensor dxd = gpu->empty({n, h}, c.out, MemoryKind::kOther);
    Tensor dgd = gpu->empty({h}, DType::kF32, MemoryKind::kOther),
           dbd = gpu->empty({h}, DType::kF32, MemoryKind::kOther);
    // dy and dx in the output dtype: the generic backward where x's dtype differs.
    gpu->layernorm_backward(dyd, xd, gd, md, rd, dxd, dgd, dbd);
    EXPECT_TRUE(close(to_host(*gpu, dxd), want_dx, 1e-5, 1e-5, 1, "layernorm dx " + what));
    // dgamma / dbeta: sums of n = 129 terms of magnitude <= ~1.8 (|dy| <= 1, |xhat| <= ~1.8)
    // in different orders; the bound of LayernormBackward..., 1e-6 + 2e-6 * sum |terms| <=
    // 2e-6 * 129 * 1.8 ~ 4.6e-4, as an absolute tolerance.
    EXPECT_TRUE(close(to_host(*gpu, dgd), want_dg, 5e-4, 0.0, 0, "layernorm dgamma " + what));
    EXPECT_TRUE(close(to_host(*gpu, dbd), want_db, 5e-4, 0.0, 0, "layernorm dbeta " + what));
  }
}

// A LayerNorm backward adding its dx into a residual gradient (dx_write = kAccumulate): x of
// dtype `x`, dy / dx / the residual of dtype `act`, the residual's [n, h] view `offset` elements
// into its buffer (1 makes the fast path's rows misaligned).
struct ResidualCase {
  int64_t n, h;
  DType x, act;
  int64_t offset;
};

// A case's inputs on the device (x, gamma, dy, and mean / rstd from the GPU forward) and its
// residual gradient on the host: 8 v + shift for v random in +-[0.1, 1], wider than the
// LayerNorm gradient, so that the second rounding matters.
struct ResidualInputs {
  std::string what;
  Tensor resid, xd, gd, dyd, md, rd;

  // A fresh device copy of the residual: {its buffer, the [n, h] view in it}.
  std::pair<Tensor, Tensor> residual(Backend& gpu, const ResidualCase& c) const {
    Tensor store = to_device(gpu, resid);
    Tensor view = store.flat_view(c.offset, {c.n, c.h});
    return {store, view};
  }
};

ResidualInputs residual_inputs(Backend& gpu, const ResidualCase& c, uint64_t& seed, double shift) {
  ResidualInputs in;
  in.what =
      shape_name({c.n, c.h}, c.act) + " x " + std::string(dtype_name(c.x)) + (c.offset != 0 ? " (misaligned)" : "");
  const Tensor x = layernorm_input(c.n, c.h, c.x, ++seed), gamma = host_random({c.h}, c.x, ++seed);
  const Tensor beta = host_random({c.h}, c.x, ++seed);
  const Tensor dy = host_random({c.n, c.h}, c.act, ++seed);
  in.resid = host_random({c.n * c.h + c.offset}, c.act, ++seed);
  for (int64_t i = 0; i < in.resid.numel(); ++i) set(in.resid, i, 8.0 * get(in.resid, i) + shift);
  in.xd = to_device(gpu, x);
  in.gd = to_device(gpu, gamma);
  in.dyd = to_device(gpu, dy);
  Tensor bd = to_device(gpu, beta), outd = gpu.empty({c.n, c.h}, c.x, MemoryKind::kOther);
  in.md = gpu.empty({c.n}, DType::kF32, MemoryKind::kOther);
  in.rd = gpu.empty({c.n}, DType::kF32, MemoryKind::kOther);
  gpu.layernorm_forward(in.xd, in.gd, bd, 1e-5f, outd, in.md, in.rd);
  return in;
}

// dx_write = kAccumulate (the residual add fused into the backward) gives, bit for bit, the
// unfused pair on the GPU: the backward into a temporary, then add(residual, temporary). Both
// kernels: the fast path (one activation dtype; aligned and, through a view one element in,
// misaligned rows) and the generic path (x in another dtype than dy / dx). dgamma / dbeta do
// not depend on dx_write: the same bits too.
TEST(CudaNorm, LayernormBackwardAddingIntoDxIsTheUnfusedPairBitForBit) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const ResidualCase cases[] = {{2048, 2048, DType::kBF16, DType::kBF16, 0}, {129, 768, DType::kF16, DType::kF16, 0},
                                {33, 1000, DType::kF32, DType::kF32, 0},     {65, 1536, DType::kBF16, DType::kBF16, 1},
                                {3, 25000, DType::kBF16, DType::kBF16, 0},   {129, 768, DType::kBF16, DType::kF32, 0},
                                {17, 770, DType::kBF16, DType::kBF16, 0}};  // h % 8 != 0: fast path, element by element
  uint64_t seed = 1700;
  for (const ResidualCase& c : cases) {
    const ResidualInputs in = residual_inputs(*gpu, c, seed, 0.0);
    const std::string& what = in.what;
    Tensor tmp = gpu->empty({c.n, c.h}, c.act, MemoryKind::kOther);
    auto [want_store, want] = in.residual(*gpu, c);
    // dgamma / dbeta accumulate into the same random values in both runs.
    const Tensor dg0 = host_random({c.h}, DType::kF32, ++seed), db0 = host_random({c.h}, DType::kF32, ++seed);
    Tensor dg1 = to_device(*gpu, dg0), db1 = to_device(*gpu, db0);
    gpu->layernorm_backward(in.dyd, in.xd, in.gd, in.md, in.rd, tmp, dg1, db1, GradWrite::kAccumulate);
    gpu->add(want, tmp, want);

    auto [got_store, got] = in.residual(*gpu, c);
    Tensor dg2 = to_device(*gpu, dg0), db2 = to_device(*gpu, db0);
    gpu->layernorm_backward(in.dyd, in.xd, in.gd, in.md, in.rd, got, dg2, db2, GradWrite::kAccumulate,
                            GradWrite::kAccumulate);

    EXPECT_TRUE(bitwise(to_host(*gpu, got_store), to_host(*gpu, want_store), "fused residual add dx " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, dg2), to_host(*gpu, dg1), "fused residual add dgamma " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, db2), to_host(*gpu, db1), "fused residual add dbeta " + what));
    // The residual really entered: the fused result is not the bare LayerNorm gradient.
    EXPECT_FALSE(bitwise_equal(to_host(*gpu, got), to_host(*gpu, tmp))) << what;
  }
}

// layernorm_backward_colsum (the residual gradient added into dx, as the model runs it): dx,
// dgamma and dbeta are layernorm_backward's bits, whether the sums are taken in the kernel
// (rows of <= 2 chunks per thread for 16-bit: h = 1024, 2048, 770, 8; <= 3 for fp32: h = 256)
// or by bias_grad after it (16-bit h = 768, 1536, 2560 at 3 chunks, fp32 h = 1000 at 4, the
// generic path for h = 25000 and mixed dtypes); the column sums equal bias_grad of
// that dx up to summation order: |a - b| <= 2 n 2^-24 sum_i |dx_ij|. Accumulating adds the
// fresh sums onto the old values (one fp32 add).
TEST(CudaNorm, LayernormBackwardColsumIsTheColumnSumOfItsDx) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const ResidualCase cases[] = {{4096, 1024, DType::kBF16, DType::kBF16, 0},
                                {2048, 2048, DType::kBF16, DType::kBF16, 0},
                                {1024, 2560, DType::kBF16, DType::kBF16, 0},
                                {129, 768, DType::kF16, DType::kF16, 0},
                                {33, 1000, DType::kF32, DType::kF32, 0},
                                {100, 256, DType::kF32, DType::kF32, 0},
                                {65, 1536, DType::kBF16, DType::kBF16, 1},
                                {3, 25000, DType::kBF16, DType::kBF16, 0},  // generic path: bias_grad after
                                {129, 768, DType::kBF16, DType::kF32, 0},   // mixed dtypes: generic path
                                {17, 770, DType::kBF16, DType::kBF16, 0},   // h % 8 != 0
                                {1, 8, DType::kBF16, DType::kBF16, 0}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 2700;
  for (const ResidualCase& c : cases) {
    const ResidualInputs in = residual_inputs(*gpu, c, seed, -4.0);
    const std::string& what = in.what;
    auto [plain_store, plain] = in.residual(*gpu, c);
    Tensor dg1 = device_filled(*gpu, {c.h}, 0.0f), db1 = device_filled(*gpu, {c.h}, 0.0f);
    gpu->layernorm_backward(in.dyd, in.xd, in.gd, in.md, in.rd, plain, dg1, db1, GradWrite::kOverwrite,
                            GradWrite::kAccumulate);

    auto [got_store, got] = in.residual(*gpu, c);
    Tensor dg2 = device_filled(*gpu, {c.h}, nan), db2 = device_filled(*gpu, {c.h}, nan);
    Tensor cs = device_filled(*gpu, {c.h}, nan);
    gpu->layernorm_backward_colsum(in.dyd, in.xd, in.gd, in.md, in.rd, got, dg2, db2, cs, GradWrite::kOverwrite,
                                   GradWrite::kAccumulate, GradWrite::kOverwrite);
    const Tensor got_dx = to_host(*gpu, got), plain_dx = to_host(*gpu, plain);
    EXPECT_TRUE(bitwise(got_dx, plain_dx, "colsum dx " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, dg2), to_host(*gpu, dg1), "colsum dgamma " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, db2), to_host(*gpu, db1), "colsum dbeta " + what));
    Tensor want = device_filled(*gpu, {c.h}, nan);
    gpu->bias_grad(got, want, GradWrite::kOverwrite);
    const Tensor got_cs = to_host(*gpu, cs), want_cs = to_host(*gpu, want);
    for (int64_t j = 0; j < c.h; ++j) {
      double abs_sum = 0.0;
      for (int64_t r = 0; r < c.n; ++r) abs_sum += std::fabs(get(got_dx, r * c.h + j));
      const double bound = 2.0 * static_cast<double>(c.n) * std::ldexp(1.0, -24) * abs_sum;
      ASSERT_LE(std::fabs(get(got_cs, j) - get(want_cs, j)), bound)
          << what << " column " << j << ": colsum " << get(got_cs, j) << ", bias_grad " << get(want_cs, j);
    }
    // Accumulating: the same sums added onto what is there.
    const Tensor base = host_random({c.h}, DType::kF32, ++seed);
    auto [again_store, again] = in.residual(*gpu, c);
    Tensor cs_acc = to_device(*gpu, base);
    gpu->layernorm_backward_colsum(in.dyd, in.xd, in.gd, in.md, in.rd, again, dg2, db2, cs_acc, GradWrite::kAccumulate,
                                   GradWrite::kAccumulate, GradWrite::kAccumulate);
    const Tensor acc = to_host(*gpu, cs_acc);
    for (int64_t j = 0; j < c.h; ++j) {
      ASSERT_EQ(static_cast<float>(get(acc, j)), static_cast<float>(get(base, j)) + static_cast<float>(get(got_cs, j)))
          << what << " accumulated column " << j;
    }
  }
}

// layernorm_backward_dropout_colsum: dx, dgamma and dbeta are layernorm_backward's bits; dz is
// dropout_backward of that dx bit for bit (the CPU's mask: the elementwise kernels' test checks
// dropout_backward against the CPU), with the mask offset of a shard (0, 4 and 3: the unaligned
// Philox groups) and p = 0.1 / 0.5; its column sums equal bias_grad(dz) up to summation order
// (the bound above), in the kernel (16-bit h = 1024, 2048, 770; fp32 h = 256) or by the
// separate passes (h = 768, 2560, the generic path).
TEST(CudaNorm, LayernormBackwardDropoutColsumIsTheDropoutBackwardAndItsColumnSums) {
  MT_REQUIRE_CUDA();
  auto gpu = make_cuda_backend();
  const ResidualCase cases[] = {
      {4096, 1024, DType::kBF16, DType::kBF16, 0}, {1024, 2048, DType::kBF16, DType::kBF16, 0},
      {1024, 2560, DType::kBF16, DType::kBF16, 0}, {129, 768, DType::kF16, DType::kF16, 0},
      {100, 256, DType::kF32, DType::kF32, 0},     {3, 25000, DType::kBF16, DType::kBF16, 0},
      {17, 770, DType::kBF16, DType::kBF16, 0}};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint64_t seed = 3100;
  int variant = 0;
  for (const ResidualCase& c : cases) {
    const ResidualInputs in = residual_inputs(*gpu, c, seed, -4.0);
    const DropoutParams dp{variant % 2 == 0 ? 0.1f : 0.5f, 77, 12345 + static_cast<uint64_t>(variant),
                           static_cast<uint64_t>(variant % 3 == 0   ? 0
                                                 : variant % 3 == 1 ? 4
                                                                    : 3)};
    ++variant;
    const std::string what = in.what + " p " + std::to_string(dp.p) + " offset " + std::to_string(dp.offset);
    auto [plain_store, plain] = in.residual(*gpu, c);
    Tensor dg1 = device_filled(*gpu, {c.h}, 0.0f), db1 = device_filled(*gpu, {c.h}, 0.0f);
    gpu->layernorm_backward(in.dyd, in.xd, in.gd, in.md, in.rd, plain, dg1, db1, GradWrite::kOverwrite,
                            GradWrite::kAccumulate);
    Tensor want_dz = gpu->empty({c.n, c.h}, c.act, MemoryKind::kOther);
    gpu->dropout_backward(plain, want_dz, dp);

    auto [got_store, got] = in.residual(*gpu, c);
    Tensor dg2 = device_filled(*gpu, {c.h}, nan), db2 = device_filled(*gpu, {c.h}, nan);
    Tensor cs = device_filled(*gpu, {c.h}, nan);
    Tensor dz = gpu->empty({c.n, c.h}, c.act, MemoryKind::kOther);
    gpu->fill(dz, nan);
    gpu->layernorm_backward_dropout_colsum(in.dyd, in.xd, in.gd, in.md, in.rd, got, dg2, db2, dz, cs, dp,
                                           GradWrite::kOverwrite, GradWrite::kAccumulate, GradWrite::kOverwrite);
    EXPECT_TRUE(bitwise(to_host(*gpu, got), to_host(*gpu, plain), "dropout colsum dx " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, dg2), to_host(*gpu, dg1), "dropout colsum dgamma " + what));
    EXPECT_TRUE(bitwise(to_host(*gpu, db2), to_host(*gpu, db1), "dropout colsum dbeta " + what));
    const Tensor got_dz = to_host(*gpu, dz);
    EXPECT_TRUE(bitwise(got_dz, to_host(*gpu, want_dz), "dropout colsum dz " + what));
    int64_t zeros = 0;
    for (int64_t i = 0; i < got_dz.numel(); ++i) zeros += get(got_dz, i) == 0.0;
    EXPECT_GT(zeros, 0) << what << ": no element dropped";
    Tensor want = device_filled(*gpu, {c.h}, nan);
    gpu->bias_grad(want_dz, want, GradWrite::kOverwrite);
    const Tensor got_cs = to_host(*gpu, cs), want_cs = to_host(*gpu, want);
    for (int64_t j = 0; j < c.h; ++j) {
      double abs_sum = 0.0;
      for (int64_t r = 0; r < c.n; ++r) abs_sum += std::fabs(get(got_dz, r * c.h + j));
      const double bound = 2.0 * static_cast<double>(c.n) * std::ldexp(1.0, -24) * abs_sum;
      ASSERT_LE(std::fabs(get(got_cs, j) - get(want_cs, j)), bound)
          << what << " column " << j << ": in the pass " << get(got_cs, j) << ", bias_grad " << get(want_cs, j);
    }
    // Accumulating: the same sums added onto what is there.
    const Tensor base = host_random({c.h}, DType::kF32, ++seed);
    auto [again_store, again] = in.residual(*gpu, c);
    Tensor cs_acc = to_device(*gpu, base);
    gpu->layernorm_backward_dropout_colsum(in.dyd, in.xd, in.gd, in.md, in.rd, again, dg2, db2, dz, cs_acc, dp,
                                           GradWrite::kAccumulate, GradWrite::kAccumulate, GradWrite::kAccumulate);
    const Tensor acc = to_host(*gpu, cs_acc);
    for (int64_t j = 0; j < c.h; ++j) {
      ASSERT_EQ(static_cast<float>(get(acc, j)), static_cast<float>(get(base, j)) + static_cast<float>(get(got_cs, j)))
          << what << " accumulated column " << j;
    }
  }
}

struct EmbeddingCase {
  int64_t b, s, vocab, h;
};

// GPT shapes (b sequences of s tokens, V = 50304, h = 768/1024) and awkward ones; small
// vocabularies make every token repeat many times.
const std::vector<EmbeddingCase> kEmbeddingCases = {{1, 1, 1, 1},       {3, 7, 7, 127},        {2, 129, 1000, 129},
                                                    {1, 127, 13, 1000}, {4, 2048, 50304, 768}, {8, 1024, 50304, 1024}};

// tokens[b, s] in [0, vocab); a quarter of them one "hot" token (as <|endoftext|> and common
// words are), so some vocabulary rows receive hundreds of positions.
Tensor random_tokens(int64_t b, int64_t s, int64_t vocab, uint64_t seed) {
  Tensor t = Tensor::cpu({b, s}, DType::kI32);
  uint64_t state = seed;
  const int32_t hot = static_cast<int32_t>(vocab / 2);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint64_t r = splitmix64(state);
    t.data_as<int32_t>()[i] = (r & 3) == 0 ? hot : static_cast<int32_t>((r >> 8) % static_cast<uint64_t>(vocab));
  }
  return t;
}

TEST(CudaNorm, EmbeddingForwardEqualsTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 300;
  for (const EmbeddingCase& c : kEmbeddingCases) {
    for (DType dt : kFloatTypes) {
      const std::string what = "embedding b=" + std::to_string(c.b) + " s=" + std::to_string(c.s) +
                               " V=" + std::to_string(c.vocab) + " " + shape_name({c.h}, dt);
      const Tensor tokens = random_tokens(c.b, c.s, c.vocab, ++seed);
      const Tensor wte = host_random({c.vocab, c.h}, dt, ++seed), wpe = host_random({c.s + 3, c.h}, dt, ++seed);
      Tensor want = cpu->empty({c.s, c.b, c.h}, dt, MemoryKind::kOther);
      cpu->embedding_forward(tokens, Tensor(), wte, wpe, want);
      Tensor tokd = to_device(*gpu, tokens), wted = to_device(*gpu, wte), wped = to_device(*gpu, wpe);
      Tensor outd = gpu->empty({c.s, c.b, c.h}, dt, MemoryKind::kOther);
      gpu->embedding_forward(tokd, Tensor(), wted, wped, outd);
      // One fp32 addition of the same two values, rounded RNE: equal bits.
      EXPECT_TRUE(bitwise(to_host(*gpu, outd), want, what));
    }
  }
}

TEST(CudaNorm, EmbeddingBackwardAccumulatesInTheCpuOrderBitForBit) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 500;
  for (const EmbeddingCase& c : kEmbeddingCases) {
    for (DType dt : kFloatTypes) {
      const std::string what = "embedding backward b=" + std::to_string(c.b) + " s=" + std::to_string(c.s) +
                               " V=" + std::to_string(c.vocab) + " dout " + shape_name({c.h}, dt);
      const Tensor tokens = random_tokens(c.b, c.s, c.vocab, ++seed);
      const Tensor dout = host_random({c.s, c.b, c.h}, dt, ++seed);
      // fp32 main gradients that start nonzero ("+=").
      const Tensor dwte0 = host_random({c.vocab, c.h}, DType::kF32, ++seed);
      const Tensor dwpe0 = host_random({c.s + 3, c.h}, DType::kF32, ++seed);
      Tensor want_te = clone(dwte0), want_pe = clone(dwpe0);
      cpu->embedding_backward(tokens, Tensor(), dout, want_te, want_pe);
      Tensor tokd = to_device(*gpu, tokens), doutd = to_device(*gpu, dout);
      Tensor ted = to_device(*gpu, dwte0), ped = to_device(*gpu, dwpe0);
      gpu->embedding_backward(tokd, Tensor(), doutd, ted, ped);
      const Tensor got_te = to_host(*gpu, ted), got_pe = to_host(*gpu, ped);
      // Both add each token's rows into the fp32 gradient one at a time in (s, b) row order,
      // and each position's b rows in order: the same fp32 additions, so the same bits.
      EXPECT_TRUE(bitwise(got_te, want_te, what + " dwte"));
      EXPECT_TRUE(bitwise(got_pe, want_pe, what + " dwpe"));
      // Rerun from the same starting gradients: the same bits.
      Tensor ted2 = to_device(*gpu, dwte0), ped2 = to_device(*gpu, dwpe0);
      gpu->embedding_backward(tokd, Tensor(), doutd, ted2, ped2);
      EXPECT_TRUE(bitwise(to_host(*gpu, ted2), got_te, what + " dwte rerun"));
      EXPECT_TRUE(bitwise(to_host(*gpu, ped2), got_pe, what + " dwpe rerun"));
    }
  }
}

// Position ids (--reset-position-ids): documents of random lengths restart the positions;
// forward and backward equal the CPU's bits (the backward adds the rows of each position id
// in (s, b) order on both sides).
TEST(CudaNorm, EmbeddingWithPositionIdsEqualsTheCpuBitForBit) {
  MT_REQUIRE_CUDA();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  uint64_t seed = 700;
  for (const EmbeddingCase& c : kEmbeddingCases) {
    Tensor positions = Tensor::cpu({c.b, c.s}, DType::kI32);
    uint64_t state = ++seed;
    for (int64_t bi = 0; bi < c.b; ++bi) {
      int32_t p = 0;
      for (int64_t si = 0; si < c.s; ++si) {
        positions.data_as<int32_t>()[bi * c.s + si] = p;
        p = splitmix64(state) % 7 == 0 ? 0 : p + 1;  // a document ends about every 7 tokens
      }
    }
    for (DType dt : kFloatTypes) {
      const std::string what = "embedding with position ids b=" + std::to_string(c.b) + " s=" + std::to_string(c.s) +
                               " V=" + std::to_string(c.vocab) + " " + shape_name({c.h}, dt);
      const Tensor tokens = random_tokens(c.b, c.s, c.vocab, ++seed);
      const Tensor wte = host_random({c.vocab, c.h}, dt, ++seed), wpe = host_random({c.s + 3, c.h}, dt, ++seed);
      Tensor want = cpu->empty({c.s, c.b, c.h}, dt, MemoryKind::kOther);
      cpu->embedding_forward(tokens, positions, wte, wpe, want);
      Tensor tokd = to_device(*gpu, tokens), posd = to_device(*gpu, positions);
      Tensor outd = gpu->empty({c.s, c.b, c.h}, dt, MemoryKind::kOther);
      gpu->embedding_forward(tokd, posd, to_device(*gpu, wte), to_device(*gpu, wpe), outd);
      EXPECT_TRUE(bitwise(to_host(*gpu, outd), want, what));

      const Tensor dout = host_random({c.s, c.b, c.h}, dt, ++seed);
      const Tensor dwte0 = host_random({c.vocab, c.h}, DType::kF32, ++seed);
      const Tensor dwpe0 = host_random({c.s + 3, c.h}, DType::kF32, ++seed);
      Tensor want_te = clone(dwte0), want_pe = clone(dwpe0);
      cpu->embedding_backward(tokens, positions, dout, want_te, want_pe);
      Tensor ted = to_device(*gpu, dwte0), ped = to_device(*gpu, dwpe0);
      gpu->embedding_backward(tokd, posd, to_device(*gpu, dout), ted, ped);
      EXPECT_TRUE(bitwise(to_host(*gpu, ted), want_te, what + " dwte"));
      EXPECT_TRUE(bitwise(to_host(*gpu, ped), want_pe, what + " dwpe"));
    }
  }
}

}  // namespace
}  // namespace megatron::backend
