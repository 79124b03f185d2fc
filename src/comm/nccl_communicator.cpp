// NcclCommunicator (see nccl_communicator.h). Compiled only with MT_BUILD_CUDA.
// Longer than 800 lines because it is the only file that sees NCCL: the collectives, the
// copy-engine set-up and its fall-back belong together.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device_allocator.h"
#include "backend/cuda/piece_sum.h"
#include "comm/injected_failure.h"
#include "comm/self_communicator.h"
#include "core/error.h"

namespace megatron::comm {
namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return ncclUint8;  // moved as bits; never reduced
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kAvg:
      return ncclAvg;
  }
  return ncclSum;
}

[[noreturn]] void fail(int64_t rank, const std::string& group, const char* call, const std::string& why) {
  throw_error("[rank ", rank, "] ", call, " on group '", group, "' failed: ", why);
}

void check_nccl(ncclResult_t rc, const char* call, int64_t rank, const std::string& group, ncclComm_t comm) {
  if (rc == ncclSuccess) return;
  std::string why = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') why += str_cat(" (", last, ")");
  fail(rank, group, call, why);
}

void check_cuda(cudaError_t rc, const char* call, int64_t rank, const std::string& group) {
  if (rc != cudaSuccess) fail(rank, group, call, cudaGetErrorString(rc));
}

// NCCL 2.28: copy-engine collectives (ncclAlltoAll and ncclAllGather between symmetric
// windows on a communicator whose CTA policy is NCCL_CTA_POLICY_ZERO, one host).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define MT_NCCL_COPY_ENGINE 1
#else
#define MT_NCCL_COPY_ENGINE 0
#endif

// "<call> failed<detail>: <NCCL's reason>[ (NCCL's last message)]", or the injection named
// (comm/injected_failure.h). `comm` may be null (ncclMemAlloc).
std::string call_failed(const char* call, const std::string& detail, ncclResult_t rc, bool injected, ncclComm_t comm) {
  if (injected) return str_cat(call, " failed", detail, " (injected by MEGATRON_TEST_NCCL_FAIL)");
  std::string why = str_cat(call, " failed", detail, ": ", ncclGetErrorString(rc));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') why += str_cat(" (", last, ")");
  return why;
}

int current_device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}

// The allocations made with ncclMemAlloc: base -> bytes (slack included), so that
// enable_copy_engine can tell whether a tensor lies in one and register all of it. Per GPU
// since use_symmetric_memory(true): the ncclMemAlloc calls made, and why the allocator gave up
// ("" while it has not), which enable_copy_engine reports.
std::mutex symmetric_mutex;
std::map<const char*, int64_t>& symmetric_allocations() {
  static std::map<const char*, int64_t> table;
  return table;
}
struct SymmetricState {
  int64_t calls = 0;
  std::string failure;
};
SymmetricState& symmetric_state(int device) {  // under symmetric_mutex
  static std::map<int, SymmetricState> states;
  return states[device];
}
// The allocation holding [p, p + bytes): its base and size, or {nullptr, 0}.
std::pair<const char*, int64_t> symmetric_allocation_of(const void* p, int64_t bytes) {
  std::lock_guard<std::mutex> lock(symmetric_mutex);
  const char* c = static_cast<const char*>(p);
  auto it = symmetric_allocations().upper_bound(c);
  if (it == symmetric_allocations().begin()) return {nullptr, 0};
  --it;
  if (c + bytes > it->first + it->second) return {nullptr, 0};
  return *it;
}

