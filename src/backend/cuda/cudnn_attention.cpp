// cuDNN fused flash attention: a checked RAII wrapper over cuDNN backend descriptors, the
// forward and backward operation graphs, the plan cache, and CudaBackend's choice between cuDNN
// and our kernels. cudnn_attention.h describes the graphs and the strided Megatron layout;
// attention_impl.h the switch.
//
// Which cases go to cuDNN: bf16/fp16, head_dim a multiple of 8 and <= 128, dropout p < 1 over
// all heads of the model (not a TP share), 16-byte aligned tensors of one dtype, a cuDNN 9
// runtime whose engines accept both graphs.
// Known runtime limits are checked before asking cuDNN (see version_reason()). Everything else
// runs our kernels, the reason printed once on stderr (or an error under MEGATRON_ATTENTION_IMPL=
// cudnn). The decision is made per case for both directions together, so a forward that ran on
// cuDNN is followed by a backward on cuDNN; only the data-dependent checks (dtype of dout/dqkv,
// alignment) can split them, which stays correct because the lse of either implementation feeds
// the other's backward (tests/backend/cuda/cudnn_attention_test.cpp checks both ways); with
// dropout such a split is an error (the two draw different masks).
// Longer than 800 lines because the descriptor wrapper, the two operation graphs and the plan
// cache are one unit: only this file sees cuDNN (docs/design.md, "The layers").
#include "backend/cuda/cudnn_attention.h"

#include <cuda_runtime.h>
#include <cudnn_graph.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

static_assert(CUDNN_MAJOR >= 9, "cuDNN attention needs cuDNN 9's backend graph API (cudnn_graph.h)");

namespace megatron::backend {

namespace {

// ---- errors ----------------------------------------------------------------------------------

// cuDNN's message for the last failure on this thread ("" if it has none).
std::string last_cudnn_message() {
  char buf[2048] = {0};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return buf;
}

std::string status_text(cudnnStatus_t st) {
  std::string text = cudnnGetErrorString(st);
  const std::string detail = last_cudnn_message();
  if (!detail.empty()) text += " (" + detail + ")";
  return text;
}

[[noreturn]] void fail(cudnnStatus_t st, const std::string& what) {
  throw_error("cuDNN: ", what, " failed: ", status_text(st));
}

#define MT_CUDNN_CHECK(call)                                                                           \
  do {                                                                                                 \
    const cudnnStatus_t mt_st_ = (call);                                                               \
    if (mt_st_ != CUDNN_STATUS_SUCCESS) fail(mt_st_, str_cat(#call, " at ", __FILE__, ":", __LINE__)); \
  } while (0)

// An attribute id with its name, for error messages: MT_ATTR(CUDNN_ATTR_TENSOR_STRIDES).
struct Attr {
  cudnnBackendAttributeName_t id;
  const char* name;
};
#define MT_ATTR(a) \
  Attr { a, #a }

using Dims4 = std::array<int64_t, 4>;

// ---- RAII backend descriptor -----------------------------------------------------------------

// Owns one cuDNN backend descriptor; `what` names it in every error ("tensor 'Q' (uid 1) of the
// attention forward of bf16 b=2 s=1024 heads=12 head_dim=64").
class Descriptor {
 public:
  Descriptor() = default;
  Descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d_);
    if (st != CUDNN_STATUS_SUCCESS) {
      d_ = nullptr;
      fail(st, "creating " + what_);
    }
  }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);  // no throwing from a destructor
  }
  Descriptor(Descriptor&& o) noexcept : d_(std::exchange(o.d_, nullptr)), what_(std::move(o.what_)) {}
  Descriptor& operator=(Descriptor&& o) noexcept {
    if (this != &o) {
      if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
      d_ = std::exchange(o.d_, nullptr);
      what_ = std::move(o.what_);
    }
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  const std::string& what() const { return what_; }

  void set(Attr a, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    const cudnnStatus_t st = cudnnBackendSetAttribute(d_, a.id, type, count, values);
    if (st != CUDNN_STATUS_SUCCESS) fail(st, str_cat("setting ", a.name, " of ", what_));
  }
  void set_i64(Attr a, int64_t v) { set(a, CUDNN_TYPE_INT64, 1, &v); }
  void set_dims(Attr a, const Dims4& v) { set(a, CUDNN_TYPE_INT64, 4, v.data()); }
  void set_dtype(Attr a, cudnnDataType_t v) { set(a, CUDNN_TYPE_DATA_TYPE, 1, &v); }
  void set_bool(Attr a, bool v) { set(a, CUDNN_TYPE_BOOLEAN, 1, &v); }
  void set_handle(Attr a, cudnnHandle_t h) { set(a, CUDNN_TYPE_HANDLE, 1, &h); }
  void set_desc(Attr a, cudnnBackendDescriptor_t v) { set(a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v); }

  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  void finalize() {
    const cudnnStatus_t st = try_finalize();
    if (st != CUDNN_STATUS_SUCCESS) fail(st, "finalizing " + what_);
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string what_;
};

// ---- plans -------------------------------------------------------------------------------------

// A finalized execution plan with every descriptor it was built from (tensors, operations,
// graph, engine config), kept alive for as long as the plan.
struct Plan {
  std::vector<Descriptor> keep;
  cudnnBackendDescriptor_t exec = nullptr;
  int64_t workspace = 0;  // bytes cuDNN needs
  std::string name;       // "the attention forward of ..."
  std::string engine;     // "engine 8 (tensor_core)"
  // With MEGATRON_CUDNN_LIST_ENGINES=1: every other engine config the heuristics offered whose
  // plan finalizes, in their order ("mode A: engine 3 (tensor_core), 1024 B; ..."), for choosing
  // among them later; empty otherwise (listing finalizes every plan: slower set-up).
  std::string others;
};

struct EngineInfo {
  int64_t index = -1;  // cuDNN's global engine index (-1: unknown)
  std::string text;
  bool nondeterministic = false;
};

const char* note_name(cudnnBackendNumericalNote_t n) {
  switch (n) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      return "tensor_core";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      return "down_convert_inputs";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      return "reduced_precision_reduction";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
      return "nondeterministic";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP:
      return "strict_nan_prop";
    default:
      return "other";
  }
}

// The engine behind an engine config: its global index and numerical notes. Queries that fail
// leave "?" in the text (they only inform; the plan's finalize is what decides).
EngineInfo engine_info(cudnnBackendDescriptor_t cfg) {
  EngineInfo info;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine of a heuristics result");
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) !=
      CUDNN_STATUS_SUCCESS) {
    info.text = "engine ? (" + last_cudnn_message() + ")";
    return info;
  }
  int64_t index = -1;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
      CUDNN_STATUS_SUCCESS) {
    index = -1;
  }
  info.index = index;
  info.text = index >= 0 ? str_cat("engine ", index) : std::string("engine ?");
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &count, notes.data()) != CUDNN_STATUS_SUCCESS) {
    info.text += " (notes unknown)";
    return info;
  }
  std::string list;
  for (int64_t i = 0; i < count && i < static_cast<int64_t>(notes.size()); ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.nondeterministic = true;
    list += (list.empty() ? "" : ", ") + std::string(note_name(notes[i]));
  }
  info.text += " (" + (list.empty() ? std::string("no notes") : list) + ")";
  return info;
}

