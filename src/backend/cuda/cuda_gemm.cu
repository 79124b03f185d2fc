// CUDA backend: matmul, linear_forward and linear_backward through cuBLASLt; fp8_gemm (end of file).
//
// Row-major to column-major: a row-major [r, c] matrix is, byte for byte, a column-major
// [c, r] one (its transpose). So the row-major product C[m, n] = op(A) op(B) is computed as the
// column-major product C^T[n, m] = op(B)^T op(A)^T: cuBLASLt's "A" is our b, its "B" is our a,
// with the same transpose flags, and its D has n rows, m columns and leading dimension n.
// The bias epilogue adds a vector over D's rows, i.e. over our columns (y = x W^T + b).
//
// Numerics: CUBLAS_COMPUTE_32F with an fp32 scale type for every dtype, i.e. fp32 accumulation
// and, for fp32 inputs, true fp32 products (no TF32: that would be CUBLAS_COMPUTE_32F_FAST_TF32).
// A and B share a dtype; C/D is that dtype or fp32 (cuBLASLt supports bf16/fp16 A/B with fp32
// C/D, which is how dW accumulates into the fp32 main gradient with beta = 1). Any other dtype
// mix is converted to fp32 first (the CPU reference's arithmetic).
//
// The algorithm (the heuristic's first, or with autotuning the fastest of its top candidates,
// gemm_tuning.h) is cached per (shape, transposes, dtypes, epilogue, pointer alignments) so
// that a training step neither queries it again nor changes algorithm.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/gemm_tuning.h"

namespace megatron::backend {

using namespace cuda;

namespace {

constexpr int kThreads = 256;

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      MT_CHECK(false) << "no cuBLASLt type for " << dtype_name(d);
  }
  return CUDA_R_32F;
}

// Largest power of two (up to 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

void check_float_device(const Tensor& t, const char* what) {
  MT_CHECK(t.defined()) << what << " is undefined";
  MT_CHECK(t.device() == Device::kCUDA) << what << " " << t.describe() << " is not a CUDA tensor";
  MT_CHECK(is_float(t.dtype())) << what << " " << t.describe() << " is not a float tensor";
}

// One GEMM operand: a tensor read as a row-major [rows, cols] matrix.
struct Operand {
  const Tensor* t;
  int64_t rows, cols;
};

// RAII for the cuBLASLt descriptors (destroy errors are ignored: nothing to do about them).
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  }
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

// dst[r, c] = src[r, c] + bias[c] (src may be null: 0; may alias dst), rounded once to dst's dtype.
__global__ void bias_add_kernel(const void* src, DType sdt, const void* bias, DType bdt, void* dst, DType ddt,
                                int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float s = src ? load_f(src, sdt, i) : 0.0f;
    store_f(dst, ddt, i, __fadd_rn(s, load_f(bias, bdt, i % cols)));
  }
}

// What cuBLASLt's epilogue does to D[m, n] (our row-major view) after the product:
//  - bias (its dtype is c's): D += bias[n] over rows;
//  - gelu: D = gelu_tanh(D) with the pre-activation stored to aux[m, n] (GELU_AUX[_BIAS]);
//  - dgelu: D = D * gelu_tanh'(aux[m, n]) (DGELU).
// aux is row-major [m, n] of c's dtype (cuBLASLt's column-major [n, m], leading dimension n).
struct Epilogue {
  const void* bias = nullptr;
  bool gelu = false;
  bool dgelu = false;
  const void* aux = nullptr;