// bytes (+ kSymmetricSlackBytes, zeroed) of ncclMemAlloc's memory on the current GPU, or nullptr
// and *why where ncclMemAlloc or the zeroing fails.
void* try_symmetric_alloc(int64_t bytes, std::string* why) {
#if MT_NCCL_COPY_ENGINE
  const int device = current_device();
  int64_t nth = 0;
  {
    std::lock_guard<std::mutex> lock(symmetric_mutex);
    nth = ++symmetric_state(device).calls;
  }
  void* p = nullptr;
  const int64_t total = bytes + kSymmetricSlackBytes;
  const bool injected = injected_failure("ncclMemAlloc", nth);
  const ncclResult_t rc = injected ? ncclSystemError : ncclMemAlloc(&p, static_cast<size_t>(total));
  if (rc != ncclSuccess) {
    cudaGetLastError();  // a failed CUDA call inside must not surface at the next launch check
    *why = call_failed("ncclMemAlloc", str_cat(" for ", total, " bytes"), rc, injected, nullptr);
    return nullptr;
  }
  // Zeroed (the slack too, so that what an all-to-all reads past a bucket's end is never
  // uninitialised memory) and waited for: the legacy stream's memset is not ordered with the
  // backend's non-blocking stream, whose first use of the memory may be to initialise it.
  // A failure here is a refusal too (not a throw): the receive buffer's peers wait in agree.
  if (cudaMemset(p, 0, static_cast<size_t>(total)) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    *why = str_cat("zeroing ", total, " bytes of symmetric memory failed: ", cudaGetErrorString(cudaGetLastError()));
    ncclMemFree(p);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(symmetric_mutex);
  symmetric_allocations()[static_cast<const char*>(p)] = total;
  return p;
#else
  (void)bytes;
  *why = "this build's NCCL is older than 2.28";
  return nullptr;
#endif
}

// use_symmetric_memory's allocator (backend::DeviceAllocator): ncclMemAlloc's memory, or
// nullptr (the backend then uses cudaMalloc, and the copy engines stay off) from its first
// failure on: a platform without NCCL's symmetric memory trains as without
// MEGATRON_DP_COPY_ENGINE instead of stopping.
void* symmetric_alloc(int64_t bytes) {
  const int device = current_device();
  {
    std::lock_guard<std::mutex> lock(symmetric_mutex);
    if (!symmetric_state(device).failure.empty()) return nullptr;
  }
  std::string why;
  void* p = try_symmetric_alloc(bytes, &why);
  if (p == nullptr) {
    std::lock_guard<std::mutex> lock(symmetric_mutex);
    symmetric_state(device).failure = why;
  }
  return p;
}
void symmetric_release(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(symmetric_mutex);
    symmetric_allocations().erase(static_cast<const char*>(p));
  }
#if MT_NCCL_COPY_ENGINE
  // cudaFree waits for the work still using the memory; unmapping it does not.
  cudaDeviceSynchronize();
  ncclMemFree(p);
#endif
}