// Binds the plan's non-virtual tensors (uids) to pointers and runs it on the handle's stream.
void execute(cudnnHandle_t handle, const Plan& plan, const int64_t* uids, void* const* ptrs, int64_t n,
             void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack of " + plan.name);
  pack.set(MT_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, n, uids);
  pack.set(MT_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, n, ptrs);
  pack.set(MT_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  const cudnnStatus_t st = cudnnBackendExecute(handle, plan.exec, pack.get());
  if (st != CUDNN_STATUS_SUCCESS) fail(st, str_cat("cudnnBackendExecute of ", plan.name, " with ", plan.engine));
}

// ---- operation graphs --------------------------------------------------------------------------

// Builds one operation graph: tensors and operations are created, checked and kept here, the
// operations are wired through their tensor descriptors (returned as raw handles), and build()
// turns the graph into an execution plan.
class Graph {
 public:
  Graph(cudnnHandle_t handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  // A tensor of `uid` (bound to a pointer at execution unless virtual).
  cudnnBackendDescriptor_t tensor(const char* name, int64_t uid, cudnnDataType_t dtype, const Dims4& dims,
                                  const Dims4& strides, bool is_virtual = false, bool by_value = false) {
    Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, str_cat("tensor '", name, "' (uid ", uid, ") of ", name_));
    t.set_dtype(MT_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), dtype);
    t.set_dims(MT_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), dims);
    t.set_dims(MT_ATTR(CUDNN_ATTR_TENSOR_STRIDES), strides);
    t.set_i64(MT_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), uid);
    t.set_i64(MT_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), 16);
    t.set_bool(MT_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), is_virtual);
    if (by_value) t.set_bool(MT_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE), true);
    t.finalize();
    return keep_desc(std::move(t));
  }
  // An intermediate that lives only inside cuDNN's kernels.
  cudnnBackendDescriptor_t virt(const char* name, cudnnDataType_t dtype, const Dims4& dims, const Dims4& strides) {
    return tensor(name, next_virtual_uid_++, dtype, dims, strides, /*is_virtual=*/true);
  }
  // An fp32 scalar passed by value (a host float at execution).
  cudnnBackendDescriptor_t scalar(const char* name, int64_t uid) {
    return tensor(name, uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, /*by_value=*/true);
  }

  // c = a @ b over the last two dims, batched over the first two (fp32 accumulation).
  void matmul(const char* name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    Descriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, str_cat("matmul descriptor '", name, "' of ", name_));
    mm.set_dtype(MT_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_DATA_FLOAT);
    mm.finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, str_cat("matmul '", name, "' of ", name_));
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC), a);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC), b);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC), c);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC), mm.get());
    op.finalize();
    keep_desc(std::move(mm));
    add_op(std::move(op));
  }

  // y = mode(x [, b [, t]]) elementwise with broadcasting; `axis` for GEN_INDEX.
  void pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t math, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 int64_t axis = -1) {
    Descriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, str_cat("pointwise descriptor '", name, "' of ", name_));
    pw.set(MT_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    pw.set_dtype(MT_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), math);
    if (axis >= 0) pw.set_i64(MT_ATTR(CUDNN_ATTR_POINTWISE_AXIS), axis);
    pw.finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, str_cat("pointwise '", name, "' of ", name_));
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), pw.get());
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), x);
    if (b != nullptr) op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), b);
    if (t != nullptr) op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), t);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), y);
    op.finalize();
    keep_desc(std::move(pw));
    add_op(std::move(op));
  }
  void unary(const char* name, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    pointwise(name, mode, CUDNN_DATA_FLOAT, x, nullptr, nullptr, y);
  }
  void binary(const char* name, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t y) {
    pointwise(name, mode, CUDNN_DATA_FLOAT, x, b, nullptr, y);
  }

  // y = reduce(x) over the dims where y has extent 1 (here: the last).
  void reduction(const char* name, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Descriptor r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, str_cat("reduction descriptor '", name, "' of ", name_));
    r.set(MT_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    r.set_dtype(MT_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_DATA_FLOAT);
    r.finalize();
    Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, str_cat("reduction '", name, "' of ", name_));
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), x);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), y);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC), r.get());
    op.finalize();
    keep_desc(std::move(r));
    add_op(std::move(op));
  }

  // y = x seen through other dims/strides (here: a transpose of the last two dims).
  void reshape(const char* name, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, str_cat("reshape '", name, "' of ", name_));
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), x);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), y);
    op.finalize();
    add_op(std::move(op));
  }

  // A Bernoulli mask [b, h, s, s] (fp32 0/1, virtual): element kept with probability `keep`,
  // drawn by cuDNN's Philox from the int64 device scalars `seed` and `offset`.
  cudnnBackendDescriptor_t bernoulli(const char* name, double keep, cudnnBackendDescriptor_t seed,
                                     cudnnBackendDescriptor_t offset, const Dims4& dims, const Dims4& strides) {
    Descriptor rng(CUDNN_BACKEND_RNG_DESCRIPTOR, str_cat("rng descriptor '", name, "' of ", name_));
    const cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    rng.set(MT_ATTR(CUDNN_ATTR_RNG_DISTRIBUTION), CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist);
    rng.set(MT_ATTR(CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY), CUDNN_TYPE_DOUBLE, 1, &keep);
    rng.finalize();
    auto y = virt(name, CUDNN_DATA_FLOAT, dims, strides);
    Descriptor op(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, str_cat("rng '", name, "' of ", name_));
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RNG_YDESC), y);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RNG_DESC), rng.get());
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RNG_SEED), seed);
    op.set_desc(MT_ATTR(CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC), offset);
    op.finalize();
    keep_desc(std::move(rng));
    add_op(std::move(op));
    return y;
  }

  // The causal mask on scores x [b, h, s, s]: keep x where row >= col, else `neg_inf` (a
  // by-value scalar). Returns the masked scores (fp32, virtual).
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t neg_inf, const Dims4& dims,
                                       const Dims4& strides) {
    auto row = virt("row index", CUDNN_DATA_INT32, dims, strides);
    pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, row, /*axis=*/2);
    auto col = virt("column index", CUDNN_DATA_INT32, dims, strides);
    pointwise("column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, nullptr, nullptr, col, /*axis=*/3);
    auto keep_mask = virt("row >= column", CUDNN_DATA_BOOLEAN, dims, strides);
    pointwise("row >= column", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep_mask);
    auto y = virt("causal scores", CUDNN_DATA_FLOAT, dims, strides);
    pointwise("causal mask", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg_inf, keep_mask, y);
    return y;
  }

  // The finalized operation graph. Without a handle (check_graphs(), no GPU needed) cuDNN 9.19
  // still finalizes it; a release that insists on the handle answers BAD_PARAM_NULL_POINTER,
  // which is then not an error of the graph.
  Descriptor finalize_graph() {
    Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph of " + name_);
    graph.set(MT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
              ops_.data());
    if (handle_ != nullptr) {
      graph.set_handle(MT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), handle_);
      graph.finalize();
    } else if (const cudnnStatus_t st = graph.try_finalize();
               st != CUDNN_STATUS_SUCCESS && st != CUDNN_STATUS_BAD_PARAM_NULL_POINTER) {
      fail(st, "finalizing " + graph.what() + " (without a handle)");
    }
    return graph;
  }

  // Finalizes the graph and returns the first engine config (heuristics mode A, then FALLBACK)
  // whose execution plan finalizes; with `deterministic`, engines noted NONDETERMINISTIC are
  // skipped. Throws megatron::Error listing what each candidate answered.
  // MEGATRON_CUDNN_ENGINE=N (measurements): only engine N's configs are taken, where one
  // finalizes; otherwise the choice above.
  Plan build(bool deterministic) {
    static const int64_t want = env_count("MEGATRON_CUDNN_ENGINE", -1, -1, 1 << 20);
    if (want >= 0) {
      try {
        return build(deterministic, want);
      } catch (const Error&) {
      }
    }
    return build(deterministic, -1);
  }

  Plan build(bool deterministic, int64_t only_engine) {
    MT_CHECK(handle_ != nullptr) << "building a plan of " << name_ << " without a cuDNN handle";
    Descriptor graph = finalize_graph();
    static const bool list_all = env_switch("MEGATRON_CUDNN_LIST_ENGINES", false);
    std::optional<Plan> chosen;
    std::string others;

    std::string refused;
    std::vector<std::pair<cudnnBackendHeurMode_t, const char*>> modes = {{CUDNN_HEUR_MODE_A, "A"},
                                                                         {CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}};
    if (list_all) modes.insert(modes.begin() + 1, {CUDNN_HEUR_MODE_B, "B"});
    for (const auto& [mode, mode_name] : modes) {
      Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                      str_cat("engine heuristics (mode ", mode_name, ") of ", name_));
      heur.set_desc(MT_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), graph.get());
      heur.set(MT_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (const cudnnStatus_t st = heur.try_finalize(); st != CUDNN_STATUS_SUCCESS) {
        refused += str_cat("heuristics mode ", mode_name, ": ", status_text(st), "; ");
        continue;
      }
      int64_t count = 0;
      MT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              0, &count, nullptr));
      if (count <= 0) {
        refused += str_cat("heuristics mode ", mode_name, ": no engine; ");
        continue;
      }
      std::vector<Descriptor> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw;
      for (int64_t i = 0; i < count; ++i) {
        cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config of " + name_);
        raw.push_back(cfgs.back().get());
      }
      int64_t got = 0;
      MT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              count, &got, raw.data()));
      if (got <= 0) {
        refused += str_cat("heuristics mode ", mode_name, ": ", count, " engine configs announced, none returned; ");
      }
      for (int64_t i = 0; i < got && i < count; ++i) {
        const EngineInfo info = engine_info(raw[static_cast<size_t>(i)]);
        if (only_engine >= 0 && info.index != only_engine) {
          refused += info.text + ": not MEGATRON_CUDNN_ENGINE; ";
          continue;
        }
        if (deterministic && info.nondeterministic) {
          refused += info.text + ": refused (deterministic requested); ";
          continue;
        }
        Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
                        str_cat("execution plan (", info.text, ") of ", name_));
        plan.set_handle(MT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), handle_);
        plan.set_desc(MT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), raw[static_cast<size_t>(i)]);
        if (const cudnnStatus_t st = plan.try_finalize(); st != CUDNN_STATUS_SUCCESS) {
          refused += str_cat(info.text, ": ", status_text(st), "; ");
          continue;
        }
        int64_t ws = 0, n = 0;
        MT_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                1, &n, &ws));
        if (chosen) {
          others += str_cat("mode ", mode_name, ": ", info.text, ", ", ws, " B; ");
          continue;
        }
        Plan p;
        p.exec = plan.get();
        p.workspace = ws;
        p.name = name_;
        p.engine = info.text;
        p.keep = std::move(keep_);
        p.keep.push_back(std::move(cfgs[static_cast<size_t>(i)]));
        p.keep.push_back(std::move(plan));
        if (!list_all) {
          p.keep.push_back(std::move(graph));
          return p;
        }
        chosen = std::move(p);  // the graph stays here for the other modes' heuristics
      }
    }
    if (chosen) {
      chosen->keep.push_back(std::move(graph));
      chosen->others = others.empty() ? "none" : others;
      return std::move(*chosen);
    }
    throw_error("no cuDNN engine runs ", name_, ": ", refused);
  }

 private:
  cudnnBackendDescriptor_t keep_desc(Descriptor&& d) {
    keep_.push_back(std::move(d));
    return keep_.back().get();
  }
  void add_op(Descriptor&& op) { ops_.push_back(keep_desc(std::move(op))); }

  cudnnHandle_t handle_;
  std::string name_;
  int64_t next_virtual_uid_ = 100;  // below: the tensors bound at execution (kQ ...)
  std::vector<Descriptor> keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