  cublasLtEpilogue_t kind() const {
    if (dgelu) return CUBLASLT_EPILOGUE_DGELU;
    if (gelu) return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
};

// Autotuning: the heuristic's top candidates are timed on this problem, the fastest wins.
constexpr int kTuneRuns = 3;  // timed runs per candidate, after one untimed

// RAII for two timing events.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    MT_CUDA_CHECK(cudaEventCreate(&start));
    MT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

// The fastest of `candidates` for D = alpha A B (+ beta C) with D written to `out`. With beta
// != 0 the caller's C is both input and output, so candidates write into a temporary of C's
// size with beta = 0 instead (the same problem but for the read of C, which all candidates
// share) and the caller's C stays untouched. That temporary lies outside the memory plan: when
// the device has no room for it, the heuristic's first candidate is taken untimed (a run near
// the memory limit must not fail at its first step for a timing). Synchronises the stream:
// first calls only. nullopt when no candidate ran, with the first failure's status in `why`.
std::optional<cublasLtMatmulAlgo_t> fastest_algo(CudaBackend& be,
                                                 const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                                                 cublasLtMatmulDesc_t desc, const void* alpha, const void* pa,
                                                 cublasLtMatrixLayout_t la, const void* pb, cublasLtMatrixLayout_t lb,
                                                 float beta, void* pc, cublasLtMatrixLayout_t lc, size_t c_bytes,
                                                 std::string* why) {
  // Timing waits for the device, which a recording (Backend::begin_recording) cannot: refused
  // before anything is queued, so that the recording fails cleanly and the caller runs the
  // work unrecorded (where this GEMM is then tuned).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  MT_CUDA_CHECK(cudaStreamIsCapturing(be.stream(), &capturing));
  if (capturing != cudaStreamCaptureStatusNone) {
    throw_error("cuBLASLt autotuning of a GEMM first seen while recording device work");
  }
  void* out = pc;
  if (beta != 0.0f && cudaMalloc(&out, c_bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the allocation error so that later checks do not report it
    return candidates.front().algo;
  }
  const float zero = 0.0f;
  EventPair ev;
  float best_ms = 0.0f;
  int best = -1;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    auto run = [&] {
      return cublasLtMatmul(be.lt(), desc, alpha, pa, la, pb, lb, beta != 0.0f ? &zero : &beta, out, lc, out, lc,
                            &candidates[static_cast<size_t>(i)].algo, be.workspace(), be.workspace_bytes(),
                            be.stream());
    };
    if (const cublasStatus_t st = run(); st != CUBLAS_STATUS_SUCCESS) {  // a candidate that fails is skipped
      if (why->empty()) *why = cublasLtGetStatusString(st);
      continue;
    }
    MT_CUDA_CHECK(cudaEventRecord(ev.start, be.stream()));
    bool ok = true;
    for (int r = 0; r < kTuneRuns && ok; ++r) ok = run() == CUBLAS_STATUS_SUCCESS;
    MT_CUDA_CHECK(cudaEventRecord(ev.stop, be.stream()));
    MT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0.0f;
    MT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    if (ok && (best < 0 || ms < best_ms)) {
      best = i;
      best_ms = ms;
    }
  }
  if (out != pc) MT_CUDA_CHECK(cudaFree(out));
  if (best < 0) return std::nullopt;
  return candidates[static_cast<size_t>(best)].algo;
}

}  // namespace

void set_gemm_autotune(Backend& backend, bool on) { as_cuda(backend, "set_gemm_autotune").set_gemm_autotune(on); }

namespace {

// The cuBLASLt call for c[m, n] = alpha op(a) op(b) + beta c, then the epilogue. a and b share
// a dtype; c has it or is fp32. With c_in (beta != 0), cuBLASLt's C is c_in, a matrix of c's
// dtype and layout, and c only its output D: c = alpha op(a) op(b) + beta c_in. Returns false,
// having run nothing, if allow_unsupported and cuBLASLt has no algorithm.
bool lt_matmul(CudaBackend& be, GemmAlgoCache& cache, const Operand& a, bool ta, const Operand& b, bool tb,
               const Tensor& c, int64_t m, int64_t n, int64_t k, float alpha, float beta, const Epilogue& ep,
               bool allow_unsupported, const void* c_in = nullptr) {
  const DType ab = a.t->dtype(), cd = c.dtype();
  MT_CHECK(b.t->dtype() == ab && (cd == ab || cd == DType::kF32))
      << "lt_matmul dtypes " << a.t->describe() << ", " << b.t->describe() << " -> " << c.describe();
  const void* bias = ep.bias;
  const cublasLtEpilogue_t epilogue = ep.kind();
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our b
  const cublasOperation_t op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our a

  MatmulDesc desc;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (bias) {
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const int32_t bias_type = cuda_type(cd);
    MT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  if (ep.aux) {
    const int64_t aux_ld = n;
    const int32_t aux_type = cuda_type(cd);
    MT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep.aux, sizeof(ep.aux)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                                   sizeof(aux_type)));
  }
  // Column-major views of the row-major buffers (see the top of this file).
  Layout la(cuda_type(ab), b.cols, b.rows, b.cols);
  Layout lb(cuda_type(ab), a.cols, a.rows, a.cols);
  Layout lc(cuda_type(cd), n, m, n);