#define MT_NCCL_CHECK(call) check_nccl((call), #call, world_rank_, name_, comm_)
#define MT_NCCL_CUDA_CHECK(call) check_cuda((call), #call, world_rank_, name_)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, backend::CudaBackend& backend, std::string name, int64_t world_rank)
      : comm_(comm), backend_(backend), stream_(backend.stream()), name_(std::move(name)), world_rank_(world_rank) {
    if (const char* t = std::getenv("MEGATRON_COMM_TRACE"); t != nullptr && std::string(t) == "1") trace_.emplace();
    int r = 0, s = 0;
    MT_NCCL_CHECK(ncclCommUserRank(comm_, &r));
    MT_NCCL_CHECK(ncclCommCount(comm_, &s));
    rank_ = r;
    size_ = s;
    MT_NCCL_CUDA_CHECK(cudaMalloc(&scratch_, kScratchDoubles * sizeof(double)));
  }
  ~NcclCommunicator() override {
    if (ce_comm_ != nullptr) {
      const bool unwinding = std::uncaught_exceptions() > 0;
#if MT_NCCL_COPY_ENGINE
      if (!unwinding) {
        for (const Window& w : windows_) ncclCommWindowDeregister(ce_comm_, w.window);
      }
#endif
      if (unwinding) {
        ncclCommAbort(ce_comm_);
      } else {
        ncclCommDestroy(ce_comm_);
      }
    }
    cudaFree(scratch_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (async_done_ != nullptr) cudaEventDestroy(async_done_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
    // During unwinding the peers may be stuck in a collective: abort rather than destroy
    // (ncclCommDestroy would wait for them).
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

  void all_reduce(Tensor& x, ReduceOp op) override { enqueue_all_reduce(x, op, blocking_stream()); }

  void all_reduce_host(std::span<double> values, ReduceOp op) override {
    blocking_stream();
    // The scratch grows to the largest request (up to kMaxScratchDoubles per round): gathered
    // host tables (the straggler report's, all_gather_strings') go in one collective, not one
    // per 64 values. Every rank sees the same sizes, so the rounds match.
    if (values.size() > scratch_doubles_ && scratch_doubles_ < kMaxScratchDoubles) {
      const size_t want = std::min(values.size(), kMaxScratchDoubles);
      double* bigger = nullptr;
      MT_NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
      MT_NCCL_CUDA_CHECK(cudaMalloc(&bigger, want * sizeof(double)));
      MT_NCCL_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = bigger;
      scratch_doubles_ = want;
    }
    for (size_t off = 0; off < values.size(); off += scratch_doubles_) {
      const size_t n = std::min(values.size() - off, scratch_doubles_);
      MT_NCCL_CUDA_CHECK(
          cudaMemcpyAsync(scratch_, values.data() + off, n * sizeof(double), cudaMemcpyHostToDevice, stream_));
      MT_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, n, ncclFloat64, nccl_op(op), comm_, stream_));
      MT_NCCL_CUDA_CHECK(
          cudaMemcpyAsync(values.data() + off, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_));
      MT_NCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }

  void reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op) override {
    enqueue_reduce_scatter(in, out, counts, op, blocking_stream());
  }
  void all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts) override {
    enqueue_all_gather(in, out, counts, blocking_stream());
  }

  std::unique_ptr<PendingCollective> start_all_reduce(Tensor& x, ReduceOp op) override {
    const cudaStream_t s = async_stream();
    trace_begin("all_reduce", x.nbytes());
    enqueue_all_reduce(x, op, s);
    return async_started();
  }
  std::unique_ptr<PendingCollective> start_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                                          ReduceOp op) override {
    const cudaStream_t s = async_stream();
    trace_begin("reduce_scatter", in.nbytes());
    enqueue_reduce_scatter(in, out, counts, op, s);
    return async_started();
  }
  std::unique_ptr<PendingCollective> start_all_gather(const Tensor& in, Tensor& out,
                                                      std::span<const int64_t> counts) override {
    const cudaStream_t s = async_stream();
    trace_begin("all_gather", out.nbytes());
    enqueue_all_gather(in, out, counts, s);
    return async_started();
  }

  CopyEngineResult enable_copy_engine(std::span<const Tensor> buffers, int64_t max_reduce_scatter) override {
#if MT_NCCL_COPY_ENGINE
    // Each step ends with every rank's verdict (agree): a step that failed on any rank is undone
    // on every rank, and every rank returns the first rank's reason. A rank that fails inside
    // one of NCCL's collective calls before its peers are done with it leaves them waiting in
    // NCCL: the watchdog's case (enable_copy_engine runs under its scope).
    std::string why;
    auto failed_here = [&](const std::string& reason) { why = str_cat("rank ", world_rank_, ": ", reason); };
    if (ce_comm_ != nullptr) {
      // Already on (an earlier model's buffers): only if these lie in its windows too.
      if (!std::all_of(buffers.begin(), buffers.end(),
                       [&](const Tensor& b) { return b.defined() && in_window(b.data(), b.nbytes()); })) {
        failed_here("these buffers lie outside the windows enabled before");
      }
      if (!agree(why)) return {false, first_reason(why)};
      return {true, ""};
    }
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '?';
    const std::vector<std::string> hosts = all_gather_strings(*this, host);
    if (std::any_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h != hosts[0]; })) {
      why = "the group's ranks are on several hosts";
    }
    // The distinct allocations to register (base, bytes, a tensor in it), in the same order on
    // every rank.
    struct Allocation {
      const char* base;
      int64_t bytes;
      const Tensor* holder;
    };
    std::vector<Allocation> allocations;
    for (const Tensor& b : buffers) {
      const auto [base, bytes] = b.defined() && b.device() == Device::kCUDA
                                     ? symmetric_allocation_of(b.data(), b.nbytes())
                                     : std::pair<const char*, int64_t>{nullptr, 0};
      if (base == nullptr) {
        if (why.empty()) {
          std::lock_guard<std::mutex> lock(symmetric_mutex);
          const std::string& failure = symmetric_state(current_device()).failure;
          failed_here(failure.empty() ? "a buffer is not in NCCL's symmetric memory (comm::use_symmetric_memory)"
                                      : failure);
        }
      } else if (std::none_of(allocations.begin(), allocations.end(),
                              [&](const Allocation& a) { return a.base == base; })) {
        allocations.push_back({base, bytes, &b});
      }
    }
    if (!agree(why, static_cast<int64_t>(allocations.size()))) return turn_off(why);
    // A child of this group with the zero-CTA policy: NCCL runs its all-to-alls and all-gathers
    // between symmetric windows on the copy engines. Its collectives go on the same streams as
    // this group's, in program order, so the two never interleave differently on two ranks. An
    // injected failure keeps the child (the split is collective) for turn_off to release.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.CTAPolicy = NCCL_CTA_POLICY_ZERO;
    ncclComm_t child = nullptr;
    const ncclResult_t split_rc = ncclCommSplit(comm_, 0, static_cast<int>(rank_), &child, &config);
    const bool split_injected = injected_failure("ncclCommSplit", 1);
    if (split_rc == ncclSuccess) ce_comm_ = child;
    if (split_rc != ncclSuccess || split_injected) {
      failed_here(call_failed("ncclCommSplit", " (the copy engines' communicator)", split_rc, split_injected, comm_));
    }
    if (!agree(why)) return turn_off(why);
    // Each window keeps its memory alive until it is deregistered. NCCL answers success with no
    // window where the communicator has no symmetric memory (NCCL_WIN_ENABLE=0, no cuMem, no
    // peer access between the GPUs): that is a refusal too.
    int64_t registrations = 0;
    auto add_window = [&](const char* base, int64_t bytes, std::shared_ptr<Storage> keep) {
      Window w{base, bytes, nullptr, std::move(keep)};
      const ncclResult_t rc = ncclCommWindowRegister(ce_comm_, const_cast<char*>(base), static_cast<size_t>(bytes),
                                                     &w.window, NCCL_WIN_COLL_SYMMETRIC);
      const bool injected = injected_failure("ncclCommWindowRegister", ++registrations);
      if (rc == ncclSuccess && w.window != nullptr) windows_.push_back(std::move(w));  // turn_off deregisters it
      if (rc != ncclSuccess || injected) {
        failed_here(call_failed("ncclCommWindowRegister", str_cat(" for ", bytes, " bytes"), rc, injected, ce_comm_));
      } else if (w.window == nullptr) {
        failed_here(
            "ncclCommWindowRegister gave no window: NCCL has no symmetric memory on this communicator "
            "(NCCL_WIN_ENABLE, NCCL_CUMEM_ENABLE, peer access between the GPUs)");
      }
      return agree(why);
    };
    for (const Allocation& a : allocations) {
      if (!add_window(a.base, a.bytes, a.holder->storage())) return turn_off(why);  // the storage outlives its window
    }
    // The all-to-all's receive buffer, fp32 (a reduce-scatter of any other dtype keeps NCCL's
    // kernels); none when no reduce-scatter is to use the copy engines (0).
    if (max_reduce_scatter > 0) {
      const int64_t ring_bytes = max_reduce_scatter * static_cast<int64_t>(sizeof(float));
      std::string alloc_why;
      void* p = try_symmetric_alloc(ring_bytes, &alloc_why);
      if (p == nullptr) failed_here(str_cat("the receive buffer: ", alloc_why));
      if (!agree(why)) {
        if (p != nullptr) symmetric_release(p);
        return turn_off(why);
      }
      auto ring = std::make_shared<Storage>(p, ring_bytes, Device::kCUDA, MemoryKind::kOther, symmetric_release);
      const auto [base, bytes] = symmetric_allocation_of(p, ring_bytes);
      if (!add_window(base, bytes, std::move(ring))) return turn_off(why);
      ring_ = static_cast<float*>(p);
      ring_elems_ = max_reduce_scatter;
    }
    return {true, ""};
