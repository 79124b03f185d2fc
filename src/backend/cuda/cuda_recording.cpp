// Recorded work on the CUDA backend: stream capture into a CUDA graph, replayed by one graph
// launch. Why: a training step queues ~600 kernels back to back; launched one by one each costs the
// device a gap of ~1.4 us (bench/results/2026-11-23.md, "LayerNorm forward for h = 2560, autotuning
// by default"), a graph launch far less, and the host does not issue them one by one.
//
// The capture is thread-local (cudaStreamCaptureModeThreadLocal): an op that would be unsafe
// to record from this thread (cudaMalloc, a host wait, a blocking copy) fails instead of
// silently running outside the graph, and end_recording() then reports null.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"

namespace megatron::backend {

namespace {

class CudaGraphRecording final : public Recording {
 public:
  CudaGraphRecording(cudaGraph_t graph, cudaGraphExec_t exec) : graph_(graph), exec_(exec) {}
  ~CudaGraphRecording() override {
    // Destroying an executable graph does not wait for its launches; the work it queued keeps
    // its own references. Errors here cannot be reported (destructor).
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  CudaGraphRecording(const CudaGraphRecording&) = delete;
  CudaGraphRecording& operator=(const CudaGraphRecording&) = delete;
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

void CudaBackend::begin_recording() {
  MT_CHECK(record_) << "begin_recording on a CUDA backend with MEGATRON_CUDA_GRAPHS=0";
  MT_CUDA_CHECK(cudaSetDevice(device_));
  MT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

std::unique_ptr<Recording> CudaBackend::end_recording() {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  // A failed (invalidated) capture leaves its error behind for the next launch check.
  (void)cudaGetLastError();
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  if (made != cudaSuccess) {
    (void)cudaGetLastError();
    cudaGraphDestroy(graph);
    return nullptr;
  }
  return std::make_unique<CudaGraphRecording>(graph, exec);
}

void CudaBackend::replay(const Recording& recording) {
  const auto* graph = dynamic_cast<const CudaGraphRecording*>(&recording);
  MT_CHECK(graph != nullptr) << "replay of a recording made by another backend";
  MT_CUDA_CHECK(cudaGraphLaunch(graph->exec(), stream_));
}

}  // namespace megatron::backend
