// HostStagedCommunicator over MPI under mpirun -np 3 (oversubscribed): 16-bit reductions
// (MPI's user-defined bf16/fp16 ops, mpi_communicator.h) and every operation on tensors of the
// CPU backend and, where a GPU is visible, of the CUDA backend (device tensors; the three ranks
// share GPU 0, as --distributed-backend mpi allows). Expectations are exact: every value is
// 1 + k 2^-7 (k < 128), representable in each dtype, so a sum of three is exact in fp32 in any
// order (the fp32 result), and a 16-bit sum is the three added two at a time, each addition
// rounded once to the dtype (round_to), in one of the three orders Open MPI's algorithm may
// take. In bf16 every three-rank sum is an odd multiple of 2^-7 in [2, 4), where bf16's spacing
// is 2^-6: each is a tie, so the test also pins round-to-nearest-even (fp16, spacing 2^-9 there,
// never rounds).
#include "comm/host_staged_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/device.h"
#include "comm/mpi_communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "support/mpi.h"

namespace megatron::comm {
namespace {

constexpr int kRanks = 3;
const std::vector<int64_t> kSizes = {0, 1, 7, 1001};

// The backends whose tensors are staged: the CPU's always, the GPU's where there is one.
std::vector<std::unique_ptr<backend::Backend>> backends() {
  std::vector<std::unique_ptr<backend::Backend>> out;
  out.push_back(backend::make_cpu_backend());
  if (backend::cuda_device_count() > 0) out.push_back(backend::make_cuda_backend(0));
  return out;
}

// Element i of rank r's input, already representable in `dtype`: 1 + ((r + 1) (i % 13) + r) 2^-7,
// times -1 for odd i. The three ranks' sum is 3 + (6 (i % 13) + 3) 2^-7, an odd multiple of
// 2^-7 that bf16 (spacing 2^-6 above 2) must round: rounding is exercised.
float value(DType dtype, int64_t r, int64_t i) {
  const float v = 1.0f + static_cast<float>((r + 1) * (i % 13) + r) * 0.0078125f;
  return round_to(dtype, i % 2 == 1 ? -v : v);
}

Tensor host_tensor(const std::vector<float>& v, DType dtype) {
  Tensor f = Tensor::cpu({static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) f.data_as<float>()[i] = v[i];
  if (dtype == DType::kF32) return f;
  auto cpu = backend::make_cpu_backend();
  Tensor t = Tensor::cpu({static_cast<int64_t>(v.size())}, dtype);
  cpu->copy(f, t);
  return t;
}

// `v` as a tensor of `be` in `dtype`.
Tensor make(backend::Backend& be, const std::vector<float>& v, DType dtype) {
  Tensor h = host_tensor(v, dtype);
  if (be.device() == Device::kCPU) return h;
  Tensor d = be.empty({h.numel()}, dtype, MemoryKind::kOther);
  be.copy(h, d);
  return d;
}

// The values of a tensor of `be`, widened to float.
std::vector<float> values(backend::Backend& be, const Tensor& t) {
  Tensor f = Tensor::cpu({t.numel()});
  be.copy(t, f);
  return std::vector<float>(f.data_as<float>(), f.data_as<float>() + t.numel());
}

std::vector<float> inputs(DType dtype, int64_t rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(dtype, rank, i);
  return v;
}

// Whether `got` is the reduction over the ranks of element i: max and min exact; an fp32 sum the
// exact one; a 16-bit sum (a + b) + c with both additions rounded, for some order of the ranks.
bool reduced(DType dtype, ReduceOp op, int64_t i, float got) {
  static_assert(kRanks == 3);
  const float a = value(dtype, 0, i), b = value(dtype, 1, i), c = value(dtype, 2, i);
  if (op == ReduceOp::kMax) return got == std::max({a, b, c});
  if (op == ReduceOp::kMin) return got == std::min({a, b, c});
  if (dtype == DType::kF32) return got == a + b + c;
  for (const auto& [x, y, z] : {std::tuple{a, b, c}, std::tuple{a, c, b}, std::tuple{b, c, a}}) {
    if (got == round_to(dtype, round_to(dtype, x + y) + z)) return true;
  }
  return false;
}

const char* device_name(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(HostStagedCommunicator, AllReduceRoundsEachAddition) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  for (auto& be : backends()) {
    HostStagedCommunicator world(mpi.world(), *be);
    ASSERT_EQ(world.size(), kRanks);
    for (DType dtype : kFloatTypes) {
      for (int64_t n : kSizes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          Tensor x = make(*be, inputs(dtype, world.rank(), n), dtype);
          world.all_reduce(x, op);
          const std::vector<float> got = values(*be, x);
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(reduced(dtype, op, i, got[static_cast<size_t>(i)]))
                << "got " << got[static_cast<size_t>(i)] << " " << device_name(be->device()) << " " << dtype_name(dtype)
                << " n " << n << " " << to_string(op) << " i " << i;
          }
        }
      }
    }
  }
}

TEST(HostStagedCommunicator, ReduceScatterAndAllGatherInAndOutOfPlace) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  const std::vector<int64_t> counts = {5, 0, 9};
  const int64_t total = 14;
  for (auto& be : backends()) {
    HostStagedCommunicator world(mpi.world(), *be);
    const int64_t me = world.rank(), mine = counts[static_cast<size_t>(me)];
    const int64_t off = piece_offset(counts, me);
    for (DType dtype : kFloatTypes) {
      for (bool in_place : {false, true}) {
        const std::string what = std::string(device_name(be->device())) + " " + std::string(dtype_name(dtype)) +
                                 (in_place ? " in place" : "");
        const std::vector<float> own = inputs(dtype, me, total);
        Tensor in = make(*be, own, dtype);
        Tensor out = in_place ? in.flat_view(off, {mine}) : make(*be, std::vector<float>(mine, 0.0f), dtype);
        world.reduce_scatter(in, out, counts, ReduceOp::kSum);
        const std::vector<float> got = values(*be, out);
        for (int64_t i = 0; i < mine; ++i)
          ASSERT_TRUE(reduced(dtype, ReduceOp::kSum, off + i, got[static_cast<size_t>(i)]))
              << what << " got " << got[static_cast<size_t>(i)];

        // Gather every rank's piece of its own inputs back into [total].
        Tensor whole = make(*be, std::vector<float>(total, 0.0f), dtype);
        Tensor piece = make(*be, std::vector<float>(own.begin() + off, own.begin() + off + mine), dtype);
        if (in_place) {
          Tensor slot = whole.flat_view(off, {mine});
          be->copy(piece, slot);
          world.all_gather(slot, whole, counts);
        } else {
          world.all_gather(piece, whole, counts);
        }
        const std::vector<float> gathered = values(*be, whole);
        for (int64_t r = 0, at = 0; r < kRanks; ++r) {
          for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++at) {
            ASSERT_EQ(gathered[static_cast<size_t>(at)], value(dtype, r, at)) << what << " rank " << r;
          }
        }
      }
    }
  }
}

