// MpiCommunicator under mpirun -np 3 (oversubscribed): every operation against values
// computed by hand, for several sizes including 0 and odd ones, uneven reduce-scatter /
// all-gather pieces (one of them empty), in place and out of place. Values are small
// integers, so fp32 sums are exact and the expectations are exact. bf16/fp16 reductions (a
// user-defined op) under -np 2, where each element is one rounded addition.
#include "comm/mpi_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "support/mpi.h"

namespace megatron::comm {
namespace {

constexpr int kRanks = 3;
const std::vector<int64_t> kSizes = {0, 1, 7, 1001};

Tensor filled(int64_t n, float (*f)(int64_t rank, int64_t i), int64_t rank) {
  Tensor t = Tensor::cpu({n});
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = f(rank, i);
  return t;
}

float value(int64_t rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 17) - 3 * rank); }

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  ASSERT_EQ(world->size(), kRanks);
  EXPECT_EQ(world->name(), "world");
  for (int64_t n : kSizes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      Tensor x = filled(n, value, world->rank());
      world->all_reduce(x, op);
      for (int64_t i = 0; i < n; ++i) {
        float expect = op == ReduceOp::kSum ? 0.0f : value(0, i);
        for (int64_t r = 0; r < kRanks; ++r) {
          const float v = value(r, i);
          expect = op == ReduceOp::kSum ? expect + v : op == ReduceOp::kMax ? std::max(expect, v) : std::min(expect, v);
        }
        ASSERT_EQ(x.data_as<float>()[i], expect) << "n " << n << " op " << to_string(op) << " i " << i;
      }
    }
  }
  double s[2] = {0.5 * static_cast<double>(world->rank()), 1.0};
  world->all_reduce_host(s, ReduceOp::kSum);
  EXPECT_EQ(s[0], 1.5);
  EXPECT_EQ(s[1], 3.0);
  EXPECT_EQ(all_reduce_scalar(*world, static_cast<double>(world->rank()), ReduceOp::kMax), 2.0);
}

// kAvg: each rank's values times 1/3 in fp32, then summed (MPI's order: within fp32 rounding
// of the exact mean); host doubles the same.
TEST(MpiCommunicator, AverageIsThePremultipliedSum) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const float third = 1.0f / 3.0f;
  for (int64_t n : kSizes) {
    Tensor x = filled(n, value, world->rank());
    world->all_reduce(x, ReduceOp::kAvg);
    for (int64_t i = 0; i < n; ++i) {
      const float expect = value(0, i) * third + value(1, i) * third + value(2, i) * third;
      ASSERT_NEAR(x.data_as<float>()[i], expect, 2e-6f * (1.0f + std::fabs(expect))) << "n " << n << " i " << i;
    }
  }
  EXPECT_NEAR(all_reduce_scalar(*world, static_cast<double>(world->rank()), ReduceOp::kAvg), 1.0, 1e-15);
  const std::vector<int64_t> counts = {5, 0, 2};
  const int64_t me = world->rank(), off = piece_offset(counts, me);
  for (bool in_place : {false, true}) {
    Tensor in = filled(7, value, me);
    Tensor out = in_place ? in.flat_view(off, {counts[static_cast<size_t>(me)]})
                          : Tensor::cpu({counts[static_cast<size_t>(me)]});
    world->reduce_scatter(in, out, counts, ReduceOp::kAvg);
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float expect = value(0, off + i) * third + value(1, off + i) * third + value(2, off + i) * third;
      ASSERT_NEAR(out.data_as<float>()[i], expect, 2e-6f * (1.0f + std::fabs(expect))) << "in place " << in_place;
    }
    if (!in_place) {
      for (int64_t i = 0; i < 7; ++i) ASSERT_EQ(in.data_as<float>()[i], value(me, i)) << "out of place: in kept";
    }
  }
}

