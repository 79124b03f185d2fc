// ProfilingBackend (see profiling_backend.h) and the host chrono OpTimer.
#include "backend/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace megatron::backend {

// ---- host chrono timer ----------------------------------------------------------------------

namespace {

class ChronoOpTimer final : public OpTimer {
 public:
  void begin() override {
    MT_CHECK(!open_) << "OpTimer::begin() while an interval is open (nested ops?)";
    open_ = true;
    start_ = std::chrono::steady_clock::now();
  }
  void end(int key) override {
    const auto stop = std::chrono::steady_clock::now();
    MT_CHECK(open_) << "OpTimer::end() without begin()";
    MT_CHECK(key >= 0) << "OpTimer::end(): negative key " << key;
    open_ = false;
    if (static_cast<size_t>(key) >= totals_.size()) totals_.resize(static_cast<size_t>(key) + 1);
    OpTime& t = totals_[static_cast<size_t>(key)];
    t.calls += 1;
    t.total_ms += std::chrono::duration<double, std::milli>(stop - start_).count();
  }
  std::vector<OpTime> report() override { return totals_; }
  void reset() override {
    totals_.clear();
    open_ = false;
  }
  const char* clock_name() const override { return "host steady_clock"; }

 private:
  bool open_ = false;
  std::chrono::steady_clock::time_point start_;
  std::vector<OpTime> totals_;
};

// The 2-D view every GEMM op reads: [numel / last_dim, last_dim].
std::pair<int64_t, int64_t> rows_cols(const Tensor& t) {
  if (!t.defined() || t.ndim() == 0) return {0, 0};
  const int64_t cols = t.dim(-1);
  return {cols == 0 ? 0 : t.numel() / cols, cols};
}

std::string dt(int64_t d) { return std::string(dtype_name(static_cast<DType>(d))); }

std::string mat(int64_t dtype, int64_t rows, int64_t cols) {
  return dt(dtype) + "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(ch)));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<OpTimer> make_chrono_op_timer() { return std::make_unique<ChronoOpTimer>(); }

// ---- ProfilingBackend -----------------------------------------------------------------------

const char* ProfilingBackend::op_name(int op) {
  static const char* const kNames[kNumOps] = {"empty",
                                              "fill",
                                              "copy",
                                              "matmul",
                                              "linear_forward",
                                              "linear_backward",
                                              "add",
                                              "scale",
                                              "bias_dropout_add",
                                              "dropout_backward",
                                              "dropout_forward",
                                              "bias_grad",
                                              "bias_gelu_forward",
                                              "bias_gelu_backward",
                                              "layernorm_forward",
                                              "layernorm_backward",
                                              "embedding_forward",
                                              "embedding_backward",
                                              "attention_forward",
                                              "attention_backward",
                                              "attention_kv_cache",
                                              "cross_entropy_forward",
                                              "cross_entropy_backward",
                                              "sum_squares",
                                              "all_finite",
                                              "count_zeros",
                                              "adamw_update",
                                              "linear_gelu_forward",
                                              "linear_dgelu_backward",
                                              "adamw_update_segments",
                                              "linear_residual_forward",
                                              "cross_entropy_fused",
                                              "layernorm_backward_colsum",
                                              "layernorm_backward_dropout_colsum",
                                              "init_normal",
                                              "vocab_parallel_ce_terms",
                                              "vocab_parallel_ce_finish",
                                              "swiglu_forward",
                                              "swiglu_backward",
                                              "rotary_forward",
                                              "rotary_backward",
                                              "fp8_quantize",
                                              "fp8_gemm",
                                              "fp8_quantize_dbias"};
  return op >= 0 && op < kNumOps ? kNames[op] : "?";
}

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
  MT_CHECK(inner_ != nullptr) << "ProfilingBackend needs a backend to wrap";
  timer_ = make_op_timer(*inner_);
}

ProfilingBackend::~ProfilingBackend() = default;

void ProfilingBackend::reset() { timer_->reset(); }

template <class F>
auto ProfilingBackend::timed(int key, F&& f) -> decltype(f()) {
  if (!enabled_) return f();
  timer_->begin();
  // If the op throws, the interval is still closed (end() may throw too: the op's exception wins).
  const auto close_after_throw = [&] {
    std::exception_ptr e = std::current_exception();
    try {
      timer_->end(key);
    } catch (...) {
    }
    std::rethrow_exception(e);
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    try {
      f();
    } catch (...) {
      close_after_throw();
    }
    timer_->end(key);
  } else {
    decltype(f()) result{};
    try {
      result = f();
    } catch (...) {
      close_after_throw();
    }
    timer_->end(key);
    return result;
  }
}

int ProfilingBackend::gemm_key(const GemmKey& key, double flops_per_call) {
  auto it = gemm_keys_.find(key);
  if (it != gemm_keys_.end()) return it->second;
  const int id = kNumOps + static_cast<int>(gemms_.size());
  gemm_keys_.emplace(key, id);
  GemmInfo info;
  info.op = static_cast<int>(key[0]);
  info.flops_per_call = flops_per_call;
  const int64_t r0 = key[1], c0 = key[2], r1 = key[3], c1 = key[4], r2 = key[5], c2 = key[6];
  const int64_t d0 = key[7], d1 = key[8], d2 = key[9], f0 = key[10], f1 = key[11], f2 = key[12];
  char mnk[160];
  if (info.op == kMatmul) {
    const int64_t m = f0 ? c0 : r0, k = f0 ? r0 : c0, n = f1 ? r1 : c1;
    std::snprintf(mnk, sizeof(mnk), " (m=%lld n=%lld k=%lld)", static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k));
    info.shape = "a " + mat(d0, r0, c0) + (f0 ? "^T" : "") + " b " + mat(d1, r1, c1) + (f1 ? "^T" : "") + " -> c " +
                 mat(d2, r2, c2) + (f2 ? " (+beta c)" : "") + mnk;
  } else if (info.op == kLinearForward || info.op == kLinearGeluForward || info.op == kLinearResidualForward) {
    // x [rows, in], w [out, in], y [rows, out].
    std::snprintf(mnk, sizeof(mnk), " (m=%lld n=%lld k=%lld)", static_cast<long long>(r0), static_cast<long long>(r1),
                  static_cast<long long>(c0));
    info.shape = "x " + mat(d0, r0, c0) + " w " + mat(d1, r1, c1) + (f0 ? " +bias" : "") +
                 (info.op == kLinearResidualForward ? " +residual" : "") + " -> y " + dt(d2) + mnk;
  } else {
    // dy [rows, out], x [rows, in], w [out, in]; f0: dx, f1: dbias, f2: dw dtype.
    std::snprintf(mnk, sizeof(mnk), " (dx: m=%lld n=%lld k=%lld; dw: m=%lld n=%lld k=%lld)", static_cast<long long>(r0),
                  static_cast<long long>(c2), static_cast<long long>(c0), static_cast<long long>(c0),
                  static_cast<long long>(c2), static_cast<long long>(r0));
    info.shape = "dy " + mat(d0, r0, c0) + " x " + mat(d1, r1, c1) + " w " + mat(d2, r2, c2) + " ->" +
                 (f0 ? " dx," : "") + " dw " + dt(f2) + (f1 ? ", dbias" : "") + mnk;
  }
  gemms_.push_back(std::move(info));
  return id;
}

