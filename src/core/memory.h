// Byte accounting of every device allocation, by what it holds. The --dry-run memory plan
// (train/) is tested against these counters, so every tensor the engine allocates goes
// through Storage and names its MemoryKind.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace megatron {

enum class Device : uint8_t { kCPU, kCUDA };

enum class MemoryKind : uint8_t {
  kParams,       // model weights (in the model dtype)
  kMainParams,   // fp32 master copies kept by the optimizer under --fp16/--bf16
  kGrads,        // fp32 main gradients
  kOptimizer,    // Adam moments
  kActivations,  // saved for backward, per micro-batch
  kWorkspace,    // scratch reused across layers (gradients of activations, logits, ...)
  kOther,        // inputs, host staging, tests
  kCount
};
constexpr int kNumMemoryKinds = static_cast<int>(MemoryKind::kCount);
std::string_view memory_kind_name(MemoryKind kind);

struct MemorySnapshot {
  std::array<int64_t, kNumMemoryKinds> current{};  // bytes live now, per kind
  std::array<int64_t, kNumMemoryKinds> peak{};     // highest `current` per kind since reset
  int64_t current_total = 0;
  int64_t peak_total = 0;        // highest sum over kinds at any moment since reset
  int64_t live_allocations = 0;  // allocations not yet freed (torch's allocation.all.current)
};

// One per device kind per process (thread-safe). Counts requested bytes, not allocator
// rounding, so the plan can be exact.
class MemoryTracker {
 public:
  void on_alloc(MemoryKind kind, int64_t bytes);
  void on_free(MemoryKind kind, int64_t bytes);
  MemorySnapshot snapshot() const;
  void reset_peak();  // peaks := current

 private:
  std::array<std::atomic<int64_t>, kNumMemoryKinds> current_{};
  std::array<std::atomic<int64_t>, kNumMemoryKinds> peak_{};
  std::atomic<int64_t> current_total_{0};
  std::atomic<int64_t> peak_total_{0};
  std::atomic<int64_t> live_allocations_{0};
};

MemoryTracker& memory_tracker(Device device);

}  // namespace megatron