TEST(MpiCommunicator, ReduceScatterEvenUnevenInPlace) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  for (const std::vector<int64_t>& counts : {std::vector<int64_t>{0, 0, 0}, std::vector<int64_t>{1, 1, 1},
                                             std::vector<int64_t>{5, 0, 2}, std::vector<int64_t>{334, 334, 333}}) {
    const int64_t total = counts[0] + counts[1] + counts[2];
    const int64_t off = piece_offset(counts, me);
    for (bool in_place : {false, true}) {
      Tensor in = filled(total, value, me);
      Tensor out = in_place ? in.flat_view(off, {counts[static_cast<size_t>(me)]})
                            : Tensor::cpu({counts[static_cast<size_t>(me)]});
      world->reduce_scatter(in, out, counts, ReduceOp::kSum);
      for (int64_t i = 0; i < out.numel(); ++i) {
        float expect = 0;
        for (int64_t r = 0; r < kRanks; ++r) expect += value(r, off + i);
        ASSERT_EQ(out.data_as<float>()[i], expect) << "piece " << me << " i " << i << " in place " << in_place;
      }
    }
  }
  // The equal-piece helper.
  Tensor in = filled(3 * 4, value, me), out = Tensor::cpu({4});
  reduce_scatter(*world, in, out, ReduceOp::kMax);
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t k = me * 4 + i;
    EXPECT_EQ(out.data_as<float>()[i], std::max({value(0, k), value(1, k), value(2, k)}));
  }
}

TEST(MpiCommunicator, AllGatherEvenUnevenInPlaceAnyDtype) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  for (const std::vector<int64_t>& counts : {std::vector<int64_t>{0, 0, 0}, std::vector<int64_t>{2, 2, 2},
                                             std::vector<int64_t>{3, 0, 1}, std::vector<int64_t>{500, 1, 499}}) {
    const int64_t total = counts[0] + counts[1] + counts[2];
    for (bool in_place : {false, true}) {
      Tensor out = Tensor::cpu({total});
      const int64_t off = piece_offset(counts, me);
      Tensor in = in_place ? out.flat_view(off, {counts[static_cast<size_t>(me)]})
                           : Tensor::cpu({counts[static_cast<size_t>(me)]});
      for (int64_t i = 0; i < in.numel(); ++i) in.data_as<float>()[i] = static_cast<float>(1000 * me + i);
      world->all_gather(in, out, counts);
      int64_t k = 0;
      for (int64_t r = 0; r < kRanks; ++r) {
        for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++k) {
          ASSERT_EQ(out.data_as<float>()[k], static_cast<float>(1000 * r + i)) << "rank " << r << " i " << i;
        }
      }
    }
  }
  // bf16 bits travel unchanged (the distributed optimizer gathers bf16 parameters).
  Tensor in = Tensor::cpu({2}, DType::kBF16), out = Tensor::cpu({6}, DType::kBF16);
  in.data_as<uint16_t>()[0] = float_to_bf16(1.5f * static_cast<float>(me + 1));
  in.data_as<uint16_t>()[1] = float_to_bf16(-0.25f);
  all_gather(*world, in, out);
  for (int64_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(bf16_to_float(out.data_as<uint16_t>()[2 * r]), 1.5f * static_cast<float>(r + 1));
    EXPECT_EQ(bf16_to_float(out.data_as<uint16_t>()[2 * r + 1]), -0.25f);
  }
}

TEST(MpiCommunicator, BroadcastSendRecvBarrier) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  for (int64_t n : kSizes) {
    Tensor x = Tensor::cpu({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) x.data_as<int32_t>()[i] = static_cast<int32_t>(me == 1 ? 7 * i + 1 : -1);
    world->broadcast(x, /*root=*/1);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x.data_as<int32_t>()[i], 7 * i + 1);
  }
  // A ring: each rank sends to the next, receives from the previous (even ranks send first).
  const int64_t next = (me + 1) % kRanks, prev = (me + kRanks - 1) % kRanks;
  Tensor out = filled(9, value, me), in = Tensor::cpu({9});
  if (me % 2 == 0) {
    world->send(out, next);
    world->recv(in, prev);
  } else {
    world->recv(in, prev);
    world->send(out, next);
  }
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(in.data_as<float>()[i], value(prev, i));
  world->barrier();
}