void ProfilingBackend::time_region(const std::string& name, const std::function<void()>& f) {
  if (!enabled_) {
    f();
    return;
  }
  auto it = region_keys_.find(name);
  if (it == region_keys_.end()) {
    const int id = kNumOps + static_cast<int>(gemms_.size());
    GemmInfo info;
    info.op = -1;
    info.shape = name;
    gemms_.push_back(std::move(info));
    it = region_keys_.emplace(name, id).first;
  }
  timed(it->second, f);
}

OpProfile ProfilingBackend::report() {
  const std::vector<OpTime> times = timer_->report();
  OpProfile p;
  p.clock = timer_->clock_name();
  std::vector<OpProfileRow> per_op(kNumOps);
  for (int op = 0; op < kNumOps; ++op) per_op[static_cast<size_t>(op)].op = op_name(op);
  for (size_t key = 0; key < times.size(); ++key) {
    const OpTime& t = times[key];
    if (t.calls == 0) continue;
    if (key < static_cast<size_t>(kNumOps)) {
      per_op[key].calls += t.calls;
      per_op[key].total_ms += t.total_ms;
      continue;
    }
    const GemmInfo& g = gemms_.at(key - kNumOps);
    if (g.op < 0) {  // a named region: a row of the op table
      OpProfileRow region;
      region.op = g.shape;
      region.calls = t.calls;
      region.total_ms = t.total_ms;
      per_op.push_back(std::move(region));
      continue;
    }
    OpProfileRow row;
    row.op = op_name(g.op);
    row.shape = g.shape;
    row.calls = t.calls;
    row.total_ms = t.total_ms;
    row.flops = g.flops_per_call * static_cast<double>(t.calls);
    OpProfileRow& agg = per_op[static_cast<size_t>(g.op)];
    agg.calls += row.calls;
    agg.total_ms += row.total_ms;
    agg.flops += row.flops;
    p.gemms.push_back(std::move(row));
  }
  for (OpProfileRow& row : per_op) {
    if (row.calls == 0) continue;
    p.total_ms += row.total_ms;
    p.ops.push_back(std::move(row));
  }
  const auto by_time = [](const OpProfileRow& a, const OpProfileRow& b) {
    if (a.total_ms != b.total_ms) return a.total_ms > b.total_ms;
    return std::tie(a.op, a.shape) < std::tie(b.op, b.shape);
  };
  std::sort(p.ops.begin(), p.ops.end(), by_time);
  std::sort(p.gemms.begin(), p.gemms.end(), by_time);
  return p;
}