#else
    (void)buffers;
    (void)max_reduce_scatter;
    return {false, "this build's NCCL is older than 2.28"};
#endif
  }

#if MT_NCCL_COPY_ENGINE
  // Whether no rank has a reason (`why` empty on all) and, given `count`, every rank the same
  // count: one host all-reduce, so every rank takes the same branch after it.
  bool agree(std::string& why, int64_t count = 0) {
    double v[3] = {why.empty() ? 1.0 : 0.0, static_cast<double>(count), -static_cast<double>(count)};
    all_reduce_host(std::span<double>(v, 3), ReduceOp::kMin);
    if (v[0] == 1.0 && v[1] != -v[2]) why = "the ranks' buffers lie in different numbers of allocations";
    return v[0] == 1.0 && v[1] == -v[2];
  }
  // After a failed agree, on every rank: the first rank's reason (each names its world rank),
  // gathered over the group.
  std::string first_reason(const std::string& mine) {
    const std::vector<std::string> all = all_gather_strings(*this, mine, 320);
    for (const std::string& r : all) {
      if (!r.empty()) return r;
    }
    return mine;
  }
  // After a failed agree, on every rank: undoes the windows and the child communicator, and
  // returns off with the first reason.
  CopyEngineResult turn_off(const std::string& mine) {
    // Best effort, unchecked: this undoes a set-up that already failed, and the SM collectives
    // that follow do not depend on it. Abort, not destroy: nothing was queued on the child, and
    // abort does not wait for peers that may not have one.
    for (const Window& w : windows_) ncclCommWindowDeregister(ce_comm_, w.window);
    windows_.clear();  // the receive buffer's storage goes with its window
    if (ce_comm_ != nullptr) ncclCommAbort(ce_comm_);
    ce_comm_ = nullptr;
    ring_ = nullptr;
    ring_elems_ = 0;
    cudaGetLastError();  // NCCL's failed CUDA calls must not surface at the next launch check
    return {false, first_reason(mine)};
  }