  const void* pa = b.t->data();
  const void* pb = a.t->data();
  void* pc = c.data();
  const void* pc_in = c_in ? c_in : pc;
  const uint32_t al_a = alignment_of(pa), al_b = alignment_of(pb), al_c = alignment_of(pc);
  const uint32_t al_c_in = c_in ? alignment_of(c_in) : 0;  // 0: C is D
  const uint32_t al_bias = bias ? alignment_of(bias) : 0;
  const uint32_t al_aux = ep.aux ? alignment_of(ep.aux) : 0;
  const GemmAlgoKey key{m,
                        n,
                        k,
                        ta ? 1 : 0,
                        tb ? 1 : 0,
                        static_cast<int>(ab),
                        static_cast<int>(cd),
                        static_cast<int>(epilogue),
                        static_cast<int>(al_a),
                        static_cast<int>(al_b),
                        static_cast<int>(al_c),
                        static_cast<int>(al_bias),
                        static_cast<int>(al_aux),
                        static_cast<int>(al_c_in)};
  auto it = cache.find(key);
  if (it == cache.end()) {
    Preference pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = be.workspace_bytes();
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         c_in ? &al_c_in : &al_c, sizeof(al_c)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    const int want = be.gemm_autotune() ? be.gemm_tune_candidates() : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(want));
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(be.lt(), desc.d, la.l, lb.l, lc.l, lc.l, pref.p, want, results.data(), &found);
    results.resize(st == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(std::max(found, 0)) : 0);
    results.erase(
        std::remove_if(results.begin(), results.end(),
                       [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; }),
        results.end());
    if (results.empty()) {
      if (allow_unsupported) return false;
      throw_error("cuBLASLt has no algorithm for ", a.t->describe(), ta ? "^T" : "", " @ ", b.t->describe(),
                  tb ? "^T" : "", " -> ", c.describe(), " (m=", m, " n=", n, " k=", k,
                  ", epilogue=", static_cast<int>(epilogue), ", status ", static_cast<int>(st), ", found ", found, ")");
    }
    std::string why;
    const std::optional<cublasLtMatmulAlgo_t> algo =
        results.size() == 1 ? results[0].algo
                            : fastest_algo(be, results, desc.d, &alpha, pa, la.l, pb, lb.l, beta, pc, lc.l,
                                           static_cast<size_t>(m * n * dtype_size(cd)), &why);
    if (!algo) {
      throw_error("cuBLASLt: none of the ", results.size(), " candidate algorithms for ", a.t->describe(),
                  ta ? "^T" : "", " @ ", b.t->describe(), tb ? "^T" : "", " -> ", c.describe(), " ran (", why, ")");
    }
    it = cache.emplace(key, *algo).first;
  }
  MT_CUBLAS_CHECK(cublasLtMatmul(be.lt(), desc.d, &alpha, pa, la.l, pb, lb.l, &beta, pc_in, lc.l, pc, lc.l,
                                 &*it->second, be.workspace(), be.workspace_bytes(), be.stream()));
  return true;
}

void launch_bias_add(CudaBackend& be, const Tensor* src, const Tensor& bias, Tensor& dst, int64_t rows, int64_t cols) {
  bias_add_kernel<<<grid_for(rows * cols, kThreads), kThreads, 0, be.stream()>>>(
      src ? src->data() : nullptr, src ? src->dtype() : DType::kF32, bias.data(), bias.dtype(), dst.data(), dst.dtype(),
      rows, cols);
  MT_CUDA_LAUNCH_CHECK();
}

// The bias pointer an epilogue can take: cuBLASLt wants it 16-byte aligned, so a misaligned
// bias (a view into the flat parameter buffer) is copied to the backend's scratch, which the
// next GEMM then reads. Null when it does not fit there.
const void* epilogue_bias(CudaBackend& be, const Tensor& bias) {
  const void* bp = bias.data();
  if (alignment_of(bp) >= 16) return bp;
  const size_t bias_bytes = static_cast<size_t>(bias.nbytes());
  if (bias_bytes > 1024 * 1024) return nullptr;  // the scratch holds at least this much
  MT_CUDA_CHECK(cudaMemcpyAsync(be.scratch(), bp, bias_bytes, cudaMemcpyDeviceToDevice, be.stream()));
  return be.scratch();
}

