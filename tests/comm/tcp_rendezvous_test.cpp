// The TCP rendezvous that carries NCCL's unique id (GPU ranks without MPI): ranks as threads
// of this process on a free local port, the non-zero ranks starting before rank 0 listens.
#include "comm/tcp_rendezvous.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/error.h"

namespace megatron::comm {
namespace {

int64_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  socklen_t len = sizeof(sa);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  ::close(fd);
  return ntohs(sa.sin_port);
}

TEST(TcpRendezvous, EveryRankGetsRankZerosBytes) {
  const int64_t port = free_port(), world = 4;
  std::string payload(128, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 37 + 1);  // includes zero bytes
  std::vector<std::string> got(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int64_t r = world - 1; r >= 0; --r) {
    ranks.emplace_back([&, r] {
      if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others must retry
      got[static_cast<size_t>(r)] =
          tcp_broadcast_bytes("127.0.0.1", port, r, world, r == 0 ? payload : std::string(), 128, 20);
    });
  }
  for (auto& t : ranks) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, payload);
}

TEST(TcpRendezvous, NoRankZeroIsAnErrorNamingTheAddress) {
  const int64_t port = free_port();
  try {
    tcp_broadcast_bytes("127.0.0.1", port, 1, 2, "", 128, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rendezvous at MASTER_ADDR:MASTER_PORT 127.0.0.1:" + std::to_string(port) +
                                         ": rank 1 could not get the id from rank 0 within 1 s");
  }
}

}  // namespace
}  // namespace megatron::comm