// ---- forwarding -----------------------------------------------------------------------------

Tensor ProfilingBackend::empty(Shape shape, DType dtype, MemoryKind kind) {
  return timed(kEmpty, [&] { return inner_->empty(std::move(shape), dtype, kind); });
}
void ProfilingBackend::fill(Tensor& t, float value) {
  timed(kFill, [&] { inner_->fill(t, value); });
}
void ProfilingBackend::init_normal(Tensor& t, const NormalInit& init) {
  timed(kInitNormal, [&] { inner_->init_normal(t, init); });
}
void ProfilingBackend::copy(const Tensor& src, Tensor& dst) {
  timed(kCopy, [&] { inner_->copy(src, dst); });
}

void ProfilingBackend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
                              float beta) {
  int key = kMatmul;
  if (enabled_) {
    const auto [ar, ac] = rows_cols(a);
    const auto [br, bc] = rows_cols(b);
    const auto [cr, cc] = rows_cols(c);
    const int64_t k = trans_a ? ar : ac;
    const double flops = 2.0 * static_cast<double>(cr) * static_cast<double>(cc) * static_cast<double>(k);
    key = gemm_key({kMatmul, ar, ac, br, bc, cr, cc, static_cast<int64_t>(a.dtype()), static_cast<int64_t>(b.dtype()),
                    static_cast<int64_t>(c.dtype()), trans_a, trans_b, beta != 0.0f},
                   flops);
  }
  timed(key, [&] { inner_->matmul(a, trans_a, b, trans_b, c, alpha, beta); });
}

int ProfilingBackend::linear_forward_key(int op, const Tensor& x, const Tensor& w, const Tensor& bias,
                                         const Tensor& y) {
  if (!enabled_) return op;
  const auto [xr, xc] = rows_cols(x);
  const auto [wr, wc] = rows_cols(w);
  const auto [yr, yc] = rows_cols(y);
  const double flops = 2.0 * static_cast<double>(xr) * static_cast<double>(xc) * static_cast<double>(wr);
  return gemm_key({op, xr, xc, wr, wc, yr, yc, static_cast<int64_t>(x.dtype()), static_cast<int64_t>(w.dtype()),
                   static_cast<int64_t>(y.dtype()), bias.defined(), 0, 0},
                  flops);
}