// c[m, n] = alpha op(a) op(b) + beta c (+ bias[n], only with beta == 0), any float dtypes.
void gemm(CudaBackend& be, GemmAlgoCache& cache, const Operand& a, bool ta, const Operand& b, bool tb, Tensor& c,
          float alpha, float beta, const Tensor* bias) {
  const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  MT_CHECK_EQ(k, kb) << "matmul " << a.t->describe() << (ta ? "^T" : "") << " @ " << b.t->describe()
                     << (tb ? "^T" : "");
  MT_CHECK(c.numel() == m * n) << "matmul output " << c.describe() << ", expected [" << m << ", " << n << "]";
  if (bias) {
    check_float_device(*bias, "matmul bias");
    MT_CHECK(bias->numel() == n && beta == 0.0f) << "matmul bias " << bias->describe() << " for " << n << " columns";
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: c = beta c (+ bias)
    if (beta == 0.0f) {
      be.fill(c, 0.0f);
    } else {
      be.scale(c, beta);
    }
    if (bias) launch_bias_add(be, &c, *bias, c, m, n);
    return;
  }

  const DType ab = a.t->dtype();
  if (b.t->dtype() != ab || (c.dtype() != ab && c.dtype() != DType::kF32)) {
    // A dtype mix cuBLASLt does not take: the CPU's arithmetic, on fp32 copies.
    auto f32 = [&](const Tensor& t) {
      if (t.dtype() == DType::kF32) return t;
      Tensor f = be.empty({t.numel()}, DType::kF32, MemoryKind::kWorkspace);
      be.copy(t, f);
      return f;
    };
    const Tensor af = f32(*a.t), bf = f32(*b.t);
    Tensor cf = c.dtype() == DType::kF32 ? c : be.empty({c.numel()}, DType::kF32, MemoryKind::kWorkspace);
    if (c.dtype() != DType::kF32 && beta != 0.0f) be.copy(c, cf);
    gemm(be, cache, Operand{&af, a.rows, a.cols}, ta, Operand{&bf, b.rows, b.cols}, tb, cf, alpha, beta, bias);
    if (c.dtype() != DType::kF32) be.copy(cf, c);
    return;
  }

  if (!bias) {
    lt_matmul(be, cache, a, ta, b, tb, c, m, n, k, alpha, beta, Epilogue{}, /*allow_unsupported=*/false);
    return;
  }
  // Bias through the epilogue when its dtype is c's.
  if (bias->dtype() == c.dtype()) {
    const void* bp = epilogue_bias(be, *bias);
    if (bp && lt_matmul(be, cache, a, ta, b, tb, c, m, n, k, alpha, 0.0f, Epilogue{bp}, /*allow_unsupported=*/true))
      return;
  }
  // Without the epilogue: the product in fp32, then one rounding of product + bias.
  if (c.dtype() == DType::kF32) {
    lt_matmul(be, cache, a, ta, b, tb, c, m, n, k, alpha, 0.0f, Epilogue{}, false);
    launch_bias_add(be, &c, *bias, c, m, n);
  } else {
    Tensor tmp = be.empty({m * n}, DType::kF32, MemoryKind::kWorkspace);
    lt_matmul(be, cache, a, ta, b, tb, tmp, m, n, k, alpha, 0.0f, Epilogue{}, false);
    launch_bias_add(be, &tmp, *bias, c, m, n);
  }
}

// The 2-D view [numel / last, last] of a tensor.
Operand as_2d(const Tensor& t, const char* what) {
  check_float_device(t, what);
  MT_CHECK(t.ndim() >= 1 && t.dim(-1) > 0 && t.numel() % t.dim(-1) == 0) << what << " " << t.describe();
  return Operand{&t, t.numel() / t.dim(-1), t.dim(-1)};
}

// The view [numel / cols, cols] (the CPU backend's rows_of).
Operand rows_of(const Tensor& t, int64_t cols, const char* what) {
  check_float_device(t, what);
  MT_CHECK(cols > 0 && t.numel() % cols == 0) << what << " " << t.describe() << " has no rows of " << cols;
  return Operand{&t, t.numel() / cols, cols};
}

// A linear layer's weight w [out, in] (checked) and its input x read as [rows, in].
struct LinearOperands {
  int64_t out, in;
  Operand x;
};
LinearOperands linear_operands(const Tensor& x, const Tensor& w) {
  check_float_device(w, "linear weight");
  MT_CHECK_EQ(w.ndim(), 2) << "linear weight " << w.describe();
  const int64_t in = w.dim(1);
  return {w.dim(0), in, rows_of(x, in, "linear input")};
}

// dw[out, in] (+=) dy[n, out]^T @ x[n, in]; dbias (+=) column sums of dy: the deterministic
// fixed-order reduction of cuda_backend.cu. cuBLASLt's BGRADB epilogue (the bias gradient from
// the weight-gradient GEMM, in its own order) was measured slower than the GEMM plus this
// reduction at 124M and 1.3B shapes (bench/results/2026-11-23.md, "the residual add in the
// row-parallel GEMM").
// GradWrite::kOverwrite: beta = 0, so the GEMM does not read dw.
void weight_grads(CudaBackend& be, GemmAlgoCache& cache, const Operand& dy, const Operand& x, Tensor& dw, Tensor& dbias,
                  GradWrite write) {
  gemm(be, cache, dy, true, x, false, dw, 1.0f, write == GradWrite::kAccumulate ? 1.0f : 0.0f, nullptr);
  if (dbias.defined()) be.bias_grad(*dy.t, dbias, write);
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                         float beta) {
  const Operand av = as_2d(a, "matmul a"), bv = as_2d(b, "matmul b");
  check_float_device(c, "matmul c");
  const int64_t n = trans_b ? bv.rows : bv.cols;
  MT_CHECK(c.ndim() >= 1 && c.dim(-1) == n) << "matmul output " << c.describe() << " has not " << n << " columns";
  gemm(*this, gemm_algos_, av, trans_a, bv, trans_b, c, alpha, beta, nullptr);
}

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  const auto [out, in, xv] = linear_operands(x, w);
  check_float_device(y, "linear output");
  MT_CHECK(y.ndim() >= 1 && y.dim(-1) == out && y.numel() == xv.rows * out) << "linear output " << y.describe();
  if (bias.defined()) {
    MT_CHECK_EQ(bias.numel(), out) << "linear bias " << bias.describe();
  }
  // y[n, out] = x[n, in] @ w[out, in]^T (+ bias)
  gemm(*this, gemm_algos_, xv, false, Operand{&w, out, in}, true, y, 1.0f, 0.0f, bias.defined() ? &bias : nullptr);
}

