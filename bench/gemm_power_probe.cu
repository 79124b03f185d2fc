// Does the GEMM algorithm that wins a short timing also win under the power cap? A measurement, not
// a test. A training step at 1.3B and larger runs against the H100's 700 W limit (SM clock median
// ~1605-1785 of 1980 MHz: bench/results/2026-11-24.md, "the step is power-capped"), while the
// engine's autotuning (cuda_gemm.cu: the fastest of cuBLASLt's top 32 candidates over 3 runs) times
// each candidate in a burst too short for the power controller to act. Under the cap time follows
// energy, so an algorithm that spends fewer joules per product could win in the step while losing
// the burst.
//   gemm_power_probe [TOKENS=8192] [HIDDEN=2048] [VOCAB=50304] [CANDIDATES=32] [SUSTAIN_MS=200]
// For each GEMM of a GPT layer as the engine calls it (row-major, bf16 operands, fp32
// accumulation; forward with its epilogue, input gradient, fp32 weight gradient; and the output
// layer), every candidate is timed twice: a burst as the autotuner does (after 30 ms idle: one
// untimed run, the mean of 3), and sustained (back-to-back for SUSTAIN_MS, the mean over the last
// 60%) while NVML is read every 5 ms for the SM clock and board power. Prints per problem the
// burst winner's and the sustained winner's sustained time, and the sum over a layer.
// NVML is loaded with dlopen (no nvml.h in the toolkit), as backend/cuda/gpu_telemetry_nvml.cpp.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "probe_checks.h"

namespace {

// NVML's C ABI as used here: return 0 = success, the device an opaque pointer, NVML_CLOCK_SM = 1,
// power in milliwatts.
struct Nvml {
  using Device = void*;
  int (*init)() = nullptr;
  int (*by_index)(unsigned, Device*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  Device dev = nullptr;
  bool ok = false;

  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_index = reinterpret_cast<int (*)(unsigned, Device*)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    clock = reinterpret_cast<int (*)(Device, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    power = reinterpret_cast<int (*)(Device, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    ok = init && by_index && clock && power && init() == 0 && by_index(0, &dev) == 0;
  }
};

__global__ void fill_bf16_kernel(__nv_bfloat16* x, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((float)(h % 2001u) * 1e-3f - 1.0f);  // uniform in [-1, 1]: training-like bit toggling
  }
}

// One GEMM problem in the engine's row-major terms: c[m, n] = op(a) op(b) (+ epilogue), with
// a [m, k] or (ta) [k, m], b [k, n] or (tb) [n, k]. Laid out for cuBLASLt as cuda_gemm.cu does:
// its A is our b, its B our a, D column-major [n, m].
struct Problem {
  std::string name;
  long long m, n, k;
  bool ta, tb;
  bool fp32_out;
  cublasLtEpilogue_t epilogue;
  bool residual;  // beta = 1 with C = the residual (linear_residual_forward)
};

struct Bound {
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t la{}, lb{}, lc{};
  const void *pa, *pb;
  void* pc;
  float beta;
};

const char* cluster_name(int id) {
  static const char* names[] = {"auto", "1x1", "2x1", "4x1", "1x2", "2x2", "4x2", "1x4", "2x4", "4x4"};
  return id >= 0 && id < 10 ? names[id] : "other";
}

std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
  int id = 0, tile = 0, stages = 0, splitk = 0, swizzle = 0, cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof(swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
  char buf[128];
  std::snprintf(buf, sizeof buf, "algo %d tile %d stages %d splitk %d swizzle %d cluster %s", id, tile, stages, splitk,
                swizzle, cluster_name(cluster));
  return buf;
}

struct Timing {
  double burst_ms = 0, sustained_ms = 0, clock_mhz = 0, power_w = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const long long T = argc > 1 ? std::atoll(argv[1]) : 8192;
  const long long h = argc > 2 ? std::atoll(argv[2]) : 2048;
  const long long V = argc > 3 ? std::atoll(argv[3]) : 50304;
  const int want = argc > 4 ? std::atoi(argv[4]) : 32;
  const double sustain_ms = argc > 5 ? std::atof(argv[5]) : 200.0;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  Nvml nvml;
  std::printf("gemm_power_probe on %s: tokens %lld hidden %lld vocab %lld, %d candidates, sustained %.0f ms%s\n",
              prop.name, T, h, V, want, sustain_ms, nvml.ok ? "" : " (no NVML: no clock/power)");

  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  const size_t ws_bytes = 32u << 20;  // the engine's cuBLASLt workspace
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  const long long big = std::max(T * 4 * h, std::max(T * V, V * h));
  __nv_bfloat16 *x, *w, *y, *aux;
  float* y32;
  CK(cudaMalloc(&x, big * 2));
  CK(cudaMalloc(&w, big * 2));
  CK(cudaMalloc(&y, big * 2));
  CK(cudaMalloc(&aux, big * 2));
  CK(cudaMalloc(&y32, big * 4));
  fill_bf16_kernel<<<1024, 256>>>(x, big, 1u);
  fill_bf16_kernel<<<1024, 256>>>(w, big, 2u);
  fill_bf16_kernel<<<1024, 256>>>(y, big, 3u);
  fill_bf16_kernel<<<1024, 256>>>(aux, big, 4u);
  __nv_bfloat16* bias;
  CK(cudaMalloc(&bias, 4 * h * 2 + V * 2));
  fill_bf16_kernel<<<64, 256>>>(bias, 4 * h + V, 5u);
  CK(cudaDeviceSynchronize());

