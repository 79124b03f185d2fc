// Built without CUDA: NCCL is unavailable; the calls say so (MLX's no_* stubs).
#include "comm/nccl_communicator.h"
#include "core/error.h"

namespace megatron::comm {

bool built_with_nccl() { return false; }

NcclUniqueIdBytes make_nccl_unique_id() { throw_error("NCCL: this build has no CUDA (rebuild with MT_BUILD_CUDA=ON)"); }

std::unique_ptr<Communicator> make_nccl_world(backend::Backend&, int64_t, int64_t, const NcclUniqueIdBytes&) {
  throw_error("NCCL: this build has no CUDA (rebuild with MT_BUILD_CUDA=ON)");
}

bool use_symmetric_memory(bool) { return false; }
bool copy_engine_supported() { return false; }

}  // namespace megatron::comm