// One GEMM with C = residual (beta = 1) and D = y, the bias in the epilogue, when cuBLASLt takes
// it (16-bit or fp32 throughout, the bias of y's dtype and epilogue-aligned); otherwise the
// product in fp32 and the CPU's bias-dropout-add arithmetic. Either way one rounding to y's
// dtype; cuBLASLt's order of the two fp32 additions is its own (within an fp32 ulp of the CPU's).
void CudaBackend::linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                                          Tensor& y) {
  const auto [out, in, xv] = linear_operands(x, w);
  check_float_device(y, "linear output");
  check_float_device(residual, "linear residual");
  MT_CHECK(y.ndim() >= 1 && y.dim(-1) == out && y.numel() == xv.rows * out && residual.numel() == y.numel())
      << "linear_residual_forward output " << y.describe() << ", residual " << residual.describe();
  if (bias.defined()) {
    check_float_device(bias, "linear bias");
    MT_CHECK_EQ(bias.numel(), out) << "linear bias " << bias.describe();
  }
  if (xv.rows == 0 || out == 0) return;
  const DType d = y.dtype();
  const bool same = x.dtype() == d && w.dtype() == d && residual.dtype() == d && (!bias.defined() || bias.dtype() == d);
  if (same && in > 0) {
    Epilogue ep;
    ep.bias = bias.defined() ? epilogue_bias(*this, bias) : nullptr;
    if ((!bias.defined() || ep.bias) &&
        lt_matmul(*this, gemm_algos_, xv, false, Operand{&w, out, in}, true, y, xv.rows, out, in, 1.0f, 1.0f, ep,
                  /*allow_unsupported=*/true, residual.data())) {
      return;
    }
  }
  Tensor z = empty({xv.rows, out}, DType::kF32, MemoryKind::kWorkspace);
  gemm(*this, gemm_algos_, xv, false, Operand{&w, out, in}, true, z, 1.0f, 0.0f, nullptr);
  bias_dropout_add(z, bias, residual, y, DropoutParams{});
}

void CudaBackend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                  Tensor& dbias, GradWrite write) {
  const auto [out, in, xv] = linear_operands(x, w);
  const int64_t n = xv.rows;
  check_float_device(dy, "linear dy");
  MT_CHECK(dy.ndim() >= 1 && dy.dim(-1) == out && dy.numel() == n * out) << "linear dy " << dy.describe();
  check_float_device(dw, "linear dw");
  MT_CHECK(dw.numel() == out * in) << "linear dw " << dw.describe() << " for weight " << w.describe();
  const Operand dyv{&dy, n, out};
  if (dx.defined()) {
    check_float_device(dx, "linear dx");
    MT_CHECK_EQ(dx.numel(), n * in) << "linear dx " << dx.describe();
    // dx[n, in] = dy[n, out] @ w[out, in]
    gemm(*this, gemm_algos_, dyv, false, Operand{&w, out, in}, false, dx, 1.0f, 0.0f, nullptr);
  }
  weight_grads(*this, gemm_algos_, dyv, xv, dw, dbias, write);
}

// The GELU epilogues run for 16-bit GEMMs with the tanh GELU (cuBLASLt's is the tanh form).
// fp32 stays unfused: it is the reference precision, and the epilogue's tanh need not be
// correctly rounded. Otherwise (or if cuBLASLt has no such kernel) the unfused ops run.
namespace {
bool gelu_epilogue_applies(Gelu kind, std::initializer_list<const Tensor*> ts, int64_t rows, int64_t cols,
                           int64_t inner) {
  if (kind != Gelu::kTanh || rows == 0 || cols == 0 || inner == 0 || cols % 8 != 0) return false;
  const DType d = (*ts.begin())->dtype();
  if (d != DType::kBF16 && d != DType::kF16) return false;
  for (const Tensor* t : ts) {
    if (t->defined() && t->dtype() != d) return false;
  }
  return true;
}
}  // namespace

