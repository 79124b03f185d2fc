#include "obs/straggler_control.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>

#include "core/error.h"

namespace megatron::obs {

StragglerControl::StragglerControl(int port, bool on) : on_(on) {
  if (port < 0 || port > 65535) throw_error("[--straggler-ctrlr-port] must be a TCP port (0-65535), got ", port);
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener_ < 0) throw_error("[--straggler-ctrlr-port] ", port, ": socket failed: ", errno_string(errno));
  const int one = 1;
  ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(sa);
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(listener_, 8) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int e = errno;
    ::close(listener_);
    throw_error("[--straggler-ctrlr-port] cannot listen on port ", port, ": ", errno_string(e));
  }
  port_ = ntohs(sa.sin_port);
  thread_ = std::thread([this] { serve(); });
}

StragglerControl::~StragglerControl() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  ::close(listener_);
}

void StragglerControl::serve() {
  // Polls with a timeout so that the destructor's stop is seen within 100 ms.
  while (!stop_.load()) {
    pollfd p{listener_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready <= 0 || (p.revents & POLLIN) == 0) continue;
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    answer(client);
    ::close(client);
  }
}

void StragglerControl::answer(int client) {
  const bool now_on = !on_.load();
  on_.store(now_on);
  // The request (curl's GET): read until its blank line, for at most one second in all (a slow
  // client cannot hold the thread, and with it the destructor).
  std::string request;
  char buf[1024];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
  }
  const std::string body = str_cat("straggler detector ", now_on ? "on" : "off", " from the next log interval\n");
  const std::string reply = str_cat("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ", body.size(),
                                    "\r\nConnection: close\r\n\r\n", body);
  const char* p = reply.data();
  size_t left = reply.size();
  while (left > 0) {
    const ssize_t w = ::send(client, p, left, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // the client went away: the flip stands
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace megatron::obs
