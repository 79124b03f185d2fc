// Can the optimizer step hide behind the next forward? A measurement, not a test: a GPT
// layer's forward GEMMs (cuBLASLt, bf16, as the engine runs them) on one stream and an AdamW
// pass over P fp32 parameters (30 bytes per parameter, as adamw_update_segments moves) on
// another, alone and at once, with the GEMMs limited to (SMs - k) multiprocessors
// (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) and AdamW on k persistent blocks.
//   overlap_probe [TOKENS=8192] [HIDDEN=2560] [LAYERS=32] [PARAMS=2.65e9]
// Prints ms for: GEMMs alone (all SMs, SMs - k), AdamW alone (full grid, k blocks), both at
// once, and the serial sum they would replace.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_checks.h"
#include "probe_gemm.h"

namespace {

__global__ void fill_kernel(float* x, long long n, float v) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = v * (float)((i * 2654435761ll) % 1000) * 1e-3f;
}
__global__ void fill_bf16_kernel(__nv_bfloat16* x, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16((float)((i * 2654435761ll) % 2001) * 1e-3f - 1.0f);
}

// Grid-stride AdamW over float4s: p, m, v read and written, g read, bf16 copy written.
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, __nv_bfloat16* __restrict__ out, long long n4) {
  const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f, wd = 0.1f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 pv = reinterpret_cast<float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(g)[i];
    float4 mv = reinterpret_cast<float4*>(m)[i];
    float4 vv = reinterpret_cast<float4*>(v)[i];
    float* pe = &pv.x;
    const float* ge = &gv.x;
    float* me = &mv.x;
    float* ve = &vv.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      me[j] = b1 * me[j] + (1 - b1) * ge[j];
      ve[j] = b2 * ve[j] + (1 - b2) * ge[j] * ge[j];
      pe[j] -= lr * (me[j] / (sqrtf(ve[j]) + eps) + wd * pe[j]);
    }
    reinterpret_cast<float4*>(p)[i] = pv;
    reinterpret_cast<float4*>(m)[i] = mv;
    reinterpret_cast<float4*>(v)[i] = vv;
    __nv_bfloat162 lo = __floats2bfloat162_rn(pe[0], pe[1]), hi = __floats2bfloat162_rn(pe[2], pe[3]);
    uint2 packed;
    packed.x = *reinterpret_cast<unsigned*>(&lo);
    packed.y = *reinterpret_cast<unsigned*>(&hi);
    reinterpret_cast<uint2*>(out)[i] = packed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long long T = argc > 1 ? std::atoll(argv[1]) : 8192;
  const long long h = argc > 2 ? std::atoll(argv[2]) : 2560;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 32;
  const long long P = (argc > 4 ? (long long)std::atof(argv[4]) : 2650000000ll) / 4 * 4;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("overlap_probe on %s (%d SMs): tokens %lld hidden %lld layers %d params %.3g\n", prop.name, sms, T, h,
              layers, (double)P);

  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  const size_t ws_bytes = 32u << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  __nv_bfloat16 *x, *w, *y;
  CK(cudaMalloc(&x, T * 4 * h * 2));
  CK(cudaMalloc(&y, T * 4 * h * 2));
  CK(cudaMalloc(&w, 4 * h * 4 * h * 2));
  fill_bf16_kernel<<<1024, 256>>>(x, T * 4 * h);
  fill_bf16_kernel<<<1024, 256>>>(w, 16 * h * h);
  float *p, *g, *m, *v;
  __nv_bfloat16* out;
  CK(cudaMalloc(&p, P * 4));
  CK(cudaMalloc(&g, P * 4));
  CK(cudaMalloc(&m, P * 4));
  CK(cudaMalloc(&v, P * 4));
  CK(cudaMalloc(&out, P * 2));
  fill_kernel<<<1024, 256>>>(p, P, 1.0f);
  fill_kernel<<<1024, 256>>>(g, P, 0.01f);
  fill_kernel<<<1024, 256>>>(m, P, 0.001f);
  fill_kernel<<<1024, 256>>>(v, P, 0.0001f);
  CK(cudaDeviceSynchronize());

  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2, start;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  CK(cudaEventCreate(&start));

  auto gemms_for = [&](int target) {
    std::vector<Gemm> v4;
    v4.push_back(make_gemm(lt, T, h, 3 * h, target, ws_bytes));
    v4.push_back(make_gemm(lt, T, h, h, target, ws_bytes));
    v4.push_back(make_gemm(lt, T, h, 4 * h, target, ws_bytes));
    v4.push_back(make_gemm(lt, T, 4 * h, h, target, ws_bytes));
    return v4;
  };
  auto run_gemms = [&](std::vector<Gemm>& gs, cudaStream_t s) {
    const float alpha = 1.0f, beta = 0.0f;
    for (int l = 0; l < layers; ++l)
      for (Gemm& gm : gs)
        CB(cublasLtMatmul(lt, gm.desc, &alpha, w, gm.a, x, gm.b, &beta, y, gm.c, y, gm.c, &gm.algo, ws, ws_bytes, s));
  };
  auto run_adam = [&](int blocks, int threads, cudaStream_t s) {
    adamw_kernel<<<blocks, threads, 0, s>>>(p, g, m, v, out, P / 4);
    CK(cudaGetLastError());
  };
  auto ms_between = [](cudaEvent_t a, cudaEvent_t b) {
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    return (double)t;
  };
  // Warm the clocks and power state as a training step would.
  std::vector<Gemm> full = gemms_for(0);
  for (int i = 0; i < 3; ++i) {
    run_gemms(full, s1);
    run_adam(sms * 8, 256, s1);
  }
  CK(cudaStreamSynchronize(s1));

  auto time_one = [&](auto&& f) {
    CK(cudaEventRecord(e0, s1));
    f(s1);
    CK(cudaEventRecord(e1, s1));
    CK(cudaEventSynchronize(e1));
    return ms_between(e0, e1);
  };
  const double g_full = time_one([&](cudaStream_t s) { run_gemms(full, s); });
  const double a_full = time_one([&](cudaStream_t s) { run_adam(sms * 8, 256, s); });
  std::printf("alone: gemms %.2f ms, adamw %.2f ms (%.2f TB/s), serial %.2f ms\n", g_full, a_full,
              30.0 * P / a_full / 1e9, g_full + a_full);
  // Naive concurrency: both full.
  {
    CK(cudaEventRecord(start, s1));
    CK(cudaStreamWaitEvent(s2, start));
    run_adam(sms * 8, 256, s2);
    CK(cudaEventRecord(e2, s2));
    run_gemms(full, s1);
    CK(cudaEventRecord(e1, s1));
    CK(cudaStreamWaitEvent(s1, e2));
    CK(cudaEventRecord(e0, s1));
    CK(cudaEventSynchronize(e0));
    std::printf("both full grids at once: gemms end %.2f, adamw end %.2f, all %.2f ms\n", ms_between(start, e1),
                ms_between(start, e2), ms_between(start, e0));
  }
  for (int k : {4, 8, 12, 16, 24, 32}) {
    std::vector<Gemm> part = gemms_for(sms - k);
    for (int threads : {512, 1024}) {
      for (int per_sm : {1, 2}) {
        if (threads * per_sm > 2048) continue;
        const int blocks = k * per_sm;
        const double g_part = time_one([&](cudaStream_t s) { run_gemms(part, s); });
        const double a_part = time_one([&](cudaStream_t s) { run_adam(blocks, threads, s); });
        CK(cudaEventRecord(start, s1));
        CK(cudaStreamWaitEvent(s2, start));
        run_adam(blocks, threads, s2);
        CK(cudaEventRecord(e2, s2));
        run_gemms(part, s1);
        CK(cudaEventRecord(e1, s1));
        CK(cudaStreamWaitEvent(s1, e2));
        CK(cudaEventRecord(e0, s1));
        CK(cudaEventSynchronize(e0));
        std::printf(
            "k %2d SMs, %d x %4d threads: gemms alone %.2f (+%.1f%%), adamw alone %.2f (%.2f TB/s); "
            "at once: gemms end %.2f, adamw end %.2f, all %.2f ms (saves %.2f of %.2f serial)\n",
            k, per_sm, threads, g_part, 100.0 * (g_part / g_full - 1), a_part, 30.0 * P / a_part / 1e9,
            ms_between(start, e1), ms_between(start, e2), ms_between(start, e0),
            g_full + a_full - ms_between(start, e0), g_full + a_full);
      }
    }
  }
  return 0;
}