void CudaBackend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                                      Gelu kind) {
  const auto [out, in, xv] = linear_operands(x, w);
  check_float_device(y, "linear output");
  check_float_device(pre, "linear pre-activation");
  MT_CHECK(y.dim(-1) == out && y.numel() == xv.rows * out && pre.numel() == y.numel())
      << "linear_gelu_forward output " << y.describe() << ", pre " << pre.describe();
  if (bias.defined()) {
    check_float_device(bias, "linear bias");
    MT_CHECK_EQ(bias.numel(), out) << "linear bias " << bias.describe();
  }
  if (gelu_epilogue_applies(kind, {&y, &x, &w, &pre, &bias}, xv.rows, out, in)) {
    Epilogue ep;
    ep.gelu = true;
    ep.aux = pre.data();
    ep.bias = bias.defined() ? epilogue_bias(*this, bias) : nullptr;
    if ((!bias.defined() || ep.bias) && lt_matmul(*this, gemm_algos_, xv, false, Operand{&w, out, in}, true, y, xv.rows,
                                                  out, in, 1.0f, 0.0f, ep, /*allow_unsupported=*/true)) {
      return;
    }
  }
  linear_forward(x, w, bias, pre);
  bias_gelu_forward(pre, Tensor(), y, kind);
}

void CudaBackend::linear_dgelu_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& pre,
                                        Tensor& dpre, Tensor& dw, Tensor& dbias, Gelu kind, GradWrite write) {
  const auto [out, in, xv] = linear_operands(x, w);
  const int64_t n = xv.rows;
  check_float_device(dy, "linear dy");
  MT_CHECK(dy.dim(-1) == out && dy.numel() == n * out) << "linear dy " << dy.describe();
  check_float_device(dw, "linear dw");
  MT_CHECK(dw.numel() == out * in) << "linear dw " << dw.describe() << " for weight " << w.describe();
  check_float_device(pre, "linear pre-activation");
  check_float_device(dpre, "linear dpre");
  MT_CHECK(pre.numel() == n * in && dpre.numel() == n * in)
      << "linear_dgelu_backward pre " << pre.describe() << ", dpre " << dpre.describe();
  const Operand dyv{&dy, n, out};
  Epilogue ep;
  ep.dgelu = true;
  ep.aux = pre.data();
  // dpre[n, in] = (dy[n, out] @ w[out, in]) * gelu'(pre)
  const bool fused = gelu_epilogue_applies(kind, {&dpre, &dy, &w, &pre}, n, in, out) &&
                     lt_matmul(*this, gemm_algos_, dyv, false, Operand{&w, out, in}, false, dpre, n, in, out, 1.0f,
                               0.0f, ep, /*allow_unsupported=*/true);
  if (!fused) {
    gemm(*this, gemm_algos_, dyv, false, Operand{&w, out, in}, false, dpre, 1.0f, 0.0f, nullptr);
    bias_gelu_backward(dpre, pre, Tensor(), dpre, kind);
  }
  weight_grads(*this, gemm_algos_, dyv, xv, dw, dbias, write);
}

}  // namespace megatron::backend

// ---- FP8 ------------------------------------------------------------------------------------
// c[m, n] = (a[m, k] b[n, k]^T) * sa * sb (+ bias) (+ c): cuBLASLt's FP8 kernels on Hopper take
// only the TN layout (both operands k-major), which is what Backend::fp8_gemm's operands are:
// in the column-major view above, cuBLASLt's A is our b transposed (T), its B our a (N). Its
// A/B scale pointers are the scale_inv of b and a (D = scale_A scale_B (A B) + beta C).
// Fp8Accumulation::kSplit leaves FAST_ACCUM off (the tensor cores' partial sums promoted to
// fp32); kFast turns it on (TE's forward GEMM). Where cuBLASLt has no algorithm (a k, m or n it does not take, e.g. not
// a multiple of 16), the same function on fp32 copies of the codes: the CPU backend's sequence.
namespace megatron::backend {

using namespace cuda;

namespace {

cudaDataType_t fp8_cuda_type(DType d) { return d == DType::kF8E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

__global__ void fp8_decode_kernel(const uint8_t* q, Fp8Format f, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = fp8_to_float(q[i], f);
  }
}

// c = acc * (sa * sb) (+ bias[col]) (+ c), rounded once to c's dtype: the CPU's order.
__global__ void fp8_scale_kernel(const float* acc, const float* sa, const float* sb, const void* bias, DType bdt,
                                 void* c, DType cdt, int64_t rows, int64_t cols, bool accumulate) {
  const float s = __fmul_rn(*sa, *sb);
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float v = __fmul_rn(acc[i], s);
    if (bias) v = __fadd_rn(v, load_f(bias, bdt, i % cols));
    if (accumulate) v = __fadd_rn(v, load_f(c, cdt, i));
    store_f(c, cdt, i, v);
  }
}

const float* fp8_scalar(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::kCUDA && t.dtype() == DType::kF32 && t.numel() == 1)
      << what << " must be an fp32 [1] CUDA tensor, not " << (t.defined() ? t.describe() : "undefined");
  return static_cast<const float*>(t.data());
}