int ProfilingBackend::linear_backward_key(int op, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                          const Tensor& dw, const Tensor& dbias) {
  if (!enabled_) return op;
  const auto [dr, dc] = rows_cols(dy);
  const auto [xr, xc] = rows_cols(x);
  const auto [wr, wc] = rows_cols(w);
  const double one = 2.0 * static_cast<double>(dr) * static_cast<double>(dc) * static_cast<double>(xc);
  const double flops = one * (dx.defined() ? 2.0 : 1.0);
  return gemm_key({op, dr, dc, xr, xc, wr, wc, static_cast<int64_t>(dy.dtype()), static_cast<int64_t>(x.dtype()),
                   static_cast<int64_t>(w.dtype()), dx.defined(), dbias.defined(),
                   dw.defined() ? static_cast<int64_t>(dw.dtype()) : static_cast<int64_t>(DType::kF32)},
                  flops);
}

void ProfilingBackend::copy_to_host_async(const Tensor& src, Tensor& dst) {
  timed(kCopy, [&] { inner_->copy_to_host_async(src, dst); });
}

void ProfilingBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  timed(linear_forward_key(kLinearForward, x, w, bias, y), [&] { inner_->linear_forward(x, w, bias, y); });
}

void ProfilingBackend::linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                                       Tensor& dbias, GradWrite write) {
  timed(linear_backward_key(kLinearBackward, dy, x, w, dx, dw, dbias),
        [&] { inner_->linear_backward(dy, x, w, dx, dw, dbias, write); });
}

void ProfilingBackend::linear_residual_forward(const Tensor& x, const Tensor& w, const Tensor& bias,
                                               const Tensor& residual, Tensor& y) {
  timed(linear_forward_key(kLinearResidualForward, x, w, bias, y),
        [&] { inner_->linear_residual_forward(x, w, bias, residual, y); });
}

void ProfilingBackend::linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& pre, Tensor& y,
                                           Gelu kind) {
  timed(linear_forward_key(kLinearGeluForward, x, w, bias, y),
        [&] { inner_->linear_gelu_forward(x, w, bias, pre, y, kind); });
}

void ProfilingBackend::linear_dgelu_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& pre,
                                             Tensor& dpre, Tensor& dw, Tensor& dbias, Gelu kind, GradWrite write) {
  timed(linear_backward_key(kLinearDgeluBackward, dy, x, w, dpre, dw, dbias),
        [&] { inner_->linear_dgelu_backward(dy, x, w, pre, dpre, dw, dbias, kind, write); });
}

void ProfilingBackend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  timed(kAdd, [&] { inner_->add(a, b, out); });
}
void ProfilingBackend::scale(Tensor& x, float alpha) {
  timed(kScale, [&] { inner_->scale(x, alpha); });
}

void ProfilingBackend::bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, Tensor& out,
                                        const DropoutParams& dropout) {
  timed(kBiasDropoutAdd, [&] { inner_->bias_dropout_add(x, bias, residual, out, dropout); });
}
void ProfilingBackend::dropout_backward(const Tensor& dy, Tensor& dx, const DropoutParams& dropout) {
  timed(kDropoutBackward, [&] { inner_->dropout_backward(dy, dx, dropout); });
}
void ProfilingBackend::dropout_forward(const Tensor& x, Tensor& out, const DropoutParams& dropout) {
  timed(kDropoutForward, [&] { inner_->dropout_forward(x, out, dropout); });
}
void ProfilingBackend::bias_grad(const Tensor& dy, Tensor& dbias, GradWrite write) {
  timed(kBiasGrad, [&] { inner_->bias_grad(dy, dbias, write); });
}
void ProfilingBackend::bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& out, Gelu kind) {
  timed(kBiasGeluForward, [&] { inner_->bias_gelu_forward(x, bias, out, kind); });
}
void ProfilingBackend::bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                          Gelu kind) {
  timed(kBiasGeluBackward, [&] { inner_->bias_gelu_backward(dy, x, bias, dx, kind); });
}
void ProfilingBackend::swiglu_forward(const Tensor& x, Tensor& out) {
  timed(kSwigluForward, [&] { inner_->swiglu_forward(x, out); });
}
void ProfilingBackend::swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  timed(kSwigluBackward, [&] { inner_->swiglu_backward(dy, x, dx); });
}

