// Why do data-parallel collectives that run beside the backward still lengthen the step? A
// measurement, not a test. A chain of a GPT layer's bf16 GEMMs (cuBLASLt, heuristic algorithms
// as the engine runs them) on one stream; at every layer a "collective" starts on a second
// stream, as a gradient bucket's would:
//   sm k   a copy kernel on k blocks (what an NCCL ring kernel is: a few CTAs, each resident
//          for the whole collective, moving bytes);
//   sm k hi  the same on a stream of the highest priority;
//   sm k smem  the same with 48 KiB of shared memory per block, as NCCL's kernels hold (a GEMM
//          block needing most of an SM's shared memory cannot share the SM with it);
//   ce     cudaMemcpyAsync device to device (the copy engines; no SM).
// For each: the contender chain alone, the GEMMs alone, both at once. If the GEMMs lose about
// the contender's whole time, a resident kernel serialises with them (the GEMMs' CTAs on its SMs
// wait for it); if they lose about k / SMs of their time, it only takes its share.
//   comm_contention_probe [TOKENS=8192] [HIDDEN=2048] [LAYERS=24] [MBYTES=96]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_checks.h"
#include "probe_gemm.h"

namespace {

__global__ void fill_bf16_kernel(__nv_bfloat16* x, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    x[i] = __float2bfloat16((float)((i * 2654435761ll) % 2001) * 1e-3f - 1.0f);
}

// dst = src + dst over n float4s (a reduce step's traffic: two reads, one write).
__global__ void reduce_copy_kernel(float4* __restrict__ dst, const float4* __restrict__ src, long long n) {
  extern __shared__ float held[];  // only occupies the SM (sm k smem)
  if (n < 0) held[threadIdx.x] = 0.0f;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float4 a = src[i], b = dst[i];
    dst[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long long T = argc > 1 ? std::atoll(argv[1]) : 8192;
  const long long h = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int layers = argc > 3 ? std::atoi(argv[3]) : 24;
  const long long bytes = (argc > 4 ? std::atoll(argv[4]) : 96) << 20;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("comm_contention_probe on %s (%d SMs): tokens %lld hidden %lld layers %d, %lld MiB per collective\n",
              prop.name, sms, T, h, layers, bytes >> 20);

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
  float *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemset(src, 0, bytes));
  CK(cudaMemset(dst, 0, bytes));
  CK(cudaDeviceSynchronize());

  int lo_priority = 0, hi_priority = 0;
  CK(cudaDeviceGetStreamPriorityRange(&lo_priority, &hi_priority));
  cudaStream_t s1, s2, s2hi;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithPriority(&s2hi, cudaStreamNonBlocking, hi_priority));
  std::vector<cudaEvent_t> layer_start(layers);
  for (cudaEvent_t& e : layer_start) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t start, gemm_end, side_end, all_end;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&gemm_end));
  CK(cudaEventCreate(&side_end));
  CK(cudaEventCreate(&all_end));

  // Forward, dgrad and wgrad shapes of QKV, proj, FC1, FC2: 12 GEMMs per layer, as a backward's.
  std::vector<Gemm> gs;
  for (int pass = 0; pass < 3; ++pass) {
    gs.push_back(make_gemm(lt, T, h, 3 * h, 0, ws_bytes));
    gs.push_back(make_gemm(lt, T, h, h, 0, ws_bytes));
    gs.push_back(make_gemm(lt, T, h, 4 * h, 0, ws_bytes));
    gs.push_back(make_gemm(lt, T, 4 * h, h, 0, ws_bytes));
  }
  auto ms = [](cudaEvent_t a, cudaEvent_t b) {
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    return (double)t;
  };
  struct Contender {
    const char* name;
    int blocks;  // 0: copy engine
    cudaStream_t stream;
    size_t smem = 0;
  };
  auto run_side = [&](const Contender& c) {
    if (c.blocks == 0) {
      CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c.stream));
    } else {
      reduce_copy_kernel<<<c.blocks, 512, c.smem, c.stream>>>(reinterpret_cast<float4*>(dst),
                                                              reinterpret_cast<const float4*>(src), bytes / 16);
      CK(cudaGetLastError());
    }
  };
  // mode 0: GEMMs alone; 1: contenders alone (started at the same points, no GEMMs); 2: both.
  auto run = [&](const Contender* c, int mode, double* gemm_ms, double* side_ms, double* all_ms) {
    const float alpha = 1.0f, beta = 0.0f;
    CK(cudaEventRecord(start, s1));
    if (c) CK(cudaStreamWaitEvent(c->stream, start));
    for (int l = 0; l < layers; ++l) {
      if (c && mode != 0) {
        CK(cudaEventRecord(layer_start[l], s1));
        CK(cudaStreamWaitEvent(c->stream, layer_start[l]));
        run_side(*c);
      }
      if (mode != 1)
        for (Gemm& gm : gs)
          CB(cublasLtMatmul(lt, gm.desc, &alpha, w, gm.a, x, gm.b, &beta, y, gm.c, y, gm.c, &gm.algo, ws, ws_bytes,
                            s1));
    }
    CK(cudaEventRecord(gemm_end, s1));
    if (c) {
      CK(cudaEventRecord(side_end, c->stream));
      CK(cudaStreamWaitEvent(s1, side_end));
    }
    CK(cudaEventRecord(all_end, s1));
    CK(cudaEventSynchronize(all_end));
    *gemm_ms = ms(start, gemm_end);
    *side_ms = c ? ms(start, side_end) : 0.0;
    *all_ms = ms(start, all_end);
  };

  double g0 = 0, unused = 0, a0 = 0;
  for (int i = 0; i < 3; ++i) run(nullptr, 0, &g0, &unused, &a0);  // warm clocks and power
  run(nullptr, 0, &g0, &unused, &a0);
  std::printf("GEMMs alone: %.2f ms\n", g0);
  std::vector<Contender> cs;
  cs.push_back({"ce", 0, s2});
  for (int k : {4, 8, 16, 32}) cs.push_back({"sm", k, s2});
  for (int k : {8, 16}) cs.push_back({"sm hi", k, s2hi});
  for (int k : {8, 16, 32}) cs.push_back({"smem", k, s2, 48u << 10});
  for (const Contender& c : cs) {
    double g1 = 0, s1ms = 0, a1 = 0, g2 = 0, s2ms = 0, a2 = 0;
    run(&c, 1, &g1, &s1ms, &a1);  // the contenders alone (each starts when the last ends)
    run(&c, 2, &g2, &s2ms, &a2);
    const double side_each = s1ms / layers;
    std::printf(
        "%-6s k %2d: one collective alone %.3f ms (%.0f GB/s moved); with GEMMs: GEMMs end %.2f ms "
        "(+%.2f = %.0f%% of the contenders' %.2f ms; k/SMs share would be +%.2f), all end %.2f\n",
        c.name, c.blocks, side_each, 3.0 * bytes / side_each / 1e6 * (c.blocks == 0 ? 2.0 / 3.0 : 1.0), g2, g2 - g0,
        100.0 * (g2 - g0) / s1ms, s1ms, c.blocks * g0 / sms, a2);
  }
  return 0;
}
