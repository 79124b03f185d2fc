// A layer GEMM for the standalone CUDA probes (bench/*_probe.cu): bf16 in and out, fp32
// compute, cuBLASLt's first heuristic algorithm, optionally limited to `sm_target`
// multiprocessors (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET; 0: all).
#pragma once

#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>

#include "probe_checks.h"

struct Gemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
};

// y[T, out] = x[T, in] W[out, in]^T, column-major: C[out, T] = op(A = W as [in, out])^T B[in, T].
inline Gemm make_gemm(cublasLtHandle_t lt, long long tokens, long long in, long long out, int sm_target, size_t ws) {
  Gemm g{};
  CB(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
  if (sm_target > 0)
    CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof(sm_target)));
  CB(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_16BF, in, out, in));
  CB(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_16BF, in, tokens, in));
  CB(cublasLtMatrixLayoutCreate(&g.c, CUDA_R_16BF, out, tokens, out));
  cublasLtMatmulPreference_t pref;
  CB(cublasLtMatmulPreferenceCreate(&pref));
  CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  CB(cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.a, g.b, g.c, g.c, pref, 1, &r, &found));
  if (found == 0) {
    std::fprintf(stderr, "no algorithm\n");
    std::exit(1);
  }
  g.algo = r.algo;
  cublasLtMatmulPreferenceDestroy(pref);
  return g;
}
