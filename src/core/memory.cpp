#include "core/memory.h"

#include "core/error.h"

namespace megatron {

std::string_view memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParams:
      return "parameters";
    case MemoryKind::kMainParams:
      return "main parameters";
    case MemoryKind::kGrads:
      return "gradients";
    case MemoryKind::kOptimizer:
      return "optimizer state";
    case MemoryKind::kActivations:
      return "activations";
    case MemoryKind::kWorkspace:
      return "workspace";
    case MemoryKind::kOther:
      return "other";
    case MemoryKind::kCount:
      break;
  }
  return "?";
}

namespace {
void raise_to(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}
}  // namespace

void MemoryTracker::on_alloc(MemoryKind kind, int64_t bytes) {
  const int k = static_cast<int>(kind);
  raise_to(peak_[k], current_[k].fetch_add(bytes, std::memory_order_relaxed) + bytes);
  raise_to(peak_total_, current_total_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
  live_allocations_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryTracker::on_free(MemoryKind kind, int64_t bytes) {
  const int k = static_cast<int>(kind);
  current_[k].fetch_sub(bytes, std::memory_order_relaxed);
  current_total_.fetch_sub(bytes, std::memory_order_relaxed);
  live_allocations_.fetch_sub(1, std::memory_order_relaxed);
}

MemorySnapshot MemoryTracker::snapshot() const {
  MemorySnapshot s;
  for (int k = 0; k < kNumMemoryKinds; ++k) {
    s.current[k] = current_[k].load(std::memory_order_relaxed);
    s.peak[k] = peak_[k].load(std::memory_order_relaxed);
  }
  s.current_total = current_total_.load(std::memory_order_relaxed);
  s.peak_total = peak_total_.load(std::memory_order_relaxed);
  s.live_allocations = live_allocations_.load(std::memory_order_relaxed);
  return s;
}

void MemoryTracker::reset_peak() {
  for (int k = 0; k < kNumMemoryKinds; ++k) peak_[k].store(current_[k].load());
  peak_total_.store(current_total_.load());
}

MemoryTracker& memory_tracker(Device device) {
  static MemoryTracker cpu;
  static MemoryTracker cuda;
  return device == Device::kCPU ? cpu : cuda;
}

}  // namespace megatron