#endif

  void use_copy_engine(bool on) override { ce_on_ = on; }

  void enqueue_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op,
                              cudaStream_t stream) {
    check_pieces("reduce_scatter", *this, in.numel(), out.numel(), counts);
    MT_CHECK(in.dtype() == out.dtype()) << "reduce_scatter: dtypes differ";
    if (in.numel() == 0) return;
    require_device(in, "reduce_scatter");
    if (copy_engine_reduce_scatter(in, out, counts, op, stream)) return;
    const ncclDataType_t t = nccl_type(in.dtype());
    const int64_t esize = dtype_size(in.dtype());
    if (all_equal(counts)) {
      // In place when out is this rank's piece of in (NCCL's convention).
      MT_NCCL_CHECK(
          ncclReduceScatter(in.data(), out.data(), static_cast<size_t>(out.numel()), t, nccl_op(op), comm_, stream));
      return;
    }
    MT_NCCL_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t n = counts[static_cast<size_t>(r)];
      if (n > 0) {
        const char* src = static_cast<const char*>(in.data()) + off * esize;
        void* dst = r == rank_ ? out.data() : const_cast<char*>(src);  // recvbuff is read on the root only
        MT_NCCL_CHECK(ncclReduce(src, dst, static_cast<size_t>(n), t, nccl_op(op), static_cast<int>(r), comm_, stream));
      }
      off += n;
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void enqueue_all_gather(const Tensor& in, Tensor& out, std::span<const int64_t> counts, cudaStream_t stream) {
    check_pieces("all_gather", *this, out.numel(), in.numel(), counts);
    MT_CHECK(in.dtype() == out.dtype()) << "all_gather: dtypes differ";
    if (out.numel() == 0) return;
    require_device(out, "all_gather");
    const ncclDataType_t t = nccl_type(out.dtype());
    const int64_t esize = dtype_size(out.dtype());
    if (all_equal(counts)) {
      // On the copy engines when `out` (and so `in`, this rank's piece of it, or not: then NCCL
      // falls back to its kernels) lies in a registered window.
      const bool ce = ce_comm_ != nullptr && ce_on_ && in_window(out.data(), out.nbytes());
      MT_NCCL_CHECK(
          ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), t, ce ? ce_comm_ : comm_, stream));
      return;
    }
    MT_NCCL_CHECK(ncclGroupStart());
    int64_t off = 0;
    for (int64_t r = 0; r < size_; ++r) {
      const int64_t n = counts[static_cast<size_t>(r)];
      if (n > 0) {
        char* dst = static_cast<char*>(out.data()) + off * esize;
        const void* src = r == rank_ ? in.data() : dst;  // sendbuff is read on the root only
        MT_NCCL_CHECK(ncclBroadcast(src, dst, static_cast<size_t>(n), t, static_cast<int>(r), comm_, stream));
      }
      off += n;
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void broadcast(Tensor& x, int64_t root) override {
    MT_CHECK(root >= 0 && root < size_) << "broadcast root " << root;
    if (x.numel() == 0) return;
    require_device(x, "broadcast");
    MT_NCCL_CHECK(ncclBroadcast(x.data(), x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()),
                                static_cast<int>(root), comm_, blocking_stream()));
  }

  void send(const Tensor& x, int64_t peer) override {
    if (x.numel() == 0) return;
    require_device(x, "send");
    MT_NCCL_CHECK(ncclSend(x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), static_cast<int>(peer),
                           comm_, blocking_stream()));
  }

  void recv(Tensor& x, int64_t peer) override {
    if (x.numel() == 0) return;
    require_device(x, "recv");
    MT_NCCL_CHECK(ncclRecv(x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), static_cast<int>(peer),
                           comm_, blocking_stream()));
  }

  void send_recv(std::span<const PointToPoint> ops) override { enqueue_send_recv(ops, blocking_stream()); }

  std::unique_ptr<PendingCollective> start_send_recv(std::span<const PointToPoint> ops) override {
    const cudaStream_t s = async_stream();
    int64_t bytes = 0;
    for (const PointToPoint& op : ops) bytes += op.tensor.nbytes();
    trace_begin("send_recv", bytes);
    enqueue_send_recv(ops, s);
    return async_started();
  }

  void enqueue_send_recv(std::span<const PointToPoint> ops, cudaStream_t stream) {
    // One group: NCCL starts every send and receive together, so pairs cannot deadlock.
    MT_NCCL_CHECK(ncclGroupStart());
    for (const PointToPoint& op : ops) {
      MT_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_) << "send_recv with " << op.peer << " on " << rank_;
      if (op.tensor.numel() == 0) continue;
      require_device(op.tensor, op.send ? "send_recv (send)" : "send_recv (recv)");
      const size_t n = static_cast<size_t>(op.tensor.numel());
      if (op.send) {
        MT_NCCL_CHECK(
            ncclSend(op.tensor.data(), n, nccl_type(op.tensor.dtype()), static_cast<int>(op.peer), comm_, stream));
      } else {
        MT_NCCL_CHECK(
            ncclRecv(op.tensor.data(), n, nccl_type(op.tensor.dtype()), static_cast<int>(op.peer), comm_, stream));
      }
    }
    MT_NCCL_CHECK(ncclGroupEnd());
  }

  void connect_peers(std::span<const int64_t> peers) override {
    // One double each way per peer, from and into the scratch (scratch_[0] out, scratch_[1 + i]
    // in), in one group on the compute stream; the host waits until the connections exist.
    MT_CHECK(peers.size() + 1 <= scratch_doubles_) << "connect_peers with " << peers.size() << " peers";
    const cudaStream_t stream = blocking_stream();
    MT_NCCL_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, sizeof(double), stream));
    MT_NCCL_CHECK(ncclGroupStart());
    for (size_t i = 0; i < peers.size(); ++i) {
      const int64_t peer = peers[i];
      MT_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "connect_peers with " << peer << " on " << rank_;
      MT_NCCL_CHECK(ncclSend(scratch_, 1, ncclFloat64, static_cast<int>(peer), comm_, stream));
      MT_NCCL_CHECK(ncclRecv(scratch_ + 1 + i, 1, ncclFloat64, static_cast<int>(peer), comm_, stream));
    }
    MT_NCCL_CHECK(ncclGroupEnd());
    MT_NCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void barrier() override {
    double one = 1.0;
    all_reduce_host(std::span<double>(&one, 1), ReduceOp::kSum);
  }

  std::unique_ptr<Communicator> split(int64_t color, int64_t key, const std::string& name) override {
    ncclComm_t sub = nullptr;
    MT_NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : static_cast<int>(color), static_cast<int>(key),
                                &sub, nullptr));
    if (sub == nullptr) return nullptr;
    // A group of one rank needs no NCCL: each NCCL communicator holds device memory from its
    // creation on (measured on 4 GPUs: the eleven groups of a TP4 rank, six of them of one rank,
    // held ~3.9 GiB before the first step), so the one-rank groups of a layout (dp, pp, cp, ...
    // at TP = world size) become SelfCommunicators, as in a single-process run.
    int count = 0;
    MT_NCCL_CHECK(ncclCommCount(sub, &count));
    if (count == 1) {
      MT_NCCL_CHECK(ncclCommDestroy(sub));
      return std::make_unique<SelfCommunicator>(backend_, name);
    }
    return std::make_unique<NcclCommunicator>(sub, backend_, name, world_rank_);
  }

 private:
  // A finished-on-the-device marker of one started collective (see PendingCollective).
  class Pending final : public PendingCollective {
   public:
    Pending(NcclCommunicator& owner, cudaEvent_t done) : owner_(owner), done_(done) {}
    ~Pending() override {
      try {
        wait();
      } catch (...) {
        // Destruction during unwinding: the communicator is being aborted anyway.
      }
    }
    void wait() override {
      if (done_ == nullptr) return;
      cudaEvent_t e = done_;
      done_ = nullptr;
      owner_.wait_for(e);
    }

   private:
    NcclCommunicator& owner_;
    cudaEvent_t done_;
  };

  void enqueue_all_reduce(Tensor& x, ReduceOp op, cudaStream_t stream) {
    if (x.numel() == 0) return;
    require_device(x, "all_reduce");
    MT_NCCL_CHECK(ncclAllReduce(x.data(), x.data(), static_cast<size_t>(x.numel()), nccl_type(x.dtype()), nccl_op(op),
                                comm_, stream));
  }

  // Where a blocking collective goes: the compute stream, first made to wait for any started
  // collective still unwaited, so that this group's collectives never run concurrently (NCCL
  // needs them in the same order on every rank).
  cudaStream_t blocking_stream() {
    if (async_outstanding_) {
      MT_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, async_done_, 0));
      async_outstanding_ = false;
    }
    return stream_;
  }
  // Where a started collective goes: the communicator's own (high-priority) stream, after the
  // compute stream's work so far (which produced its input).
  cudaStream_t async_stream() {
    if (comm_stream_ == nullptr) {
      int least = 0, greatest = 0;
      MT_NCCL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      MT_NCCL_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
      MT_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      MT_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&async_done_, cudaEventDisableTiming));
    }
    MT_NCCL_CUDA_CHECK(cudaEventRecord(ready_, stream_));
    MT_NCCL_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
    return comm_stream_;
  }
  // MEGATRON_COMM_TRACE=1 (diagnostics): per started collective, when the compute stream asked
  // for it, when it began and ended on the comm stream, and when the compute stream first
  // waited for one; printed on stderr by rank 0 at each wait after the 3rd, relative to the
  // first request of the batch, e.g. "all_reduce 160.0 MB: asked 0.0 began 0.1 ended 0.7 ms".
  struct TraceRecord {
    const char* op;
    int64_t bytes;
    cudaEvent_t asked, began, ended;
  };
  void trace_begin(const char* op, int64_t bytes) {
    if (!trace_) return;
    TraceRecord r{op, bytes, nullptr, nullptr, nullptr};
    for (cudaEvent_t* e : {&r.asked, &r.began, &r.ended}) MT_NCCL_CUDA_CHECK(cudaEventCreate(e));
    MT_NCCL_CUDA_CHECK(cudaEventRecord(r.asked, stream_));
    MT_NCCL_CUDA_CHECK(cudaEventRecord(r.began, comm_stream_));
    trace_.value().push_back(r);
  }
  void trace_waited() {
    if (!trace_ || trace_->empty() || in_flight_ != 0) return;
    const cudaEvent_t waited = trace_reached_;
    trace_reached_ = nullptr;
    MT_NCCL_CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
    MT_NCCL_CUDA_CHECK(cudaEventSynchronize(waited));
    if (world_rank_ == 0 && ++trace_batches_ > 3 && trace_batches_ <= 6) {
      const cudaEvent_t t0 = trace_->front().asked;
      auto ms = [&](cudaEvent_t e) {
        float v = 0.0f;
        cudaEventElapsedTime(&v, t0, e);
        return v;
      };
      std::string text =
          str_cat("[rank 0] comm trace on '", name_, "': compute stream reached the wait at ", ms(waited), " ms\n");
      for (const TraceRecord& r : *trace_) {
        text += str_cat("  ", r.op, " ", static_cast<double>(r.bytes) / 1e6, " MB: asked ", ms(r.asked), " began ",
                        ms(r.began), " ended ", ms(r.ended), " ms\n");
      }
      std::fputs(text.c_str(), stderr);
    }
    for (const TraceRecord& r : *trace_) {
      for (cudaEvent_t e : {r.asked, r.began, r.ended}) cudaEventDestroy(e);
    }
    cudaEventDestroy(waited);
    trace_->clear();
  }

  // Marks the collective just enqueued on comm_stream_ and returns its handle.
  std::unique_ptr<PendingCollective> async_started() {
    if (trace_) MT_NCCL_CUDA_CHECK(cudaEventRecord(trace_->back().ended, comm_stream_));
    cudaEvent_t done = nullptr;
    if (free_events_.empty()) {
      MT_NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } else {
      done = free_events_.back();
      free_events_.pop_back();
    }
    MT_NCCL_CUDA_CHECK(cudaEventRecord(done, comm_stream_));
    MT_NCCL_CUDA_CHECK(cudaEventRecord(async_done_, comm_stream_));
    async_outstanding_ = true;
    ++in_flight_;
    return std::make_unique<Pending>(*this, done);
  }
  // The compute stream waits for `done`; the event goes back to the pool (a later record does
  // not affect a wait already enqueued).
  void wait_for(cudaEvent_t done) {
    free_events_.push_back(done);
    --in_flight_;
    if (trace_ && trace_reached_ == nullptr) {
      MT_NCCL_CUDA_CHECK(cudaEventCreate(&trace_reached_));
      MT_NCCL_CUDA_CHECK(cudaEventRecord(trace_reached_, stream_));
    }
    MT_NCCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, done, 0));
    trace_waited();
  }

  // A reduce-scatter as an all-to-all on the copy engines and a sum (enable_copy_engine), when
  // it can be: fp32 sum or average, pieces laid out as shard_counts lays them (piece r at r * S,
  // S the largest; the all-to-all reads size() * S elements from `in`, past its end by at most
  // size() - 1 when the last piece is short: the allocation's slack or the next bucket, read
  // and not used), all of them inside a window, and a receive buffer large enough.
  bool copy_engine_reduce_scatter(Tensor& in, Tensor& out, std::span<const int64_t> counts, ReduceOp op,
                                  cudaStream_t stream) {
#if MT_NCCL_COPY_ENGINE
    if (ce_comm_ == nullptr || !ce_on_ || in.dtype() != DType::kF32 || (op != ReduceOp::kSum && op != ReduceOp::kAvg)) {
      return false;
    }
    const int64_t piece = *std::max_element(counts.begin(), counts.end());
    for (int64_t r = 0; r < size_; ++r) {
      if (counts[static_cast<size_t>(r)] > 0 && piece_offset(counts, r) != r * piece) return false;
    }
    const int64_t read = size_ * piece;
    if (read > ring_elems_ || !in_window(in.data(), read * static_cast<int64_t>(sizeof(float)))) return false;
    MT_NCCL_CHECK(ncclAlltoAll(in.data(), ring_, static_cast<size_t>(piece), ncclFloat32, ce_comm_, stream));
    const float scale = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(size_) : 1.0f;
    backend::sum_pieces_f32(ring_, static_cast<float*>(out.data()), size_, piece, counts[static_cast<size_t>(rank_)],
                            scale, stream);
    return true;
#else
    (void)in, (void)out, (void)counts, (void)op, (void)stream;
    return false;
#endif
  }
  bool in_window(const void* p, int64_t bytes) const {
    const char* c = static_cast<const char*>(p);
    return std::any_of(windows_.begin(), windows_.end(),
                       [&](const Window& w) { return c >= w.base && c + bytes <= w.base + w.bytes; });
  }
  static constexpr size_t kScratchDoubles = 64;
  static constexpr size_t kMaxScratchDoubles = size_t{1} << 20;  // 8 MiB
  static bool all_equal(std::span<const int64_t> counts) {
    for (int64_t c : counts) {
      if (c != counts[0]) return false;
    }
    return true;
  }
  void require_device(const Tensor& t, const char* op) const {
    if (t.device() != Device::kCUDA) throw_error(op, " on group '", name_, "': NCCL moves device tensors only");
  }

  ncclComm_t comm_;
  backend::CudaBackend& backend_;
  cudaStream_t stream_;  // the compute stream (the backend's)
  // Started collectives: their stream (created on first use), the event that orders it after
  // the compute stream, the last one's completion, whether any is unwaited, reusable events.
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t async_done_ = nullptr;
  bool async_outstanding_ = false;
  std::vector<cudaEvent_t> free_events_;
  int64_t in_flight_ = 0;                          // started collectives not yet waited for
  std::optional<std::vector<TraceRecord>> trace_;  // set under MEGATRON_COMM_TRACE=1
  int64_t trace_batches_ = 0;
  cudaEvent_t trace_reached_ = nullptr;  // the compute stream at its first wait of the batch
  std::string name_;
  int64_t world_rank_;
  int64_t rank_ = 0, size_ = 1;
  double* scratch_ = nullptr;  // [scratch_doubles_] for host-value reductions
  size_t scratch_doubles_ = kScratchDoubles;
  // enable_copy_engine: the zero-CTA child, its registered windows (each keeping its memory
  // alive until it is deregistered), the all-to-all's receive buffer.
  struct Window {
    const char* base;
    int64_t bytes;
    ncclWindow_t window;
    std::shared_ptr<Storage> keep;
  };
  ncclComm_t ce_comm_ = nullptr;
  bool ce_on_ = true;  // use_copy_engine
  std::vector<Window> windows_;
  float* ring_ = nullptr;
  int64_t ring_elems_ = 0;
};

}  // namespace

