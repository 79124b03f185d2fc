// sum_pieces_f32 (the sum half of the copy-engine reduce-scatter) against the host's sum in
// the same order: bit-identical, on both of its paths (16-byte rows, and any stride).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#if MT_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/piece_sum.h"
#endif

namespace megatron::backend {
namespace {

#if MT_WITH_CUDA
// The receive buffer [pieces, stride] of random values (row q: rank q's copy), summed on the
// device into out [n] and on the host in the same order.
void check_sum(int64_t pieces, int64_t stride, int64_t n, float scale, int64_t out_offset) {
  std::vector<float> in(static_cast<size_t>(pieces * stride));
  uint64_t state = 42 + static_cast<uint64_t>(stride);
  for (float& v : in) {
    const uint64_t r = splitmix64(state);
    v = (static_cast<float>(r >> 40) * (1.0f / 16777216.0f) - 0.5f) * 3.0f;
  }
  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float acc = 0.0f;
    for (int64_t q = 0; q < pieces; ++q) {
      volatile float product = scale * in[static_cast<size_t>(q * stride + i)];  // no fused multiply-add
      acc = acc + product;
    }
    want[static_cast<size_t>(i)] = acc;
  }
  float* d_in = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, in.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, static_cast<size_t>(n + out_offset) * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  sum_pieces_f32(d_in, d_out + out_offset, pieces, stride, n, scale, nullptr);
  std::vector<float> got(static_cast<size_t>(n));
  ASSERT_EQ(cudaMemcpy(got.data(), d_out + out_offset, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_in);
  cudaFree(d_out);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &got[static_cast<size_t>(i)], 4);
    std::memcpy(&b, &want[static_cast<size_t>(i)], 4);
    ASSERT_EQ(a, b) << "element " << i << " of " << n << ": " << got[static_cast<size_t>(i)] << " vs "
                    << want[static_cast<size_t>(i)] << " (pieces " << pieces << ", stride " << stride << ")";
  }
}
#endif

TEST(PieceSum, SumsTheReceivedPiecesInRankOrderLikeTheHost) {
  MT_REQUIRE_CUDA();
#if MT_WITH_CUDA
  check_sum(4, 1 << 16, 1 << 16, 0.25f, 0);       // float4 rows, the average of 4 ranks
  check_sum(4, 1 << 16, (1 << 16) - 3, 1.0f, 0);  // a short last piece: the scalar path
  check_sum(3, 1001, 999, 1.0f / 3.0f, 0);        // odd stride
  check_sum(8, 4096, 4096, 0.125f, 1);            // output not 16-byte aligned
  check_sum(2, 300000, 300000, 0.5f, 0);          // more elements than one wave of the grid
#endif
}

}  // namespace
}  // namespace megatron::backend