void ProfilingBackend::layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                         Tensor& out, Tensor& mean, Tensor& rstd) {
  timed(kLayernormForward, [&] { inner_->layernorm_forward(x, gamma, beta, eps, out, mean, rstd); });
}
void ProfilingBackend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                          const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                          GradWrite write, GradWrite dx_write) {
  timed(kLayernormBackward,
        [&] { inner_->layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, dx_write); });
}
void ProfilingBackend::layernorm_backward_dropout_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                                         const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                                         Tensor& dgamma, Tensor& dbeta, Tensor& dz, Tensor& dz_colsum,
                                                         const DropoutParams& dropout, GradWrite write,
                                                         GradWrite dx_write, GradWrite colsum_write) {
  timed(kLayernormBackwardDropoutColsum, [&] {
    inner_->layernorm_backward_dropout_colsum(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, dz, dz_colsum, dropout,
                                              write, dx_write, colsum_write);
  });
}
void ProfilingBackend::layernorm_backward_colsum(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dgamma,
                                                 Tensor& dbeta, Tensor& dx_colsum, GradWrite write, GradWrite dx_write,
                                                 GradWrite colsum_write) {
  timed(kLayernormBackwardColsum, [&] {
    inner_->layernorm_backward_colsum(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, dx_colsum, write, dx_write,
                                      colsum_write);
  });
}

void ProfilingBackend::embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                                         const Tensor& wpe, Tensor& out) {
  timed(kEmbeddingForward, [&] { inner_->embedding_forward(tokens, positions, wte, wpe, out); });
}
void ProfilingBackend::embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout,
                                          Tensor& dwte, Tensor& dwpe) {
  timed(kEmbeddingBackward, [&] { inner_->embedding_backward(tokens, positions, dout, dwte, dwpe); });
}

void ProfilingBackend::attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& params) {
  timed(kAttentionForward, [&] { inner_->attention_forward(qkv, out, lse, params); });
}
void ProfilingBackend::attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                          Tensor& dqkv, const AttentionParams& params) {
  timed(kAttentionBackward, [&] { inner_->attention_backward(dout, qkv, out, lse, dqkv, params); });
}
void ProfilingBackend::attention_kv_cache(const Tensor& qkv, Tensor& k_cache, Tensor& v_cache, int64_t past,
                                          Tensor& out, const AttentionParams& params) {
  timed(kAttentionKvCache, [&] { inner_->attention_kv_cache(qkv, k_cache, v_cache, past, out, params); });
}

void ProfilingBackend::rotary_forward(Tensor& qkv, const RotaryParams& params) {
  timed(kRotaryForward, [&] { inner_->rotary_forward(qkv, params); });
}
void ProfilingBackend::rotary_backward(Tensor& dqkv, const RotaryParams& params) {
  timed(kRotaryBackward, [&] { inner_->rotary_backward(dqkv, params); });
}

void ProfilingBackend::fp8_cast(const Fp8Source& src, Tensor& q, Tensor& qt, const Fp8Quantization& s, Tensor& dbias,
                                GradWrite write) {
  timed(dbias.defined() ? kFp8QuantizeDbias : kFp8Quantize, [&] { inner_->fp8_cast(src, q, qt, s, dbias, write); });
}

