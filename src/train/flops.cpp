#include "train/flops.h"

#include <cstdio>

#include "core/error.h"

namespace megatron::train {

FlopsTerms flops_terms(const model::GPTConfig& m, int64_t batch, FlopsConvention convention) {
  MT_CHECK(m.num_layers > 0 && m.hidden_size > 0 && m.num_attention_heads > 0 && m.kv_channels > 0 &&
           m.ffn_hidden_size > 0 && m.seq_length > 0 && m.padded_vocab_size > 0)
      << "flops_terms() needs a complete GPTConfig (padded vocab included)";
  // Doubles throughout: B*s^2*L*q alone nears int64's limit at 175B shapes (7.6e18 for B=1536).
  const double B = static_cast<double>(batch);
  const double s = static_cast<double>(m.seq_length);
  const double L = static_cast<double>(m.num_layers);
  const double h = static_cast<double>(m.hidden_size);
  const double q = static_cast<double>(m.num_attention_heads) * static_cast<double>(m.kv_channels);
  // Keys and values: g query groups of d each (g = n without grouped-query attention).
  const double k = static_cast<double>(m.query_groups()) * static_cast<double>(m.kv_channels);
  const double f = static_cast<double>(m.ffn_hidden_size);
  const double V = static_cast<double>(m.padded_vocab_size);
  const double core = convention == FlopsConvention::k2025 ? 6.0 : 12.0;
  // Megatron's c: 2 GEMMs' worth of h x f (FC1, FC2), or 3 with --swiglu (FC1 is h x 2f).
  // RMSNorm changes nothing (norms are not counted).
  const double c = m.swiglu ? 3.0 : 2.0;
  FlopsTerms t;
  t.attention_linear = 6.0 * B * s * L * (h * (q + 2.0 * k) + q * h);
  t.core_attention = core * B * s * s * L * q;
  t.mlp = 6.0 * c * B * s * L * h * f;
  t.logits = 6.0 * B * s * h * V;
  return t;
}

double flops_per_iteration(const model::GPTConfig& m, int64_t global_batch, FlopsConvention convention) {
  return flops_terms(m, global_batch, convention).total();
}

double tflops_per_gpu(double flops, double seconds, int64_t world_size) {
  MT_CHECK(seconds > 0 && world_size > 0) << "seconds " << seconds << " world size " << world_size;
  return flops / (seconds * 1e12 * static_cast<double>(world_size));
}

namespace {

std::string sci(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4E", x);
  return buf;
}

// heads * d for the text: the integer, or its double when it does not fit in int64.
std::string heads_times_kv(int64_t heads, int64_t d) {
  int64_t q;
  if (!__builtin_mul_overflow(heads, d, &q)) return std::to_string(q);
  return sci(static_cast<double>(heads) * static_cast<double>(d));
}

// "q=k=n*d=..." without grouped-query attention, else q and k = g*d apart.
std::string query_and_key_widths(const model::GPTConfig& m) {
  const std::string q = heads_times_kv(m.num_attention_heads, m.kv_channels);
  if (m.query_groups() == m.num_attention_heads) return " q=k=n*d=" + q;
  return str_cat(" q=n*d=", q, " g=", m.query_groups(), " k=g*d=", heads_times_kv(m.query_groups(), m.kv_channels));
}

std::string row(const char* name, const std::string& formula, double per_sample, double per_iter) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "    %-28s %-22s = %s per sample, %s per iteration\n", name, formula.c_str(),
                sci(per_sample).c_str(), sci(per_iter).c_str());
  return buf;
}

}  // namespace

std::string flops_formula_text(const model::GPTConfig& m, int64_t global_batch, FlopsConvention convention) {
  const FlopsTerms one = flops_terms(m, 1, convention);
  const FlopsTerms all = flops_terms(m, global_batch, convention);
  const bool causal = convention == FlopsConvention::k2025;
  std::string out =
      str_cat("> FLOPs per iteration (",
              causal ? "Megatron 2025+ convention: causal core attention counted half"
                     : "Megatron 2024 convention: full core attention",
              "; recompute not counted):\n", "    B=", global_batch, " s=", m.seq_length, " L=", m.num_layers,
              " h=", m.hidden_size, " n=", m.num_attention_heads, query_and_key_widths(m), " f=", m.ffn_hidden_size,
              m.swiglu ? " (SwiGLU: c=3)" : "", " V=", m.padded_vocab_size, " (padded)\n");
  out += row("attention QKV + projection", "6*B*s*L*(h*(q+2k)+q*h)", one.attention_linear, all.attention_linear);
  out +=
      row("core attention (QK^T, AV)", causal ? "6*B*s^2*L*q" : "12*B*s^2*L*q", one.core_attention, all.core_attention);
  out += row(m.swiglu ? "MLP (FC1 gate+up, FC2)" : "MLP (FC1 + FC2)", m.swiglu ? "18*B*s*L*h*f" : "12*B*s*L*h*f",
             one.mlp, all.mlp);
  out += row("logits", "6*B*s*h*V", one.logits, all.logits);
  out += row("total", "", one.total(), all.total());
  return out;
}

}  // namespace megatron::train