// send_recv: every rank sends to both neighbours and receives from both in one call, all
// ranks in the same order (blocking sends would deadlock here), two messages to the same peer
// matching in posting order; sizes 0 to 1001, fp32 and int32.
TEST(MpiCommunicator, SendRecvPostsEverythingAtOnce) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank(), next = (me + 1) % kRanks, prev = (me + kRanks - 1) % kRanks;
  for (int64_t n : kSizes) {
    Tensor to_next = filled(n, value, me), to_prev = filled(n, value, me + 10);
    Tensor second = Tensor::cpu({n}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) second.data_as<int32_t>()[i] = static_cast<int32_t>(100 * me + i);
    Tensor from_prev = Tensor::cpu({n}), from_next = Tensor::cpu({n}), second_in = Tensor::cpu({n}, DType::kI32);
    const std::vector<PointToPoint> ops = {{true, to_next, next},    {true, to_prev, prev}, {false, from_prev, prev},
                                           {false, from_next, next}, {true, second, next},  {false, second_in, prev}};
    world->send_recv(ops);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(from_prev.data_as<float>()[i], value(prev, i)) << "n " << n << " i " << i;
      ASSERT_EQ(from_next.data_as<float>()[i], value(next + 10, i)) << "n " << n << " i " << i;
      ASSERT_EQ(second_in.data_as<int32_t>()[i], static_cast<int32_t>(100 * prev + i));
    }
  }
}

// start_send_recv (--overlap-p2p-communication): two exchanges started back to back on every
// rank match in start order whatever order they are waited in; and a start returns before the
// peer has posted its receive: rank 0 starts a 4 MB send (above MPI's eager limit, so a
// blocking send would wait for the receive) and only then joins a barrier that rank 1 passes
// before posting the receive — with a blocking start this deadlocks.
TEST(MpiCommunicator, StartSendRecvReturnsAtOnceAndMatchesInStartOrder) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank(), next = (me + 1) % kRanks, prev = (me + kRanks - 1) % kRanks;
  for (int64_t n : kSizes) {
    Tensor a = filled(n, value, me), b = filled(n, value, me + 10);
    Tensor from_a = Tensor::cpu({n}), from_b = Tensor::cpu({n});
    const std::vector<PointToPoint> first = {{true, a, next}, {false, from_a, prev}};
    const std::vector<PointToPoint> second = {{true, b, next}, {false, from_b, prev}};
    auto p1 = world->start_send_recv(first);
    auto p2 = world->start_send_recv(second);
    p2->wait();
    p1->wait();
    p1->wait();  // idempotent
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(from_a.data_as<float>()[i], value(prev, i)) << "n " << n << " i " << i;
      ASSERT_EQ(from_b.data_as<float>()[i], value(prev + 10, i)) << "n " << n << " i " << i;
    }
  }
  const int64_t big = int64_t{1} << 20;
  Tensor x = filled(big, value, me);
  if (me == 0) {
    const std::vector<PointToPoint> send = {{true, x, 1}};
    auto pending = world->start_send_recv(send);
    world->barrier();
    pending->wait();
  } else if (me == 1) {
    world->barrier();
    Tensor got = Tensor::cpu({big});
    const std::vector<PointToPoint> recv = {{false, got, 0}};
    world->start_send_recv(recv)->wait();
    for (int64_t i = 0; i < big; i += 4099) ASSERT_EQ(got.data_as<float>()[i], value(0, i)) << i;
  } else {
    world->barrier();
  }
}

TEST(MpiCommunicator, SplitFormsGroupsByColorOrderedByKey) {
  if (test::relaunch_under_mpirun(kRanks)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  // Ranks 0 and 2 form "even" with the order reversed by key; rank 1 joins nothing.
  std::unique_ptr<Communicator> even = world->split(me % 2 == 0 ? 0 : -1, me == 2 ? 0 : 1, "even");
  if (me == 1) {
    EXPECT_EQ(even, nullptr);
  } else {
    ASSERT_NE(even, nullptr);
    EXPECT_EQ(even->name(), "even");
    EXPECT_EQ(even->size(), 2);
    EXPECT_EQ(even->rank(), me == 2 ? 0 : 1);
    Tensor x = Tensor::cpu({1});
    x.data_as<float>()[0] = static_cast<float>(me);
    even->all_reduce(x, ReduceOp::kSum);
    EXPECT_EQ(x.data_as<float>()[0], 2.0f);
  }
}

// A message shorter than the receive's buffer: MPI would complete the receive, NCCL waits for
// the missing elements (a GPU job hangs), so recv, send_recv and start_send_recv all refuse it,
// naming the peer, the group and both counts.
TEST(MpiCommunicator, ShortMessageIsAnErrorInEveryReceive) {
  if (test::relaunch_under_mpirun(2)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  for (int path = 0; path < 3; ++path) {
    Tensor small = filled(5, value, me), big = Tensor::cpu({7});
    if (me == 0) {
      world->send(small, 1);
      continue;
    }
    const std::string expected = "[rank 1] a receive from rank 0 of group 'world' got 5 elements where 7 were expected";
    const std::vector<PointToPoint> recv = {{false, big, 0}};
    try {
      if (path == 0) world->recv(big, 0);
      if (path == 1) world->send_recv(recv);
      if (path == 2) world->start_send_recv(recv)->wait();
      ADD_FAILURE() << "path " << path << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).substr(0, expected.size()), expected) << "path " << path << ": " << e.what();
    }
  }
  // Equal sizes still pass (the check counts elements, not bytes of another type).
  Tensor same = Tensor::cpu({3}, DType::kI32);
  if (me == 0) {
    world->send(same, 1);
  } else {
    world->recv(same, 0);
  }
  world->barrier();
}