void ProfilingBackend::fp8_gemm(const Tensor& a, const Tensor& a_scale_inv, const Tensor& b, const Tensor& b_scale_inv,
                                const Tensor& bias, Tensor& c, GradWrite write, Fp8Accumulation acc) {
  timed(kFp8Gemm, [&] { inner_->fp8_gemm(a, a_scale_inv, b, b_scale_inv, bias, c, write, acc); });
}
void ProfilingBackend::cross_entropy_forward(const Tensor& logits, const Tensor& labels, Tensor& losses, Tensor& lse) {
  timed(kCrossEntropyForward, [&] { inner_->cross_entropy_forward(logits, labels, losses, lse); });
}
void ProfilingBackend::cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& lse,
                                              const Tensor& dlosses, Tensor& dlogits) {
  timed(kCrossEntropyBackward, [&] { inner_->cross_entropy_backward(logits, labels, lse, dlosses, dlogits); });
}

void ProfilingBackend::cross_entropy_fused(const Tensor& logits, const Tensor& labels, const Tensor& dlosses,
                                           Tensor& losses, Tensor& lse, Tensor& dlogits) {
  timed(kCrossEntropyFused, [&] { inner_->cross_entropy_fused(logits, labels, dlosses, losses, lse, dlogits); });
}
void ProfilingBackend::vocab_parallel_ce_terms(const Tensor& max_lse, const Tensor& labels, Tensor& lse,
                                               Tensor& losses) {
  timed(kVocabParallelCeTerms, [&] { inner_->vocab_parallel_ce_terms(max_lse, labels, lse, losses); });
}
void ProfilingBackend::vocab_parallel_ce_finish(const Tensor& max_lse, Tensor& lse, Tensor& losses) {
  timed(kVocabParallelCeFinish, [&] { inner_->vocab_parallel_ce_finish(max_lse, lse, losses); });
}

double ProfilingBackend::sum_squares(const Tensor& x) {
  return timed(kSumSquares, [&] { return inner_->sum_squares(x); });
}
std::vector<double> ProfilingBackend::sum_squares_each(const std::vector<Tensor>& xs) {
  return timed(kSumSquares, [&] { return inner_->sum_squares_each(xs); });
}
bool ProfilingBackend::all_finite(const Tensor& x) {
  return timed(kAllFinite, [&] { return inner_->all_finite(x); });
}
int64_t ProfilingBackend::count_zeros(const Tensor& x) {
  return timed(kCountZeros, [&] { return inner_->count_zeros(x); });
}
void ProfilingBackend::adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                    const AdamWStep& step) {
  timed(kAdamwUpdate, [&] { inner_->adamw_update(param, grad, exp_avg, exp_avg_sq, step); });
}
void ProfilingBackend::adamw_update_segments(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                             const Tensor& segments, const AdamWStep& step, Tensor& model_copy) {
  timed(kAdamwUpdateSegments,
        [&] { inner_->adamw_update_segments(param, grad, exp_avg, exp_avg_sq, segments, step, model_copy); });
}

// ---- reports --------------------------------------------------------------------------------