// The cuBLASLt FP8 GEMM; false, having run nothing, when it has no algorithm for the case.
bool lt_fp8_matmul(CudaBackend& be, GemmAlgoCache& cache, const Tensor& a, const float* a_si, const Tensor& b,
                   const float* b_si, const void* bias, Tensor& c, int64_t m, int64_t n, int64_t k, float beta,
                   Fp8Accumulation acc) {
  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  const int8_t fast_accum = acc == Fp8Accumulation::kFast ? 1 : 0;
  MatmulDesc desc;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  MT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_si, sizeof(b_si)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_si, sizeof(a_si)));
  if (bias) {
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const int32_t bias_type = cuda_type(c.dtype());
    MT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  Layout la(fp8_cuda_type(b.dtype()), k, n, k);
  Layout lb(fp8_cuda_type(a.dtype()), k, m, k);
  Layout lc(cuda_type(c.dtype()), n, m, n);
  const void* pa = b.data();
  const void* pb = a.data();
  void* pc = c.data();
  const uint32_t al_a = alignment_of(pa), al_b = alignment_of(pb), al_c = alignment_of(pc);
  const uint32_t al_bias = bias ? alignment_of(bias) : 0;
  // trans flags 2, 2 mark the FP8 problems; the A/B dtype slot holds both operands' dtypes.
  const GemmAlgoKey key{m,
                        n,
                        k,
                        2,
                        2,
                        static_cast<int>(a.dtype()) * 16 + static_cast<int>(b.dtype()),
                        static_cast<int>(c.dtype()),
                        static_cast<int>(epilogue),
                        static_cast<int>(al_a),
                        static_cast<int>(al_b),
                        static_cast<int>(al_c),
                        static_cast<int>(al_bias),
                        fast_accum,
                        0};
  auto it = cache.find(key);
  const float alpha = 1.0f;
  if (it == cache.end()) {
    Preference pref;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
    const uint64_t ws = be.workspace_bytes();
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    MT_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    const int want = be.gemm_autotune() ? be.gemm_tune_candidates() : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(want));
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(be.lt(), desc.d, la.l, lb.l, lc.l, lc.l, pref.p, want, results.data(), &found);
    results.resize(st == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(std::max(found, 0)) : 0);
    results.erase(
        std::remove_if(results.begin(), results.end(),
                       [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; }),
        results.end());
    if (results.empty()) return false;
    std::string why;
    const std::optional<cublasLtMatmulAlgo_t> algo =
        results.size() == 1 ? results[0].algo
                            : fastest_algo(be, results, desc.d, &alpha, pa, la.l, pb, lb.l, beta, pc, lc.l,
                                           static_cast<size_t>(m * n * dtype_size(c.dtype())), &why);
    if (!algo) {
      // The heuristic offered algorithms that then refused to run: the fallback takes the problem,
      // said once per problem since it is slower.
      std::fprintf(stderr,
                   "megatron: cuBLASLt ran none of the %zu FP8 algorithms it offered for m=%lld n=%lld k=%lld "
                   "(%s; a %s, b %s, c %s, alignments %u/%u/%u); using the fp32 fallback GEMM\n",
                   results.size(), static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                   why.c_str(), std::string(dtype_name(a.dtype())).c_str(), std::string(dtype_name(b.dtype())).c_str(),
                   std::string(dtype_name(c.dtype())).c_str(), al_a, al_b, al_c);
      cache.emplace(key, std::nullopt);
      return false;
    }
    it = cache.emplace(key, *algo).first;
  }
  if (!it->second) return false;
  MT_CUBLAS_CHECK(cublasLtMatmul(be.lt(), desc.d, &alpha, pa, la.l, pb, lb.l, &beta, pc, lc.l, pc, lc.l, &*it->second,
                                 be.workspace(), be.workspace_bytes(), be.stream()));
  return true;
}

}  // namespace

