// Probe: how much do a GEMM stream and the data-parallel collectives slow each other on one
// node, for NCCL's SM kernels against its copy-engine (CE) path?
//
// One process, one thread per GPU (all visible GPUs). For each communicator kind
//   sm      default CTA policy, plain cudaMalloc buffers (what megatron train does today)
//   sym     default CTA policy, buffers from ncclMemAlloc registered as symmetric windows
//   zero    NCCL_CTA_POLICY_ZERO, symmetric windows (NCCL 2.28: AlltoAll / AllGather on the
//           copy engines where it can)
// it times, on every rank, 5 collectives of one bucket (N fp32 elements, N/ranks per piece):
// reduce-scatter, all-to-all (the reduce-scatter's data movement without the sum) and a bf16
// all-gather, alone and beside 40 bf16 GEMMs (16384 x 1024 x 4096, the 350M FC2 backward's
// shape) on a second stream. Prints rank 0's times in ms.
//
// Build (no device code of its own): g++ -O2 -std=c++20 bench/ce_overlap_probe.cpp \
//          -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lnccl -lcublas -lcublasLt -lcudart -o ce_overlap_probe
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "probe_checks.h"  // CK (CUDA), CB (cuBLAS)

// NCCL's calls, checked as probe_checks.h checks CUDA's.
#define NK(x)                                                                                 \
  do {                                                                                        \
    ncclResult_t r_ = (x);                                                                    \
    if (r_ != ncclSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kColls = 5;
constexpr int kGemms = 40;
constexpr int kM = 16384, kN = 1024, kK = 4096;

struct Kind {
  const char* name;
  int policy;
  bool windows;
};

struct Buffers {
  float* send = nullptr;              // [N] the bucket
  float* recv = nullptr;              // [N] all-to-all output / reduce-scatter output at its start
  __nv_bfloat16* gathered = nullptr;  // [N] all-gather output
  std::vector<ncclWindow_t> windows;
};

void* alloc(size_t bytes, bool nccl) {
  void* p = nullptr;
  if (nccl)
    NK(ncclMemAlloc(&p, bytes));
  else
    CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::stoull(argv[1]) : (40ull << 20);  // bucket elements
  int ranks = 0;
  CK(cudaGetDeviceCount(&ranks));
  const Kind kinds[] = {{"sm", NCCL_CTA_POLICY_DEFAULT, false},
                        {"sym", NCCL_CTA_POLICY_DEFAULT, true},
                        {"zero", NCCL_CTA_POLICY_ZERO, true}};
  std::vector<ncclUniqueId> ids(3);
  for (auto& id : ids) NK(ncclGetUniqueId(&id));
  std::barrier sync(ranks);
  const size_t piece = n / ranks;
  std::printf("ranks %d, bucket %zu fp32 (%.1f MB), piece %zu, GEMM %dx%dx%d x %d\n", ranks, n, n * 4 / 1e6, piece, kM,
              kN, kK, kGemms);

  auto worker = [&](int rank) {
    CK(cudaSetDevice(rank));
    cudaStream_t s_gemm, s_comm;
    CK(cudaStreamCreateWithFlags(&s_gemm, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s_comm, cudaStreamNonBlocking));
    cublasHandle_t blas;
    CB(cublasCreate(&blas));
    CB(cublasSetStream(blas, s_gemm));
    void* a = alloc(size_t(kM) * kK * 2, false);
    void* b = alloc(size_t(kK) * kN * 2, false);
    void* c = alloc(size_t(kM) * kN * 2, false);
    const float one = 1.0f, zero = 0.0f;
    auto gemms = [&] {
      for (int i = 0; i < kGemms; ++i) {
        CB(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, kN, kM, kK, &one, b, CUDA_R_16BF, kN, a, CUDA_R_16BF, kK, &zero,
                        c, CUDA_R_16BF, kN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
    };
    cudaEvent_t e0, e_gemm, e_comm;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e_gemm));
    CK(cudaEventCreate(&e_comm));

    for (int k = 0; k < 3; ++k) {
      const Kind& kind = kinds[k];
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.CTAPolicy = kind.policy;
      ncclComm_t comm;
      NK(ncclCommInitRankConfig(&comm, ranks, ids[k], rank, &config));
      Buffers buf;
      buf.send = static_cast<float*>(alloc(n * 4, kind.windows));
      buf.recv = static_cast<float*>(alloc(n * 4, kind.windows));
      buf.gathered = static_cast<__nv_bfloat16*>(alloc(n * 2, kind.windows));
      if (kind.windows) {
        for (void* p : {static_cast<void*>(buf.send), static_cast<void*>(buf.recv), static_cast<void*>(buf.gathered)}) {
          ncclWindow_t w;
          const size_t bytes = p == buf.gathered ? n * 2 : n * 4;
          NK(ncclCommWindowRegister(comm, p, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
          buf.windows.push_back(w);
        }
      }
      auto coll = [&](int which) {
        for (int i = 0; i < kColls; ++i) {
          if (which == 0) {
            NK(ncclReduceScatter(buf.send, buf.recv + rank * piece, piece, ncclFloat32, ncclSum, comm, s_comm));
          } else if (which == 1) {
            NK(ncclAlltoAll(buf.send, buf.recv, piece, ncclFloat32, comm, s_comm));
          } else {
            NK(ncclAllGather(buf.gathered + rank * piece, buf.gathered, piece, ncclBfloat16, comm, s_comm));
          }
        }
      };
      const char* names[] = {"reduce_scatter fp32", "all_to_all fp32", "all_gather bf16"};
      // Warm up everything once.
      gemms();
      for (int w = 0; w < 3; ++w) coll(w);
      CK(cudaDeviceSynchronize());
      auto timed = [&](bool with_gemm, int which, float* t_gemm, float* t_comm) {
        sync.arrive_and_wait();
        CK(cudaEventRecord(e0, s_gemm));
        CK(cudaStreamWaitEvent(s_comm, e0));
        if (which >= 0) coll(which);
        if (with_gemm) gemms();
        CK(cudaEventRecord(e_gemm, s_gemm));
        CK(cudaEventRecord(e_comm, s_comm));
        CK(cudaDeviceSynchronize());
        CK(cudaEventElapsedTime(t_gemm, e0, e_gemm));
        CK(cudaEventElapsedTime(t_comm, e0, e_comm));
      };
      float g_alone = 0, dummy = 0;
      timed(true, -1, &g_alone, &dummy);
      timed(true, -1, &g_alone, &dummy);
      if (rank == 0) std::printf("[%s] %d GEMMs alone: %.3f ms\n", kind.name, kGemms, g_alone);
      for (int w = 0; w < 3; ++w) {
        float tg = 0, tc = 0, tg2 = 0, tc2 = 0;
        timed(false, w, &tg, &tc);
        timed(true, w, &tg2, &tc2);
        if (rank == 0) {
          std::printf(
              "[%s] %d x %s: alone %.3f ms (%.1f GB/s algbw) | beside GEMMs: collectives %.3f, GEMMs %.3f ms "
              "(+%.3f over alone)\n",
              kind.name, kColls, names[w], tc, kColls * double(w == 2 ? n * 2 : n * 4) / (tc * 1e6), tc2, tg2,
              tg2 - g_alone);
        }
      }
      sync.arrive_and_wait();
      for (ncclWindow_t w : buf.windows) NK(ncclCommWindowDeregister(comm, w));
      NK(ncclCommDestroy(comm));
      for (void* p : {static_cast<void*>(buf.send), static_cast<void*>(buf.recv), static_cast<void*>(buf.gathered)}) {
        if (kind.windows)
          NK(ncclMemFree(p));
        else
          CK(cudaFree(p));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back(worker, r);
  for (auto& t : threads) t.join();
  return 0;
}
