#include "comm/tcp_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace megatron::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Closes a socket on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string where(const std::string& addr, int64_t port) {
  return str_cat("MASTER_ADDR:MASTER_PORT ", addr, ":", port);
}

void write_all(int fd, const char* p, size_t n, const std::string& at) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw_error("rendezvous at ", at, ": send failed: ", errno_string(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string tcp_broadcast_bytes(const std::string& addr, int64_t port, int64_t rank, int64_t world,
                                const std::string& payload, int64_t size, int64_t timeout_seconds) {
  const std::string at = where(addr, port);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_seconds);
  if (world <= 1) return payload;
  if (rank == 0) {
    MT_CHECK(static_cast<int64_t>(payload.size()) == size) << "payload of " << payload.size() << " bytes";
    Fd server{::socket(AF_INET, SOCK_STREAM, 0)};
    if (server.fd < 0) throw_error("rendezvous at ", at, ": socket failed: ", errno_string(errno));
    const int one = 1;
    ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(server.fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      throw_error("rendezvous at ", at, ": rank 0 cannot listen: ", errno_string(errno));
    }
    if (::listen(server.fd, static_cast<int>(world)) != 0)
      throw_error("rendezvous at ", at, ": listen failed: ", errno_string(errno));
    for (int64_t served = 1; served < world;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        throw_error("rendezvous at ", at, ": only ", served - 1, " of ", world - 1, " ranks connected within ",
                    timeout_seconds, " s");
      }
      pollfd p{server.fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) <= 0) continue;
      Fd client{::accept(server.fd, nullptr, nullptr)};
      if (client.fd < 0) continue;
      write_all(client.fd, payload.data(), payload.size(), at);
      ++served;
    }
    return payload;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(addr.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    throw_error("rendezvous at ", at, ": cannot resolve ", addr, ": ", gai_strerror(rc));
  }
  std::string out;
  while (true) {
    Fd s{::socket(found->ai_family, found->ai_socktype, found->ai_protocol)};
    if (s.fd >= 0 && ::connect(s.fd, found->ai_addr, found->ai_addrlen) == 0) {
      out.resize(static_cast<size_t>(size));
      size_t got = 0;
      while (got < out.size()) {
        const ssize_t r = ::recv(s.fd, out.data() + got, out.size() - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      if (got == out.size()) break;
    }
    if (Clock::now() > deadline) {
      ::freeaddrinfo(found);
      throw_error("rendezvous at ", at, ": rank ", rank, " could not get the id from rank 0 within ", timeout_seconds,
                  " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::freeaddrinfo(found);
  return out;
}

}  // namespace megatron::comm