TEST(HostStagedCommunicator, BroadcastSendRecvAndSplitGroups) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  for (auto& be : backends()) {
    HostStagedCommunicator world(mpi.world(), *be);
    const int64_t me = world.rank();
    const DType dtype = DType::kBF16;
    Tensor x = make(*be, inputs(dtype, me, 7), dtype);
    world.broadcast(x, 2);
    EXPECT_EQ(values(*be, x), inputs(dtype, 2, 7));

    // A ring: each rank sends its values to the next and receives the previous rank's.
    Tensor send = make(*be, inputs(dtype, me, 9), dtype);
    Tensor recv = make(*be, std::vector<float>(9, 0.0f), dtype);
    const std::vector<PointToPoint> ops = {{true, send, (me + 1) % kRanks}, {false, recv, (me + kRanks - 1) % kRanks}};
    world.send_recv(ops);
    EXPECT_EQ(values(*be, recv), inputs(dtype, (me + kRanks - 1) % kRanks, 9));

    // Ranks 0 and 2 form a group whose reductions are staged too; rank 1 joins none.
    std::unique_ptr<Communicator> pair = world.split(me == 1 ? -1 : 0, me, "pair");
    ASSERT_EQ(pair == nullptr, me == 1);
    if (pair) {
      Tensor y = make(*be, inputs(dtype, me, 13), dtype);
      pair->all_reduce(y, ReduceOp::kSum);
      const std::vector<float> got = values(*be, y);
      for (int64_t i = 0; i < 13; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(i)], round_to(dtype, value(dtype, 0, i) + value(dtype, 2, i))) << i;
      }
    }
    world.barrier();
  }
}

// start_send_recv does not wait for its peer: rank 0 starts receiving from rank 1 before a
// barrier that rank 1 passes before it sends (a blocking exchange would deadlock there, and the
// test would hit ctest's timeout). Each message mixes a device tensor (on a GPU), a host one
// and an empty one; the device receive holds its values only after wait().
TEST(HostStagedCommunicator, StartedSendRecvOverlapsAndCopiesReceivesInWait) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  for (auto& be : backends()) {
    HostStagedCommunicator world(mpi.world(), *be);
    const int64_t me = world.rank();
    const DType dtype = DType::kBF16;
    Tensor on_device = make(*be, std::vector<float>(11, 0.0f), dtype);
    Tensor on_host = host_tensor(std::vector<float>(5, 0.0f), DType::kF32);
    Tensor empty = make(*be, {}, dtype);
    if (me == 0) {
      const std::vector<PointToPoint> ops = {{false, on_device, 1}, {false, on_host, 1}, {false, empty, 1}};
      std::unique_ptr<PendingCollective> pending = world.start_send_recv(ops);
      world.barrier();
      pending->wait();
      EXPECT_EQ(values(*be, on_device), inputs(dtype, 1, 11)) << device_name(be->device());
      EXPECT_EQ(std::vector<float>(on_host.data_as<float>(), on_host.data_as<float>() + 5), inputs(DType::kF32, 1, 5));
    } else if (me == 1) {
      world.barrier();
      Tensor send_device = make(*be, inputs(dtype, 1, 11), dtype);
      Tensor send_host = host_tensor(inputs(DType::kF32, 1, 5), DType::kF32);
      const std::vector<PointToPoint> ops = {{true, send_device, 0}, {true, send_host, 0}, {true, empty, 0}};
      world.send_recv(ops);
    } else {
      world.barrier();
    }
    world.barrier();
  }
}

TEST(HostStagedCommunicator, IntegerReductionIsAnErrorNamingTheGroup) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto cpu = backend::make_cpu_backend();
  HostStagedCommunicator world(mpi.world(), *cpu);
  Tensor ids = Tensor::cpu({4}, DType::kI64);
  try {
    world.all_reduce(ids, ReduceOp::kSum);
    FAIL() << "an int64 all-reduce must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "all_reduce on group 'world' (rank " + std::to_string(world.rank()) +
                                         "): reductions take float tensors, got int64");
  }
}

}  // namespace
}  // namespace megatron::comm