// 16-bit reductions move 16-bit values through MPI's user-defined ops: over two ranks each
// element is one addition (or comparison) of the two values, rounded once to the dtype; kAvg
// first multiplies each by round(1/2) in the dtype. Rank r's element i is 1 + ((r + 1) i % 29)
// 2^-7 (signs alternating): representable in both dtypes, and the bf16 sums (spacing 2^-6 above
// 2) often round, so a sum in another precision shows. In place and not, uneven pieces.
TEST(MpiCommunicator, SixteenBitReductionsRoundEachAddition) {
  if (test::relaunch_under_mpirun(2)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  const int64_t me = world->rank();
  auto v = [](DType dtype, int64_t r, int64_t i) {
    const float x = 1.0f + static_cast<float>(((r + 1) * i) % 29) * 0.0078125f;
    return round_to(dtype, i % 3 == 1 ? -x : x);
  };
  auto tensor = [&](DType dtype, int64_t n) {
    Tensor t = Tensor::cpu({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
      const float x = v(dtype, me, i);
      t.data_as<uint16_t>()[i] = dtype == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
    }
    return t;
  };
  auto at = [](const Tensor& t, int64_t i) {
    const uint16_t h = t.data_as<const uint16_t>()[i];
    return t.dtype() == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
  };
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto want = [&](ReduceOp op, int64_t i) {
      float a = v(dtype, 0, i), b = v(dtype, 1, i);
      if (op == ReduceOp::kMax) return std::max(a, b);
      if (op == ReduceOp::kMin) return std::min(a, b);
      if (op == ReduceOp::kAvg) {
        a = round_to(dtype, a * 0.5f);
        b = round_to(dtype, b * 0.5f);
      }
      return round_to(dtype, a + b);
    };
    int64_t rounded = 0;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1001}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n " << n << " " << to_string(op));
        Tensor x = tensor(dtype, n);
        world->all_reduce(x, op);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(at(x, i), want(op, i)) << "all_reduce element " << i;
          if (op == ReduceOp::kSum) rounded += want(op, i) != v(dtype, 0, i) + v(dtype, 1, i);
        }
      }
    }
    if (dtype == DType::kBF16) EXPECT_GT(rounded, 100) << "the bf16 roundings should show";
    const std::vector<int64_t> counts = {600, 401};
    const int64_t off = me == 0 ? 0 : 600, mine = counts[static_cast<size_t>(me)];
    for (bool in_place : {false, true}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << (in_place ? " in place " : " ") << to_string(op));
        Tensor in = tensor(dtype, 1001);
        Tensor out = in_place ? in.flat_view(off, {mine}) : Tensor::cpu({mine}, dtype);
        world->reduce_scatter(in, out, counts, op);
        for (int64_t i = 0; i < mine; ++i) ASSERT_EQ(at(out, i), want(op, off + i)) << "reduce_scatter element " << i;
        if (!in_place && op == ReduceOp::kAvg) {
          for (int64_t i = 0; i < 1001; ++i) ASSERT_EQ(at(in, i), v(dtype, me, i)) << "the input is left as it was";
        }
      }
    }
  }
}

TEST(MpiCommunicator, UnsupportedDtypeIsAnErrorNamingTheOpAndGroup) {
  if (test::relaunch_under_mpirun(2)) return;
  MpiRuntime mpi;
  auto world = mpi.world();
  Tensor x = Tensor::cpu({4}, DType::kI32);
  try {
    world->all_reduce(x, ReduceOp::kSum);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "all_reduce on group 'world': MPI reductions take float tensors, got int32");
  }
}

}  // namespace
}  // namespace megatron::comm