  const cublasLtEpilogue_t none = CUBLASLT_EPILOGUE_DEFAULT, b = CUBLASLT_EPILOGUE_BIAS;
  const cublasLtEpilogue_t gelu = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dgelu = CUBLASLT_EPILOGUE_DGELU;
  // (m, n, k, ta, tb): forward y[T, out] = x[T, in] W[out, in]^T; input gradient dx[T, in] =
  // dy[T, out] W[out, in]; weight gradient dW[out, in] = dy[T, out]^T x[T, in] in fp32.
  const std::vector<Problem> problems = {
      {"qkv fwd (bias)", T, 3 * h, h, false, true, false, b, false},
      {"proj fwd (bias + residual)", T, h, h, false, true, false, b, true},
      {"fc1 fwd (gelu aux bias)", T, 4 * h, h, false, true, false, gelu, false},
      {"fc2 fwd (bias + residual)", T, h, 4 * h, false, true, false, b, true},
      {"qkv dgrad", T, h, 3 * h, false, false, false, none, false},
      {"proj dgrad", T, h, h, false, false, false, none, false},
      {"fc1 dgrad", T, h, 4 * h, false, false, false, none, false},
      {"fc2 dgrad (dgelu)", T, 4 * h, h, false, false, false, dgelu, false},
      {"qkv wgrad fp32", 3 * h, h, T, true, false, true, none, false},
      {"proj wgrad fp32", h, h, T, true, false, true, none, false},
      {"fc1 wgrad fp32", 4 * h, h, T, true, false, true, none, false},
      {"fc2 wgrad fp32", h, 4 * h, T, true, false, true, none, false},
      {"head fwd", T, V, h, false, true, false, none, false},
      {"head dgrad", T, h, V, false, false, false, none, false},
      {"head wgrad fp32", V, h, T, true, false, true, none, false},
  };

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto elapsed = [&] {
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    return (double)t;
  };

