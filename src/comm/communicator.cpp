#include "comm/communicator.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace megatron::comm {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "?";
}

std::unique_ptr<PendingCollective> Communicator::start_all_reduce(Tensor& x, ReduceOp op) {
  all_reduce(x, op);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_reduce_scatter(Tensor& in, Tensor& out,
                                                                      std::span<const int64_t> counts, ReduceOp op) {
  reduce_scatter(in, out, counts, op);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_all_gather(const Tensor& in, Tensor& out,
                                                                  std::span<const int64_t> counts) {
  all_gather(in, out, counts);
  return std::make_unique<FinishedCollective>();
}

std::unique_ptr<PendingCollective> Communicator::start_send_recv(std::span<const PointToPoint> ops) {
  send_recv(ops);
  return std::make_unique<FinishedCollective>();
}

void reduce_scatter(Communicator& comm, Tensor& in, Tensor& out, ReduceOp op) {
  const std::vector<int64_t> counts(static_cast<size_t>(comm.size()), out.numel());
  comm.reduce_scatter(in, out, counts, op);
}

void all_gather(Communicator& comm, const Tensor& in, Tensor& out) {
  const std::vector<int64_t> counts(static_cast<size_t>(comm.size()), in.numel());
  comm.all_gather(in, out, counts);
}

double all_reduce_scalar(Communicator& comm, double value, ReduceOp op) {
  comm.all_reduce_host(std::span<double>(&value, 1), op);
  return value;
}

std::vector<double> all_gather_host(Communicator& comm, std::span<const double> mine) {
  const size_t ranks = static_cast<size_t>(comm.size()), n = mine.size();
  std::vector<double> table(ranks * n, 0.0);
  std::copy(mine.begin(), mine.end(),
            table.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(comm.rank()) * n));
  if (ranks > 1) comm.all_reduce_host(std::span<double>(table), ReduceOp::kSum);
  return table;
}

std::vector<double> broadcast_host(Communicator& comm, std::span<const double> values, int64_t root) {
  std::vector<double> out(values.size(), 0.0);
  if (comm.rank() == root) out.assign(values.begin(), values.end());
  if (comm.size() > 1) comm.all_reduce_host(std::span<double>(out), ReduceOp::kSum);
  return out;
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine, size_t max_chars) {
  std::vector<double> codes(max_chars, 0.0);
  for (size_t i = 0; i < std::min(mine.size(), max_chars); ++i) codes[i] = static_cast<unsigned char>(mine[i]);
  const std::vector<double> chars = all_gather_host(comm, codes);
  const size_t ranks = static_cast<size_t>(comm.size());
  std::vector<std::string> out(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < max_chars && chars[r * max_chars + i] != 0.0; ++i) {
      out[r].push_back(static_cast<char>(chars[r * max_chars + i]));
    }
  }
  return out;
}

int64_t piece_offset(std::span<const int64_t> counts, int64_t r) {
  int64_t off = 0;
  for (int64_t i = 0; i < r; ++i) off += counts[static_cast<size_t>(i)];
  return off;
}

void check_pieces(const char* op, const Communicator& comm, int64_t whole, int64_t part,
                  std::span<const int64_t> counts) {
  MT_CHECK(static_cast<int64_t>(counts.size()) == comm.size())
      << op << " on group '" << comm.name() << "': " << counts.size() << " counts for " << comm.size() << " ranks";
  int64_t total = 0;
  for (int64_t c : counts) {
    MT_CHECK(c >= 0) << op << ": negative count " << c;
    total += c;
  }
  MT_CHECK(total == whole) << op << " on group '" << comm.name() << "': counts sum to " << total
                           << ", the whole buffer has " << whole;
  MT_CHECK(counts[static_cast<size_t>(comm.rank())] == part)
      << op << " on group '" << comm.name() << "': rank " << comm.rank() << " piece has " << part
      << " elements, its count is " << counts[static_cast<size_t>(comm.rank())];
}

}  // namespace megatron::comm