// Unique ids of the tensors bound at execution.
constexpr int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kScale = 6, kNegInf = 7, kDO = 8, kDQ = 9, kDK = 10,
                  kDV = 11, kOne = 12, kDSum = 13, kDQAccum = 14, kSeed = 15, kOffset = 16, kDropScale = 17,
                  kDropScaleInv = 18, kDocumentBias = 19;

cudnnDataType_t cudnn_dtype(DType d) { return d == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// How `k`'s query groups (G < h) reach cuDNN (see cudnn_attention.h): folded into the batch,
// or, with documents (whose bias [b, 1, s, s] has no single stride over the folded dimension),
// with Q gathered into a packed buffer.
bool has_query_groups(const CudnnAttentionKey& k) { return k.groups > 0 && k.groups != k.heads; }
bool folds_groups(const CudnnAttentionKey& k) { return has_query_groups(k) && !k.documents; }
bool gathers_queries(const CudnnAttentionKey& k) { return has_query_groups(k) && k.documents; }

std::string key_name(const CudnnAttentionKey& k) {
  return str_cat(dtype_name(k.dtype), " b=", k.b, " s=", k.s, " heads=", k.heads,
                 has_query_groups(k) ? str_cat(" query_groups=", k.groups) : std::string(), " head_dim=", k.head_dim,
                 k.dropout_bits != 0 ? str_cat(" dropout=", k.dropout_p()) : std::string(),
                 k.deterministic ? " deterministic" : "", k.documents ? " documents" : "");
}

// The dropout mask of a graph: the seed and offset (int64 scalars in device memory, bound at
// execution) and the Bernoulli draw of the kept probabilities, 1 - p.
cudnnBackendDescriptor_t dropout_mask(Graph& g, const CudnnAttentionKey& k, const Dims4& dims, const Dims4& strides) {
  auto seed = g.tensor("dropout seed", kSeed, CUDNN_DATA_INT64, {1, 1, 1, 1}, {1, 1, 1, 1});
  auto offset = g.tensor("dropout offset", kOffset, CUDNN_DATA_INT64, {1, 1, 1, 1}, {1, 1, 1, 1});
  return g.bernoulli("dropout mask", 1.0 - static_cast<double>(k.dropout_p()), seed, offset, dims, strides);
}

// With documents (k.documents): x + the documents' bias [b, 1, s, s] (write_document_bias),
// broadcast over heads; else x.
cudnnBackendDescriptor_t add_document_bias(Graph& g, const CudnnAttentionKey& k, cudnnBackendDescriptor_t x,
                                           const Dims4& dims, const Dims4& strides) {
  if (!k.documents) return x;
  auto bias = g.tensor("document bias", kDocumentBias, cudnn_dtype(k.dtype), {k.b, 1, k.s, k.s},
                       {k.s * k.s, k.s * k.s, k.s, 1});
  auto y = g.virt("S + document bias", CUDNN_DATA_FLOAT, dims, strides);
  g.binary("S + document bias", CUDNN_POINTWISE_ADD, x, bias, y);
  return y;
}

// Dims and strides of one case (see cudnn_attention.h). The graphs see a batch of B rows of H
// query heads sharing Gk key/value heads: (b, h, G) as given, or (b G, h / G, 1) folded.
struct Layout {
  Dims4 bhsd, bhds, bhss, bhs1;
  Dims4 gsd, gds;                      // k, v as [B, Gk, s, d] and [B, Gk, d, s]
  Dims4 q;                             // q, dq as [B, H, s, d]: in place unless gathered (G < h with documents)
  Dims4 qkv;                           // k, v, dk, dv as [B, Gk, s, d] inside qkv/dqkv
  Dims4 qkv_t;                         // k, v as [B, Gk, d, s]
  Dims4 o;                             // o, do as [B, H, s, d]
  Dims4 scores;                        // [B, H, s, s] row-major
  Dims4 scores_t;                      // the same storage as [B, H, s_kv, s_q]
  Dims4 rows;                          // [B, H, s, 1]
  Dims4 packed;                        // [B, H, s, d] row-major (fp32 intermediates, the grouped dK/dV per query head)
  int64_t k_offset = 0, v_offset = 0;  // elements from the start of a qkv row

  explicit Layout(const CudnnAttentionKey& k) {
    const int64_t b = k.b, s = k.s, h = k.heads, d = k.head_dim, G = k.groups > 0 ? k.groups : h, n = h / G;
    const int64_t w = G * (n + 2) * d;  // one qkv row
    const bool folded = folds_groups(k);
    const int64_t B = folded ? b * G : b, H = folded ? n : h, Gk = folded ? 1 : G;
    bhsd = {B, H, s, d};
    bhds = {B, H, d, s};
    gsd = {B, Gk, s, d};
    gds = {B, Gk, d, s};
    bhss = {B, H, s, s};
    bhs1 = {B, H, s, 1};
    // Folded, batch row bi * G + g starts at bi w + g (n + 2) d = (bi G + g)(n + 2) d of a qkv
    // row, and at (bi G + g) n d of an o row: one stride each.
    const int64_t batch = folded ? (n + 2) * d : w;
    qkv = {batch, (n + 2) * d, b * w, 1};
    qkv_t = {batch, (n + 2) * d, 1, b * w};
    o = {H * d, d, b * h * d, 1};
    // In place: MHA's head j at j (n + 2) d = 3 j d of its row, a folded group's query jj at jj d.
    if (n == 1) {
      q = qkv;
    } else {
      q = folded ? Dims4{batch, d, b * w, 1} : o;
    }
    k_offset = n * d;
    v_offset = (n + 1) * d;
    scores = {H * s * s, s * s, s, 1};
    scores_t = {H * s * s, s * s, 1, s};
    rows = {H * s, s, 1, 1};
    packed = {H * s * d, s * d, d, 1};
  }
};

// The forward graph of `k` into g (empty). See cudnn_attention.h.
void forward_graph(Graph& g, const CudnnAttentionKey& k) {
  const Layout L(k);
  const cudnnDataType_t io = cudnn_dtype(k.dtype), f32 = CUDNN_DATA_FLOAT;
  auto q = g.tensor("Q", kQ, io, L.bhsd, L.q);
  auto kt = g.tensor("K^T", kK, io, L.gds, L.qkv_t);
  auto v = g.tensor("V", kV, io, L.gsd, L.qkv);
  auto o = g.tensor("O", kO, io, L.bhsd, L.o);
  auto stats = g.tensor("Stats", kStats, f32, L.bhs1, L.rows);
  auto scale = g.scalar("scale", kScale);
  auto neg_inf = g.scalar("-inf", kNegInf);

  auto s = g.virt("S", f32, L.bhss, L.scores);
  g.matmul("Q K^T", q, kt, s);
  auto scaled = g.virt("S * scale", f32, L.bhss, L.scores);
  g.binary("S * scale", CUDNN_POINTWISE_MUL, s, scale, scaled);
  auto masked = g.causal_mask(add_document_bias(g, k, scaled, L.bhss, L.scores), neg_inf, L.bhss, L.scores);
  // Softmax with its statistics: M = max, E = exp(S - M), L = sum E, Stats = M + log L, P = E / L.
  auto m = g.virt("M", f32, L.bhs1, L.rows);
  g.reduction("M = max S", CUDNN_REDUCE_TENSOR_MAX, masked, m);
  auto centered = g.virt("S - M", f32, L.bhss, L.scores);
  g.binary("S - M", CUDNN_POINTWISE_SUB, masked, m, centered);
  auto e = g.virt("E", f32, L.bhss, L.scores);
  g.unary("E = exp(S - M)", CUDNN_POINTWISE_EXP, centered, e);
  auto l = g.virt("L", f32, L.bhs1, L.rows);
  g.reduction("L = sum E", CUDNN_REDUCE_TENSOR_ADD, e, l);
  auto log_l = g.virt("log L", f32, L.bhs1, L.rows);
  g.unary("log L", CUDNN_POINTWISE_LOG, l, log_l);
  g.binary("Stats = M + log L", CUDNN_POINTWISE_ADD, m, log_l, stats);
  auto p = g.virt("P", k.dropout_bits != 0 ? f32 : io, L.bhss, L.scores);  // P V takes the I/O dtype
  g.binary("P = E / L", CUDNN_POINTWISE_DIV, e, l, p);
  if (k.dropout_bits != 0) {
    // P = P * mask * 1/(1-p) (cuDNN's flash fprop pattern with dropout).
    auto mask = dropout_mask(g, k, L.bhss, L.scores);
    auto kept = g.virt("P * mask", f32, L.bhss, L.scores);
    g.binary("P * mask", CUDNN_POINTWISE_MUL, p, mask, kept);
    auto dropped = g.virt("P dropped", io, L.bhss, L.scores);
    g.binary("P * mask / (1 - p)", CUDNN_POINTWISE_MUL, kept, g.scalar("1 / (1 - p)", kDropScale), dropped);
    p = dropped;
  }
  g.matmul("P V", p, v, o);
}

// The backward graph of `k` into g (empty).
void backward_graph(Graph& g, const CudnnAttentionKey& k) {
  const Layout L(k);
  const bool grouped = L.gsd[1] != L.bhsd[1];
  const cudnnDataType_t io = cudnn_dtype(k.dtype), f32 = CUDNN_DATA_FLOAT;
  auto q = g.tensor("Q", kQ, io, L.bhsd, L.q);
  auto kt = g.tensor("K^T", kK, io, L.gds, L.qkv_t);
  auto vt = g.tensor("V^T", kV, io, L.gds, L.qkv_t);
  auto o = g.tensor("O", kO, io, L.bhsd, L.o);
  auto stats = g.tensor("Stats", kStats, f32, L.bhs1, L.rows);
  auto scale = g.scalar("scale", kScale);
  auto neg_inf = g.scalar("-inf", kNegInf);
  const bool dropout = k.dropout_bits != 0;
  auto one = dropout ? nullptr : g.scalar("one", kOne);
  auto dout = g.tensor("dO", kDO, io, L.bhsd, L.o);
  auto dq = g.tensor("dQ", kDQ, io, L.bhsd, L.q);
  auto dk = g.tensor("dK", kDK, io, L.gsd, L.qkv);
  auto dv = g.tensor("dV", kDV, io, L.gsd, L.qkv);
  auto dsum = g.tensor("D", kDSum, f32, L.bhs1, L.rows);  // in our workspace

  // D_i = sum_t dO_it O_it (= sum_j P_ij dP_ij), times 1, or with dropout times 1 - p (then D is
  // compared with the masked dP before the 1/(1-p) rescale: see dS below).
  auto do_o = g.virt("dO * O", f32, L.bhsd, L.packed);
  g.binary("dO * O", CUDNN_POINTWISE_MUL, dout, o, do_o);
  auto do_o_sum = g.virt("sum dO * O", f32, L.bhs1, L.rows);
  g.reduction("sum dO * O", CUDNN_REDUCE_TENSOR_ADD, do_o, do_o_sum);
  g.binary("D", CUDNN_POINTWISE_MUL, do_o_sum, dropout ? g.scalar("1 - p", kDropScaleInv) : one, dsum);

  // P = exp(mask(scale Q K^T - Stats)), recomputed.
  auto s = g.virt("S", f32, L.bhss, L.scores);
  g.matmul("Q K^T", q, kt, s);
  auto scaled = g.virt("S * scale", f32, L.bhss, L.scores);
  g.binary("S * scale", CUDNN_POINTWISE_MUL, s, scale, scaled);
  auto centered = g.virt("S - Stats", f32, L.bhss, L.scores);
  g.binary("S - Stats", CUDNN_POINTWISE_SUB, add_document_bias(g, k, scaled, L.bhss, L.scores), stats, centered);
  auto masked = g.causal_mask(centered, neg_inf, L.bhss, L.scores);
  auto p = g.virt("P", f32, L.bhss, L.scores);
  g.unary("P = exp", CUDNN_POINTWISE_EXP, masked, p);

  // dV = P^T dO; with dropout P is the dropped P * mask / (1-p) of the forward (the same seed
  // and offset draw the same mask).
  cudnnBackendDescriptor_t mask = nullptr, drop_scale = nullptr, p_used = p;
  if (dropout) {
    mask = dropout_mask(g, k, L.bhss, L.scores);
    drop_scale = g.scalar("1 / (1 - p)", kDropScale);
    auto kept = g.virt("P * mask", f32, L.bhss, L.scores);
    g.binary("P * mask", CUDNN_POINTWISE_MUL, p, mask, kept);
    auto dropped = g.virt("P dropped", f32, L.bhss, L.scores);
    g.binary("P * mask / (1 - p)", CUDNN_POINTWISE_MUL, kept, drop_scale, dropped);
    p_used = dropped;
  }
  auto pt = g.virt("P^T", io, L.bhss, L.scores_t);
  g.reshape("P^T", p_used, pt);
  if (grouped) {  // per query head, then summed over each group's heads
    auto dv_heads = g.virt("dV per query head", io, L.bhsd, L.packed);
    g.matmul("P^T dO", pt, dout, dv_heads);
    g.reduction("dV = sum over the group", CUDNN_REDUCE_TENSOR_ADD, dv_heads, dv);
  } else {
    g.matmul("P^T dO", pt, dout, dv);
  }

  // dS = P (dP - D) scale. With dropout, dP (= dO V^T) is the gradient of the dropped P, so
  // dS = P (dP mask / (1-p) - D) scale, computed as P (dP mask - D (1-p)) / (1-p) scale (D
  // already carries the 1 - p).
  auto dp = g.virt("dP", f32, L.bhss, L.scores);
  g.matmul("dO V^T", dout, vt, dp);
  if (dropout) {
    auto dp_masked = g.virt("dP * mask", f32, L.bhss, L.scores);
    g.binary("dP * mask", CUDNN_POINTWISE_MUL, dp, mask, dp_masked);
    dp = dp_masked;
  }
  auto dp_d = g.virt("dP - D", f32, L.bhss, L.scores);
  g.binary("dP - D", CUDNN_POINTWISE_SUB, dp, dsum, dp_d);
  auto pdp = g.virt("P (dP - D)", f32, L.bhss, L.scores);
  g.binary("P (dP - D)", CUDNN_POINTWISE_MUL, dp_d, p, pdp);
  if (dropout) {
    auto rescaled = g.virt("P (dP - D) / (1 - p)", f32, L.bhss, L.scores);
    g.binary("P (dP - D) / (1 - p)", CUDNN_POINTWISE_MUL, pdp, drop_scale, rescaled);
    pdp = rescaled;
  }
  auto ds = g.virt("dS", f32, L.bhss, L.scores);
  g.binary("dS = P (dP - D) scale", CUDNN_POINTWISE_MUL, pdp, scale, ds);

  // dK = dS^T Q.
  auto dst = g.virt("dS^T", io, L.bhss, L.scores_t);
  g.reshape("dS^T", ds, dst);
  if (grouped) {
    auto dk_heads = g.virt("dK per query head", io, L.bhsd, L.packed);
    g.matmul("dS^T Q", dst, q, dk_heads);
    g.reduction("dK = sum over the group", CUDNN_REDUCE_TENSOR_ADD, dk_heads, dk);
  } else {
    g.matmul("dS^T Q", dst, q, dk);
  }

  // dQ = dS K: through an fp32 accumulator (atomics) unless deterministic.
  auto kmat = g.virt("K", io, L.gsd, L.qkv);
  g.reshape("K from K^T", kt, kmat);
  if (k.deterministic) {
    g.matmul("dS K", ds, kmat, dq);
  } else {
    auto acc = g.tensor("dQ accumulator", kDQAccum, f32, L.bhsd, L.packed);  // in our workspace
    g.matmul("dS K", ds, kmat, acc);
    g.unary("dQ = accumulator", CUDNN_POINTWISE_IDENTITY, acc, dq);
  }
}

Plan build_forward(cudnnHandle_t handle, const CudnnAttentionKey& k) {
  Graph g(handle, "the attention forward of " + key_name(k));
  forward_graph(g, k);
  return g.build(k.deterministic);
}

Plan build_backward(cudnnHandle_t handle, const CudnnAttentionKey& k) {
  Graph g(handle, "the attention backward of " + key_name(k));
  backward_graph(g, k);
  return g.build(k.deterministic);
}

// Limits of particular cuDNN releases, checked before asking for plans (from the cuDNN
// frontend's support checks and release notes). `v` is cudnnGetVersion(): 91500 for 9.15.0.
std::string version_reason(size_t v, const CudnnAttentionKey& k) {
  if (v == 91000 || v == 91001)
    return "cuDNN 9.10.0 and 9.10.1 have known bugs in bf16/fp16 attention (9.10.2+ is fine)";
  if (k.s == 1 && v <= 90900) return "cuDNN 9.9 and older do not run causal masking with s == 1";
  if (k.s % 128 != 0 && v <= 91500) {
    return str_cat("cuDNN 9.15 and older need a padding-mask workaround in the backward when s % 128 != 0 (s = ", k.s,
                   "), which this build does not construct");
  }
  return "";
}

constexpr int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// ---- CudnnAttention ----------------------------------------------------------------------------

struct CudnnAttention::Entry {
  std::string unavailable;
  Plan fwd, bwd;
  // Backward workspace: cuDNN's own at 0, then D [b, h, s] fp32, then the dQ accumulator
  // [b, h, s, d] fp32 (non-deterministic graph only).
  int64_t dsum_offset = 0, dq_accum_offset = 0, dq_accum_bytes = 0, bwd_bytes = 0;
  // Documents: the bias [b, s, s] after cuDNN's forward workspace and after the backward's
  // above; fwd_bytes is the forward's whole need.
  int64_t bias_offset_fwd = 0, bias_offset_bwd = 0, fwd_bytes = 0;
  // Query groups with documents: the packed Q [s, b, h, d] (forward and backward) and dQ
  // (backward) buffers after the above (0 bytes for G = h and for folded groups).
  int64_t q_offset_fwd = 0, q_offset_bwd = 0, dq_offset_bwd = 0, q_bytes = 0;
  // Scalars passed by value (their addresses go into the variant packs).
  float scale = 0.0f, neg_inf = -INFINITY, one = 1.0f, drop_scale = 1.0f, drop_scale_inv = 1.0f;
};

CudnnAttention::CudnnAttention(CudaBackend& backend) : backend_(backend) {
  version_ = cudnnGetVersion();
  if (version_ / 10000 != 9) {
    init_error_ = str_cat("cuDNN ", version_string(), " is loaded; the attention graphs need cuDNN 9");
    return;
  }
  cudaDeviceProp prop{};
  if (const cudaError_t err = cudaGetDeviceProperties(&prop, backend_.device_index()); err != cudaSuccess) {
    cudaGetLastError();
    init_error_ = str_cat("cudaGetDeviceProperties failed: ", cudaGetErrorString(err));
    return;
  }
  if (prop.major < 8) {
    init_error_ = str_cat("cuDNN fused attention needs sm_80 or newer; device ", backend_.device_index(), " is sm_",
                          prop.major, prop.minor);
    return;
  }
  if (const cudnnStatus_t st = cudnnCreate(&handle_); st != CUDNN_STATUS_SUCCESS) {
    handle_ = nullptr;
    init_error_ = "cuDNN: cudnnCreate failed: " + status_text(st);
    return;
  }
  if (const cudnnStatus_t st = cudnnSetStream(handle_, backend_.stream()); st != CUDNN_STATUS_SUCCESS) {
    init_error_ = "cuDNN: cudnnSetStream failed: " + status_text(st);
  }
}

CudnnAttention::~CudnnAttention() {
  entries_.clear();  // plans before the handle
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

std::string CudnnAttention::check_graphs(const CudnnAttentionKey& key) {
  try {
    Graph fwd(nullptr, "the attention forward of " + key_name(key));
    forward_graph(fwd, key);
    fwd.finalize_graph();
    Graph bwd(nullptr, "the attention backward of " + key_name(key));
    backward_graph(bwd, key);
    bwd.finalize_graph();
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

std::string CudnnAttention::version_string() const {
  return str_cat(version_ / 10000, ".", (version_ % 10000) / 100, ".", version_ % 100);
}

CudnnAttention::Entry& CudnnAttention::entry(const CudnnAttentionKey& key) {
  if (auto it = entries_.find(key); it != entries_.end()) return *it->second;
  auto e = std::make_unique<Entry>();
  std::memcpy(&e->scale, &key.scale_bits, sizeof(float));
  if (key.dropout_bits != 0) {
    e->drop_scale = 1.0f / (1.0f - key.dropout_p());  // as our kernels and the CPU scale kept values
    e->drop_scale_inv = 1.0f - key.dropout_p();
  }
  // Masked scores: -inf, except below 9.10 where cuDNN's softmax wants the lowest finite float.
  e->neg_inf = version_ < 91000 ? -FLT_MAX : -INFINITY;
  if (!init_error_.empty()) {
    e->unavailable = init_error_;
  } else if (std::string why = version_reason(version_, key); !why.empty()) {
    e->unavailable = str_cat(why, " (cuDNN ", version_string(), ")");
  } else {
    try {
      e->fwd = build_forward(handle_, key);
      e->bwd = build_backward(handle_, key);
      const int64_t rows = key.b * key.heads * key.s;
      e->dsum_offset = align_up(e->bwd.workspace, 256);
      e->dq_accum_offset = align_up(e->dsum_offset + rows * 4, 256);
      e->dq_accum_bytes = key.deterministic ? 0 : rows * key.head_dim * 4;
      e->bwd_bytes = e->dq_accum_offset + e->dq_accum_bytes;
      e->fwd_bytes = e->fwd.workspace;
      if (key.documents) {
        const int64_t bias_bytes = key.b * key.s * key.s * 2;
        e->bias_offset_fwd = align_up(e->fwd_bytes, 256);
        e->fwd_bytes = e->bias_offset_fwd + bias_bytes;
        e->bias_offset_bwd = align_up(e->bwd_bytes, 256);
        e->bwd_bytes = e->bias_offset_bwd + bias_bytes;
      }
      if (gathers_queries(key)) {
        e->q_bytes = rows * key.head_dim * 2;
        e->q_offset_fwd = align_up(e->fwd_bytes, 256);
        e->fwd_bytes = e->q_offset_fwd + e->q_bytes;
        e->q_offset_bwd = align_up(e->bwd_bytes, 256);
        e->dq_offset_bwd = align_up(e->q_offset_bwd + e->q_bytes, 256);
        e->bwd_bytes = e->dq_offset_bwd + e->q_bytes;
      }
      workspace(std::max(e->fwd_bytes, e->bwd_bytes));  // sized now, not in the middle of a step
      if (key.dropout_bits != 0 && !rng_.defined()) rng_ = backend_.empty({8}, DType::kF32, MemoryKind::kWorkspace);
    } catch (const Error& err) {
      e->unavailable = err.what();
      e->fwd = Plan();
      e->bwd = Plan();
    }
  }
  Entry& made = *entries_.emplace(key, std::move(e)).first->second;
  // MEGATRON_CUDNN_LIST_ENGINES: the engines this key could use, once.
  if (!made.fwd.others.empty()) std::fprintf(stderr, "megatron: %s\n", describe(key).c_str());
  return made;
}

const std::string& CudnnAttention::unavailable(const CudnnAttentionKey& key) { return entry(key).unavailable; }

void* CudnnAttention::workspace(int64_t bytes) {
  if (!workspace_.defined() || workspace_.nbytes() < bytes) {
    const int64_t rounded = align_up(std::max<int64_t>(bytes, 1), int64_t{1} << 20);
    workspace_ = Tensor();  // the old buffer goes first (cudaFree waits for work still using it)
    workspace_ = backend_.empty({rounded / 4}, DType::kF32, MemoryKind::kWorkspace);
  }
  return workspace_.data();
}

void* CudnnAttention::rng_state(const DropoutParams& dropout) {
  MT_CHECK(rng_.defined()) << "cuDNN dropout state used before its case's plans were built";
  store_cudnn_dropout_seed(rng_.data(), dropout, backend_.stream());
  return rng_.data();
}

void CudnnAttention::forward(const CudnnAttentionKey& key, const void* qkv, void* out, float* lse,
                             const DropoutParams& dropout, const int32_t* key_start) {
  Entry& e = entry(key);
  MT_CHECK(e.unavailable.empty()) << "cuDNN attention forward of " << key_name(key) << ": " << e.unavailable;
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  const Layout L(key);
  char* ws = static_cast<char*>(workspace(e.fwd_bytes));
  char* q = base;
  if (e.q_bytes > 0) {
    q = ws + e.q_offset_fwd;
    gather_queries(qkv, key.s, key.b, key.heads, key.groups, key.head_dim, key.dtype, q, backend_.stream());
  }
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  std::vector<void*> ptrs = {q, base + L.k_offset * 2, base + L.v_offset * 2, out, lse, &e.scale, &e.neg_inf};
  if (key.documents) {
    write_document_bias(key_start, key.b, key.s, key.dtype, ws + e.bias_offset_fwd, backend_.stream());
    uids.push_back(kDocumentBias);
    ptrs.push_back(ws + e.bias_offset_fwd);
  }
  if (key.dropout_bits != 0) {
    char* rng = static_cast<char*>(rng_state(dropout));
    uids.insert(uids.end(), {kSeed, kOffset, kDropScale});
    ptrs.insert(ptrs.end(), {rng, rng + 16, &e.drop_scale});
  }
  execute(handle_, e.fwd, uids.data(), ptrs.data(), static_cast<int64_t>(uids.size()), ws);
}

void CudnnAttention::backward(const CudnnAttentionKey& key, const void* dout, const void* qkv, const void* out,
                              const float* lse, void* dqkv, const DropoutParams& dropout, const int32_t* key_start) {
  Entry& e = entry(key);
  MT_CHECK(e.unavailable.empty()) << "cuDNN attention backward of " << key_name(key) << ": " << e.unavailable;
  char* ws = static_cast<char*>(workspace(e.bwd_bytes));
  // Before 9.6.0 cuDNN expects the dQ accumulator zeroed by the caller (it zeroes it itself since).
  if (e.dq_accum_bytes > 0 && version_ < 90600) {
    MT_CUDA_CHECK(cudaMemsetAsync(ws + e.dq_accum_offset, 0, static_cast<size_t>(e.dq_accum_bytes), backend_.stream()));
  }
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* grad = static_cast<char*>(dqkv);
  const Layout L(key);
  char* q = in;
  char* dq = grad;
  if (e.q_bytes > 0) {
    q = ws + e.q_offset_bwd;
    dq = ws + e.dq_offset_bwd;
    gather_queries(qkv, key.s, key.b, key.heads, key.groups, key.head_dim, key.dtype, q, backend_.stream());
  }
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale, kNegInf, kDO, kDQ, kDK, kDV, kDSum};
  std::vector<void*> ptrs = {q,
                             in + L.k_offset * 2,
                             in + L.v_offset * 2,
                             const_cast<void*>(out),
                             const_cast<float*>(lse),
                             &e.scale,
                             &e.neg_inf,
                             const_cast<void*>(dout),
                             dq,
                             grad + L.k_offset * 2,
                             grad + L.v_offset * 2,
                             ws + e.dsum_offset};
  if (e.dq_accum_bytes > 0) {
    uids.push_back(kDQAccum);
    ptrs.push_back(ws + e.dq_accum_offset);
  }
  if (key.documents) {
    write_document_bias(key_start, key.b, key.s, key.dtype, ws + e.bias_offset_bwd, backend_.stream());
    uids.push_back(kDocumentBias);
    ptrs.push_back(ws + e.bias_offset_bwd);
  }
  if (key.dropout_bits != 0) {
    char* rng = static_cast<char*>(rng_state(dropout));
    uids.insert(uids.end(), {kSeed, kOffset, kDropScale, kDropScaleInv});
    ptrs.insert(ptrs.end(), {rng, rng + 16, &e.drop_scale, &e.drop_scale_inv});
  } else {
    uids.push_back(kOne);
    ptrs.push_back(&e.one);
  }
  execute(handle_, e.bwd, uids.data(), ptrs.data(), static_cast<int64_t>(uids.size()), ws);
  if (e.q_bytes > 0) {
    scatter_query_grads(dq, key.s, key.b, key.heads, key.groups, key.head_dim, key.dtype, dqkv, backend_.stream());
  }
}

std::string CudnnAttention::describe(const CudnnAttentionKey& key) {
  const Entry& e = entry(key);
  std::string out = str_cat("cuDNN ", version_string(), ", ", key_name(key), ": ");
  if (!e.unavailable.empty()) return out + "unavailable: " + e.unavailable;
  out += str_cat("forward ", e.fwd.engine, ", workspace ", e.fwd.workspace, " B; backward ", e.bwd.engine,
                 ", workspace ", e.bwd_bytes, " B (cuDNN's ", e.bwd.workspace, " B)");
  if (!e.fwd.others.empty()) out += str_cat("; other forward engines: ", e.fwd.others);
  if (!e.bwd.others.empty()) out += str_cat("; other backward engines: ", e.bwd.others);
  return out;
}

void CudnnAttentionDeleter::operator()(CudnnAttention* p) const { delete p; }

// ---- CudaBackend: choosing the implementation ----------------------------------------------------

AttentionImpl attention_impl_from_env() {
  const char* v = std::getenv("MEGATRON_ATTENTION_IMPL");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return AttentionImpl::kAuto;
  if (std::strcmp(v, "cudnn") == 0) return AttentionImpl::kCudnn;
  if (std::strcmp(v, "own") == 0) return AttentionImpl::kOwn;
  throw_error("[MEGATRON_ATTENTION_IMPL] '", v, "' is not one of auto, cudnn, own");
}

namespace {

CudnnAttentionKey make_key(DType dtype, int64_t s, int64_t b, const AttentionParams& p, bool deterministic) {
  CudnnAttentionKey k;
  k.b = b;
  k.s = s;
  k.heads = p.heads;
  k.groups = p.groups();
  k.head_dim = p.head_dim;
  k.dtype = dtype;
  std::memcpy(&k.scale_bits, &p.softmax_scale, sizeof(float));
  if (p.dropout.p > 0.0f) std::memcpy(&k.dropout_bits, &p.dropout.p, sizeof(float));
  k.deterministic = deterministic;
  k.documents = p.key_start.defined();
  return k;
}

const int32_t* key_start_of(const AttentionParams& p) {
  return p.key_start.defined() ? static_cast<const int32_t*>(p.key_start.data()) : nullptr;
}

}  // namespace

std::string CudaBackend::cudnn_attention_reason(DType dtype, int64_t s, int64_t b, const AttentionParams& p,
                                                std::initializer_list<const Tensor*> io) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    return str_cat(dtype_name(dtype), " tensors (cuDNN's fused attention is used for bf16 and fp16)");
  }
  if (p.dropout.p > 0.0f && (p.dropout_total_heads() != p.heads || p.dropout_head0 != 0)) {
    return "attention dropout over a tensor-parallel share of the heads (cuDNN's masks cannot follow the global "
           "head index, which keeps the single-process masks under any TP layout)";
  }
  if (p.dropout.p >= 1.0f) return str_cat("attention dropout p = ", p.dropout.p, " (cuDNN needs p < 1)");
  // cuDNN 9's fused attention takes head_dim up to 256 on Hopper (up to 128 on Ampere, where
  // its engines refuse the graphs and the reason says so). Past 128 it is the only
  // implementation: the GPT-3 13B shape of the NLP benchmark has head_dim 5120 / 32 = 160.
  if (p.head_dim % 8 != 0 || p.head_dim > 256) {
    return str_cat("head_dim ", p.head_dim, " (cuDNN here takes multiples of 8 up to 256)");
  }
  for (const Tensor* t : io) {
    if (t->dtype() != dtype)
      return str_cat("tensors of mixed dtypes (", t->describe(), " with ", dtype_name(dtype), ")");
    if (reinterpret_cast<uintptr_t>(t->data()) % 16 != 0) return "a tensor that is not 16-byte aligned";
  }
  if (p.key_start.defined() && reinterpret_cast<uintptr_t>(p.key_start.data()) % 16 != 0) {
    return "documents' key starts (--reset-attention-mask) that are not 16-byte aligned";
  }
  if (!cudnn_attention_) cudnn_attention_.reset(new CudnnAttention(*this));
  return cudnn_attention_->unavailable(make_key(dtype, s, b, p, attention_deterministic_));
}

bool CudaBackend::use_cudnn_attention(const std::string& reason, DType dtype, int64_t s, int64_t b,
                                      const AttentionParams& p) {
  if (reason.empty()) return true;
  const std::string what =
      str_cat("attention (", dtype_name(dtype), ", s ", s, ", b ", b, ", ", p.heads, " heads of ", p.head_dim, ")");
  if (attention_impl_ == AttentionImpl::kCudnn) {
    throw_error("[MEGATRON_ATTENTION_IMPL=cudnn] cuDNN cannot run ", what, ": ", reason);
  }
  if (p.head_dim > kOwnAttentionMaxHeadDim) {
    throw_error("[--hidden-size / --num-attention-heads] ", what, ": head_dim ", p.head_dim,
                " runs only on cuDNN's fused attention (our kernels take head_dim <= ", kOwnAttentionMaxHeadDim,
                "), and cuDNN cannot run it: ", reason);
  }
  if (attention_fallbacks_reported_.insert(reason).second) {
    std::fprintf(stderr, "megatron: %s runs our own kernels, not cuDNN: %s\n", what.c_str(), reason.c_str());
  }
  return false;
}

bool CudaBackend::cudnn_attention_forward(const Tensor& qkv, Tensor& out, Tensor& lse, const AttentionParams& p) {
  const int64_t s = qkv.dim(0), b = qkv.dim(1);
  if (attention_impl_ == AttentionImpl::kOwn || s == 0 || b == 0) return false;
  if (!use_cudnn_attention(cudnn_attention_reason(qkv.dtype(), s, b, p, {&qkv, &out}), qkv.dtype(), s, b, p)) {
    return false;
  }
  cudnn_attention_->forward(make_key(qkv.dtype(), s, b, p, attention_deterministic_), qkv.data(), out.data(),
                            static_cast<float*>(lse.data()), p.dropout, key_start_of(p));
  return true;
}

bool CudaBackend::cudnn_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                           Tensor& dqkv, const AttentionParams& p) {
  const int64_t s = qkv.dim(0), b = qkv.dim(1);
  if (attention_impl_ == AttentionImpl::kOwn || s == 0 || b == 0) return false;
  const std::string reason = cudnn_attention_reason(qkv.dtype(), s, b, p, {&qkv, &out, &dout, &dqkv});
  // With dropout the backward must draw the forward's mask: a forward that ran on cuDNN (its
  // case and tensors accepted) cannot be followed by our kernels' backward.
  if (!reason.empty() && p.dropout.p > 0.0f && attention_impl_ != AttentionImpl::kCudnn &&
      cudnn_attention_reason(qkv.dtype(), s, b, p, {&qkv, &out}).empty()) {
    throw_error("attention backward with dropout: the forward ran on cuDNN but the backward cannot (", reason,
                "); cuDNN's dropout masks are not our kernels' (set MEGATRON_ATTENTION_IMPL=own for both)");
  }
  if (!use_cudnn_attention(reason, qkv.dtype(), s, b, p)) return false;
  cudnn_attention_->backward(make_key(qkv.dtype(), s, b, p, attention_deterministic_), dout.data(), qkv.data(),
                             out.data(), static_cast<const float*>(lse.data()), dqkv.data(), p.dropout,
                             key_start_of(p));
  return true;
}

