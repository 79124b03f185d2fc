#include "obs/weight_hash.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace megatron::obs {

uint64_t weight_hash64(std::span<const unsigned char> bytes) {
  uint64_t h = 0x243F6A8885A308D3ull ^ static_cast<uint64_t>(bytes.size());
  auto fold = [&h](uint64_t w) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  };
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    fold(w);
  }
  if (i < bytes.size()) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, bytes.size() - i);
    fold(w);
  }
  return h;
}

WeightHashCheck compare_weights_across_dp_replicas(const model::ParameterSet& params, backend::Backend& backend,
                                                   comm::Communicator& dp, comm::Communicator& world,
                                                   int64_t iteration) {
  const std::vector<model::Parameter>& ps = params.params();
  const size_t n = ps.size();
  // Each hash as two 32-bit halves (exact in doubles).
  std::vector<double> mine(2 * n);
  for (size_t i = 0; i < n; ++i) {
    Tensor host = Tensor::cpu(ps[i].shape, ps[i].value.dtype());
    backend.copy(ps[i].value, host);
    const uint64_t h = weight_hash64(std::span<const unsigned char>(static_cast<const unsigned char*>(host.data()),
                                                                    static_cast<size_t>(host.nbytes())));
    mine[2 * i] = static_cast<double>(h >> 32);
    mine[2 * i + 1] = static_cast<double>(h & 0xffffffffu);
  }
  const std::vector<double> dp_rank0 = comm::broadcast_host(dp, mine);
  std::vector<std::string> differing;
  for (size_t i = 0; i < n; ++i) {
    if (mine[2 * i] != dp_rank0[2 * i] || mine[2 * i + 1] != dp_rank0[2 * i + 1]) differing.push_back(ps[i].name);
  }
  // Over the world: how many (rank, parameter) pairs differ, and the first rank with any.
  double counts[2] = {static_cast<double>(differing.size()), differing.empty() ? 0.0 : 1.0};
  world.all_reduce_host(std::span<double>(counts), comm::ReduceOp::kSum);
  const double first = comm::all_reduce_scalar(
      world, differing.empty() ? static_cast<double>(world.size()) : static_cast<double>(world.rank()),
      comm::ReduceOp::kMin);
  WeightHashCheck out;
  out.mismatches = static_cast<int64_t>(counts[0]);
  if (out.mismatches == 0) return out;
  if (!differing.empty()) {
    std::string names;
    for (size_t i = 0; i < differing.size() && i < 5; ++i) names += (i > 0 ? ", " : "") + differing[i];
    if (differing.size() > 5) names += str_cat(" and ", differing.size() - 5, " more");
    out.message = str_cat("[--check-weight-hash-across-dp-replicas-interval] rank ", world.rank(),
                          ": weights differ from data-parallel rank 0 of this replica group at ", "iteration ",
                          iteration, ": ", names, " (", differing.size(), " of ", n, " parameters)");
  }
  if (world.rank() == 0) {
    const std::string summary = str_cat(
        "weights differ across data-parallel replicas at iteration ", iteration, ": ", out.mismatches,
        " parameter(s) on ", static_cast<int64_t>(counts[1]), " rank(s), first rank ", static_cast<int64_t>(first),
        " (--check-weight-hash-across-dp-replicas-interval). Replicas that apply the same updates have "
        "diverged: a hardware fault (a flipped bit in one GPU's memory) or a nondeterministic bug");
    out.message = out.message.empty() ? summary : str_cat(summary, "; ", out.message);
  }
  return out;
}

}  // namespace megatron::obs