  double layer_burst = 0, layer_best = 0, head_burst = 0, head_best = 0;
  for (const Problem& p : problems) {
    Bound g{};
    const cublasOperation_t op_a = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    CB(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue)));
    const cudaDataType_t ct = p.fp32_out ? CUDA_R_32F : CUDA_R_16BF;
    if (p.epilogue == b || p.epilogue == gelu) {
      const void* bp = bias;
      const int32_t bt = ct;
      CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
      CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    }
    if (p.epilogue == gelu || p.epilogue == dgelu) {
      const void* ap = aux;
      const int64_t ld = p.n;
      const int32_t at = ct;
      CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof(ap)));
      CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
      CB(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at, sizeof(at)));
    }
    // a: rows x cols as stored (row-major), likewise b.
    const long long a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
    const long long b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
    CB(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, b_cols, b_rows, b_cols));
    CB(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, a_cols, a_rows, a_cols));
    CB(cublasLtMatrixLayoutCreate(&g.lc, ct, p.n, p.m, p.n));
    g.pa = w;  // our b (the weight, or x for the weight gradient): contents do not matter, sizes do
    g.pb = x;
    g.pc = p.fp32_out ? static_cast<void*>(y32) : static_cast<void*>(y);
    g.beta = p.residual ? 1.0f : 0.0f;

    cublasLtMatmulPreference_t pref;
    CB(cublasLtMatmulPreferenceCreate(&pref));
    CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
    std::vector<cublasLtMatmulHeuristicResult_t> cands(want);
    int found = 0;
    CB(cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.la, g.lb, g.lc, g.lc, pref, want, cands.data(), &found));
    cands.resize(found);
    const double flops = 2.0 * p.m * p.n * p.k;
    const float alpha = 1.0f;
    auto run = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(lt, g.desc, &alpha, g.pa, g.la, g.pb, g.lb, &g.beta, g.pc, g.lc, g.pc, g.lc, &algo, ws,
                            ws_bytes, s) == CUBLAS_STATUS_SUCCESS;
    };

    std::vector<Timing> times(cands.size());
    std::vector<bool> ran(cands.size(), false);
    for (size_t i = 0; i < cands.size(); ++i) {
      const cublasLtMatmulAlgo_t& algo = cands[i].algo;
      Timing& t = times[i];
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      if (!run(algo)) continue;
      CK(cudaEventRecord(e0, s));
      for (int r = 0; r < 3; ++r) run(algo);
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      t.burst_ms = elapsed() / 3;
      // Sustained: enough calls for sustain_ms at the burst rate; the last 60% timed.
      const int calls = std::max(10, static_cast<int>(sustain_ms / t.burst_ms));
      const int skip = calls * 2 / 5;
      for (int r = 0; r < skip; ++r) run(algo);
      CK(cudaEventRecord(e0, s));
      for (int r = skip; r < calls; ++r) run(algo);
      CK(cudaEventRecord(e1, s));
      // Read NVML while the timed calls run (from e0 on; samples before it are the untimed 40%).
      std::vector<double> clk, pw;
      while (cudaEventQuery(e1) == cudaErrorNotReady) {
        if (nvml.ok && cudaEventQuery(e0) == cudaSuccess) {
          unsigned c = 0, mw = 0;
          if (nvml.clock(nvml.dev, 1, &c) == 0 && nvml.power(nvml.dev, &mw) == 0) {
            clk.push_back(c);
            pw.push_back(mw / 1000.0);
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      CK(cudaEventSynchronize(e1));
      t.sustained_ms = elapsed() / (calls - skip);
      t.clock_mhz = median(clk);
      t.power_w = median(pw);
      ran[i] = true;
    }
    CK(cudaGetLastError());
    int burst_win = -1, sus_win = -1;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (!ran[i]) continue;
      if (burst_win < 0 || times[i].burst_ms < times[burst_win].burst_ms) burst_win = static_cast<int>(i);
      if (sus_win < 0 || times[i].sustained_ms < times[sus_win].sustained_ms) sus_win = static_cast<int>(i);
    }
    std::printf("\n%s: m %lld n %lld k %lld, %d candidates\n", p.name.c_str(), p.m, p.n, p.k, found);
    std::printf("  %3s %9s %9s %8s %6s %6s  %s\n", "#", "burst ms", "sust ms", "TFLOP/s", "MHz", "W", "config");
    for (size_t i = 0; i < cands.size(); ++i) {
      if (!ran[i]) continue;
      const Timing& t = times[i];
      std::printf("  %3zu %9.4f %9.4f %8.1f %6.0f %6.0f  %s%s%s\n", i, t.burst_ms, t.sustained_ms,
                  flops / t.sustained_ms / 1e9, t.clock_mhz, t.power_w, describe_algo(cands[i].algo).c_str(),
                  static_cast<int>(i) == burst_win ? "  <- burst winner" : "",
                  static_cast<int>(i) == sus_win ? "  <- sustained winner" : "");
    }
    if (burst_win >= 0) {
      const double bw = times[burst_win].sustained_ms, sw = times[sus_win].sustained_ms;
      std::printf(
          "  SUMMARY %s: burst winner #%d sustained %.4f ms, sustained winner #%d %.4f ms (%.1f%%), heuristic #0 %.4f "
          "ms\n",
          p.name.c_str(), burst_win, bw, sus_win, sw, 100.0 * (bw - sw) / bw, times[0].sustained_ms);
      const bool head = p.name.rfind("head", 0) == 0;
      (head ? head_burst : layer_burst) += bw;
      (head ? head_best : layer_best) += sw;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(g.la);
    cublasLtMatrixLayoutDestroy(g.lb);
    cublasLtMatrixLayoutDestroy(g.lc);
    cublasLtMatmulDescDestroy(g.desc);
  }
  std::printf(
      "\nTOTAL per layer: burst winners %.3f ms sustained, sustained winners %.3f ms (%.1f%%); head %.3f vs %.3f ms\n",
      layer_burst, layer_best, 100.0 * (layer_burst - layer_best) / layer_burst, head_burst, head_best);
  return 0;
}