std::string CudaBackend::cudnn_attention_unavailable(DType dtype, int64_t s, int64_t b, const AttentionParams& p) {
  if (attention_impl_ == AttentionImpl::kOwn) return "the attention implementation is set to 'own'";
  if (s <= 0 || b <= 0) return "an empty tensor (nothing to compute)";
  return cudnn_attention_reason(dtype, s, b, p, {});
}

std::string CudaBackend::describe_cudnn_attention(DType dtype, int64_t s, int64_t b, const AttentionParams& p) {
  const std::string reason = cudnn_attention_unavailable(dtype, s, b, p);
  if (!reason.empty() || !cudnn_attention_) return "cuDNN attention unavailable: " + reason;
  return cudnn_attention_->describe(make_key(dtype, s, b, p, attention_deterministic_));
}

// ---- attention_impl.h ----------------------------------------------------------------------------

void set_attention_impl(Backend& backend, AttentionImpl impl) {
  as_cuda(backend, "set_attention_impl").set_attention_impl(impl);
}

void set_attention_deterministic(Backend& backend, bool deterministic) {
  as_cuda(backend, "set_attention_deterministic").set_attention_deterministic(deterministic);
}

std::string cudnn_attention_unavailable(Backend& backend, DType dtype, int64_t s, int64_t b,
                                        const AttentionParams& params) {
  return as_cuda(backend, "cudnn_attention_unavailable").cudnn_attention_unavailable(dtype, s, b, params);
}

std::string check_cudnn_attention_graphs(DType dtype, int64_t s, int64_t b, const AttentionParams& params,
                                         bool deterministic) {
  return CudnnAttention::check_graphs(make_key(dtype, s, b, params, deterministic));
}

std::string describe_cudnn_attention(Backend& backend, DType dtype, int64_t s, int64_t b,
                                     const AttentionParams& params) {
  return as_cuda(backend, "describe_cudnn_attention").describe_cudnn_attention(dtype, s, b, params);
}

}  // namespace megatron::backend