std::string format_op_profile(const OpProfile& profile, int64_t iterations, double step_ms) {
  const double iters = static_cast<double>(std::max<int64_t>(iterations, 1));
  const auto share = [&](double total_ms) { return step_ms > 0 ? 100.0 * total_ms / iters / step_ms : 0.0; };
  std::string out;
  char buf[1024];
  std::snprintf(buf, sizeof(buf), " > time per op (%s), %lld timed iteration(s)%s\n", profile.clock.c_str(),
                static_cast<long long>(iterations), step_ms > 0 ? ", share of the measured step" : "");
  out += buf;
  std::snprintf(buf, sizeof(buf), "    %-24s %10s %10s %12s %10s %8s\n", "op", "calls", "calls/it", "total ms",
                "ms/iter", "% step");
  out += buf;
  for (const OpProfileRow& r : profile.ops) {
    std::snprintf(buf, sizeof(buf), "    %-24s %10lld %10.1f %12.3f %10.3f %7.1f%%\n", r.op.c_str(),
                  static_cast<long long>(r.calls), static_cast<double>(r.calls) / iters, r.total_ms, r.total_ms / iters,
                  share(r.total_ms));
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "    %-24s %10s %10s %12.3f %10.3f %7.1f%%\n", "all ops", "", "", profile.total_ms,
                profile.total_ms / iters, share(profile.total_ms));
  out += buf;
  if (step_ms > 0) {
    const double outside = step_ms - profile.total_ms / iters;
    std::snprintf(buf, sizeof(buf), "    %-24s %10s %10s %12s %10.3f %7.1f%%\n", "outside ops (host, idle)", "", "", "",
                  outside, 100.0 * outside / step_ms);
    out += buf;
  }
  if (!profile.gemms.empty()) {
    out += " > GEMM shapes (TFLOP/s achieved over each shape's own time)\n";
    std::snprintf(buf, sizeof(buf), "    %-16s %10s %10s %8s %10s %9s  %s\n", "op", "calls/it", "ms/iter", "% step",
                  "GFLOP/call", "TFLOP/s", "shape");
    out += buf;
    for (const OpProfileRow& r : profile.gemms) {
      const double gflop_call = r.calls > 0 ? r.flops / static_cast<double>(r.calls) / 1e9 : 0.0;
      const double tflops = r.total_ms > 0 ? r.flops / (r.total_ms * 1e-3) / 1e12 : 0.0;
      std::snprintf(buf, sizeof(buf), "    %-16s %10.1f %10.3f %7.1f%% %10.3f %9.2f  %s\n", r.op.c_str(),
                    static_cast<double>(r.calls) / iters, r.total_ms / iters, share(r.total_ms), gflop_call, tflops,
                    r.shape.c_str());
      out += buf;
    }
  }
  return out;
}

std::string op_profile_json_ops(const OpProfile& profile, int64_t iterations, double step_ms) {
  const double iters = static_cast<double>(std::max<int64_t>(iterations, 1));
  const auto share = [&](double total_ms) { return step_ms > 0 ? 100.0 * total_ms / iters / step_ms : 0.0; };
  std::string out = "[";
  char buf[1024];
  for (size_t i = 0; i < profile.ops.size(); ++i) {
    const OpProfileRow& r = profile.ops[i];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"op\": \"%s\", \"calls\": %lld, \"total_ms\": %.6f, \"ms_per_iter\": %.6f, "
                  "\"percent_of_step\": %.3f, \"gflop\": %.6f}",
                  i ? ", " : "", json_escape(r.op).c_str(), static_cast<long long>(r.calls), r.total_ms,
                  r.total_ms / iters, share(r.total_ms), r.flops / 1e9);
    out += buf;
  }
  return out + "]";
}

std::string op_profile_json_gemms(const OpProfile& profile, int64_t iterations, double step_ms) {
  const double iters = static_cast<double>(std::max<int64_t>(iterations, 1));
  const auto share = [&](double total_ms) { return step_ms > 0 ? 100.0 * total_ms / iters / step_ms : 0.0; };
  std::string out = "[";
  char buf[2048];
  for (size_t i = 0; i < profile.gemms.size(); ++i) {
    const OpProfileRow& r = profile.gemms[i];
    const double gflop_call = r.calls > 0 ? r.flops / static_cast<double>(r.calls) / 1e9 : 0.0;
    const double tflops = r.total_ms > 0 ? r.flops / (r.total_ms * 1e-3) / 1e12 : 0.0;
    std::snprintf(buf, sizeof(buf),
                  "%s{\"op\": \"%s\", \"shape\": \"%s\", \"calls\": %lld, \"total_ms\": %.6f, "
                  "\"ms_per_iter\": %.6f, \"percent_of_step\": %.3f, \"gflop_per_call\": %.6f, \"tflops\": %.3f}",
                  i ? ", " : "", json_escape(r.op).c_str(), json_escape(r.shape).c_str(),
                  static_cast<long long>(r.calls), r.total_ms, r.total_ms / iters, share(r.total_ms), gflop_call,
                  tflops);
    out += buf;
  }
  return out + "]";
}

std::string profile_json_string(const std::string& s) {
  std::string out = "\"";
  out += json_escape(s);
  out += '"';
  return out;
}

}  // namespace megatron::backend
