// CUDA-event op timer (see cuda_op_timer.h): events recorded on the CudaBackend's stream
// around each op, elapsed times harvested lazily, events recycled through a pool.
#include "backend/cuda/cuda_op_timer.h"

#include <cuda_runtime.h>

#include <deque>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace megatron::backend {

namespace {

class CudaEventOpTimer final : public OpTimer {
 public:
  CudaEventOpTimer(cudaStream_t stream, int device) : stream_(stream), device_(device) {}

  ~CudaEventOpTimer() override {
    // Destroying an event whose work is still queued is allowed (released on completion).
    // No throwing from a destructor: errors are ignored here.
    for (const Interval& iv : pending_) {
      cudaEventDestroy(iv.start);
      cudaEventDestroy(iv.stop);
    }
    if (open_ != nullptr) cudaEventDestroy(open_);
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }

  void begin() override {
    MT_CHECK(open_ == nullptr) << "OpTimer::begin() while an interval is open (nested ops?)";
    // Harvest finished intervals now and then so that the pool stays small without a sync.
    if (pending_.size() >= kHarvestAfter) harvest(/*wait=*/false);
    open_ = acquire();
    MT_CUDA_CHECK(cudaEventRecord(open_, stream_));
  }

  void end(int key) override {
    MT_CHECK(open_ != nullptr) << "OpTimer::end() without begin()";
    MT_CHECK(key >= 0) << "OpTimer::end(): negative key " << key;
    cudaEvent_t stop = acquire();
    MT_CUDA_CHECK(cudaEventRecord(stop, stream_));
    pending_.push_back({open_, stop, key});
    open_ = nullptr;
  }

  std::vector<OpTime> report() override {
    harvest(/*wait=*/true);
    return totals_;
  }

  void reset() override {
    harvest(/*wait=*/true);
    totals_.clear();
  }

  const char* clock_name() const override { return "CUDA events on the backend stream"; }

 private:
  struct Interval {
    cudaEvent_t start;
    cudaEvent_t stop;
    int key;
  };
  static constexpr size_t kHarvestAfter = 1024;

  cudaEvent_t acquire() {
    if (!pool_.empty()) {
      cudaEvent_t e = pool_.back();
      pool_.pop_back();
      return e;
    }
    MT_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t e = nullptr;
    MT_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled (the default flags)
    return e;
  }

  // Moves intervals, oldest first, into totals_: all of them (waiting) or those whose stop
  // event has completed (stops at the first one still queued; events on one stream complete
  // in order).
  void harvest(bool wait) {
    while (!pending_.empty()) {
      Interval iv = pending_.front();
      if (wait) {
        MT_CUDA_CHECK(cudaEventSynchronize(iv.stop));
      } else {
        const cudaError_t st = cudaEventQuery(iv.stop);
        if (st == cudaErrorNotReady) break;
        MT_CUDA_CHECK(st);
      }
      float ms = 0.0f;
      MT_CUDA_CHECK(cudaEventElapsedTime(&ms, iv.start, iv.stop));
      if (static_cast<size_t>(iv.key) >= totals_.size()) totals_.resize(static_cast<size_t>(iv.key) + 1);
      OpTime& t = totals_[static_cast<size_t>(iv.key)];
      t.calls += 1;
      t.total_ms += static_cast<double>(ms);
      pending_.pop_front();
      pool_.push_back(iv.start);
      pool_.push_back(iv.stop);
    }
  }

  cudaStream_t stream_;
  int device_;
  cudaEvent_t open_ = nullptr;
  std::deque<Interval> pending_;
  std::vector<cudaEvent_t> pool_;
  std::vector<OpTime> totals_;
};

}  // namespace

std::unique_ptr<OpTimer> make_op_timer(Backend& backend) {
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend)) {
    return std::make_unique<CudaEventOpTimer>(cuda->stream(), cuda->device_index());
  }
  return make_chrono_op_timer();
}

}  // namespace megatron::backend