bool built_with_nccl() { return true; }

bool copy_engine_supported() { return MT_NCCL_COPY_ENGINE != 0; }

bool use_symmetric_memory(bool on) {
#if MT_NCCL_COPY_ENGINE
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (on) {
    std::lock_guard<std::mutex> lock(symmetric_mutex);
    symmetric_state(device) = {};  // a fresh try
  }
  for (MemoryKind kind : {MemoryKind::kParams, MemoryKind::kGrads}) {
    backend::set_device_allocator(
        device, kind, on ? backend::DeviceAllocator{symmetric_alloc, symmetric_release} : backend::DeviceAllocator{});
  }
  return true;
#else
  (void)on;
  return false;
#endif
}

NcclUniqueIdBytes make_nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t rc = ncclGetUniqueId(&id);
  if (rc != ncclSuccess) throw_error("ncclGetUniqueId failed: ", ncclGetErrorString(rc));
  NcclUniqueIdBytes bytes{};
  static_assert(sizeof(id) == sizeof(bytes));
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

std::unique_ptr<Communicator> make_nccl_world(backend::Backend& backend, int64_t rank, int64_t size,
                                              const NcclUniqueIdBytes& bytes) {
  auto* cuda = dynamic_cast<backend::CudaBackend*>(&backend);
  if (cuda == nullptr) throw_error("NCCL needs the CUDA backend (--device cuda)");
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = ncclCommInitRank(&comm, static_cast<int>(size), id, static_cast<int>(rank));
  if (rc != ncclSuccess) {
    throw_error("[rank ", rank, "] ncclCommInitRank(world of ", size, ") failed: ", ncclGetErrorString(rc));
  }
  return std::make_unique<NcclCommunicator>(comm, *cuda, "world", rank);
}

}  // namespace megatron::comm