void CudaBackend::fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                           const Tensor& bias, Tensor& c, GradWrite write, Fp8Accumulation acc) {
  for (const Tensor* t : {&a, &b}) {
    MT_CHECK(t->defined() && t->device() == Device::kCUDA && is_fp8(t->dtype()) && t->ndim() >= 1)
        << "fp8_gemm operand " << (t->defined() ? t->describe() : "undefined") << " is not an FP8 CUDA tensor";
  }
  MT_CHECK(a.dim(-1) == b.dim(-1)) << "fp8_gemm " << a.describe() << " @ " << b.describe() << "^T";
  MT_CHECK(!(a.dtype() == DType::kF8E5M2 && b.dtype() == DType::kF8E5M2)) << "fp8_gemm of two E5M2 operands";
  const int64_t k = a.dim(-1);
  const int64_t m = k == 0 ? 0 : a.numel() / k, n = k == 0 ? 0 : b.numel() / k;
  check_float_device(c, "fp8_gemm output");
  MT_CHECK(c.ndim() >= 1 && c.dim(-1) == n && c.numel() == m * n)
      << "fp8_gemm output " << c.describe() << ", expected [" << m << ", " << n << "]";
  const bool accumulate = write == GradWrite::kAccumulate;
  MT_CHECK(!accumulate || !bias.defined()) << "fp8_gemm accumulates without bias, not " << c.describe();
  if (bias.defined()) {
    check_float_device(bias, "fp8_gemm bias");
    MT_CHECK_EQ(bias.numel(), n) << "fp8_gemm bias " << bias.describe();
  }
  const float* sa = fp8_scalar(a_scale_inv, "fp8_gemm a_scale_inv");
  const float* sb = fp8_scalar(b_scale_inv, "fp8_gemm b_scale_inv");
  if (m == 0 || n == 0) return;
  if (k > 0 && fp8_gemm_cublaslt_) {
    const void* bp = nullptr;
    if (bias.defined() && bias.dtype() == c.dtype()) bp = epilogue_bias(*this, bias);
    // The recipe keeps its scales in one fp32 array (a slot every 4 bytes); cuBLASLt's FP8
    // kernels answer "not supported" at launch for scale pointers that are not 16-byte aligned,
    // so such scales are copied to two aligned slots first (stream-ordered, so one pair of slots
    // serves every GEMM; the copies are recorded into CUDA graphs like the GEMM).
    const float* lsa = sa;
    const float* lsb = sb;
    if (reinterpret_cast<uintptr_t>(sa) % 16 != 0 || reinterpret_cast<uintptr_t>(sb) % 16 != 0) {
      if (!fp8_scale_slots_.defined()) fp8_scale_slots_ = empty({8}, DType::kF32, MemoryKind::kOther);
      float* slots = static_cast<float*>(fp8_scale_slots_.data());
      MT_CUDA_CHECK(cudaMemcpyAsync(slots, sa, sizeof(float), cudaMemcpyDeviceToDevice, stream()));
      MT_CUDA_CHECK(cudaMemcpyAsync(slots + 4, sb, sizeof(float), cudaMemcpyDeviceToDevice, stream()));
      lsa = slots;
      lsb = slots + 4;
    }
    if ((!bias.defined() || bp) &&
        lt_fp8_matmul(*this, gemm_algos_, a, lsa, b, lsb, bp, c, m, n, k, accumulate ? 1.0f : 0.0f, acc)) {
      return;
    }
  }
  // The codes as fp32 (exact), an fp32 GEMM, then the CPU backend's scaling sequence.
  Tensor af = empty({m, k}, DType::kF32, MemoryKind::kWorkspace);
  Tensor bf = empty({n, k}, DType::kF32, MemoryKind::kWorkspace);
  Tensor sum = empty({m, n}, DType::kF32, MemoryKind::kWorkspace);
  const Fp8Format fa = a.dtype() == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  const Fp8Format fb = b.dtype() == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
  if (k > 0) {
    fp8_decode_kernel<<<grid_for(m * k, kThreads), kThreads, 0, stream()>>>(static_cast<const uint8_t*>(a.data()), fa,
                                                                            static_cast<float*>(af.data()), m * k);
    MT_CUDA_LAUNCH_CHECK();
    fp8_decode_kernel<<<grid_for(n * k, kThreads), kThreads, 0, stream()>>>(static_cast<const uint8_t*>(b.data()), fb,
                                                                            static_cast<float*>(bf.data()), n * k);
    MT_CUDA_LAUNCH_CHECK();
  }
  gemm(*this, gemm_algos_, Operand{&af, m, k}, false, Operand{&bf, n, k}, true, sum, 1.0f, 0.0f, nullptr);
  fp8_scale_kernel<<<grid_for(m * n, kThreads), kThreads, 0, stream()>>>(
      static_cast<const float*>(sum.data()), sa, sb, bias.defined() ? bias.data() : nullptr,
      bias.defined() ? bias.dtype() : DType::kF32, c.data(), c.dtype(), m, n, accumulate);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace megatron::backend
