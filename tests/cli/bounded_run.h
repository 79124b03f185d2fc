// A command of the `megatron` binary run as users run it, but bounded: in a forked child of the
// test, under an address-space limit and a time limit, with main()'s handling of errors (an
// Error is "error: <message>" and exit status 1, so is running out of memory). Whether it ended
// by itself (and how) is then plain to see: an exit status, a signal (an abort, a crash) or the
// time limit; a runaway allocation meets the memory limit and shows as "error: out of memory".
// Forking skips the binary's start-up (~0.1 s of dynamic loading), so that a test can run a
// command a thousand times.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace megatron::test {

struct BoundedRun {
  bool exited = false;     // it exited (else a signal ended it)
  int status = -1;         // the exit status when it exited
  int signal = 0;          // the signal that ended it
  bool timed_out = false;  // the time limit killed it
  std::string output;      // stdout and stderr
};

// The address space this process has mapped (the child starts with as much).
inline int64_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  statm >> pages;
  return pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

// Runs `command(args)` in a child with `extra_bytes` of address space beyond what the test has
// mapped and `seconds` of time; `env` ("NAME=value") is set in the child first.
inline BoundedRun run_bounded(int (*command)(const cli::CommandArgs&), const cli::CommandArgs& args,
                              int64_t extra_bytes = int64_t{1} << 30, double seconds = 20,
                              const std::vector<std::string>& env = {}) {
  BoundedRun r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  std::fflush(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) return r;
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    const rlim_t limit = static_cast<rlim_t>(mapped_bytes() + extra_bytes);
    const rlimit as{limit, limit};
    ::setrlimit(RLIMIT_AS, &as);
    int status = 0;
    try {  // as main() does
      status = command(args);
    } catch (const Error& e) {
      std::cout.flush();
      std::fprintf(stderr, "error: %s\n", e.what());
      status = 1;
    } catch (const std::bad_alloc&) {
      std::cout.flush();
      std::fprintf(stderr, "error: out of memory\n");
      status = 1;
    }
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(status);
  }
  ::close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child closed its end: it has ended
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exited = WIFEXITED(status);
  r.status = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return r;
}

// How a bounded run ended, for failure messages: "exit 1", "signal 6", "timed out".
inline std::string ending(const BoundedRun& r) {
  if (r.timed_out) return "timed out";
  if (!r.exited) return "signal " + std::to_string(r.signal);
  return "exit " + std::to_string(r.status);
}

// `text` names `flag`: the flag followed by something that cannot continue a flag's name (so
// that "--lr" is not found in "--lr-decay-iters").
inline bool names_flag(const std::string& text, const std::string& flag) {
  for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    if (end == text.size() ||
        !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-' || text[end] == '_')) {
      return true;
    }
  }
  return false;
}

// The "error: " lines of an output.
inline std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(start, end - start);
    if (line.rfind("error: ", 0) == 0) lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

// "" when `r` ended by itself in acceptance (exit 0, no error line) or in refusal (exit 1, one
// error line, naming `flag` or else `also`, and not "out of memory"); else what went wrong.
inline std::string defect_of(const BoundedRun& r, const std::string& flag, const std::string& also = "") {
  if (!r.exited || r.timed_out || (r.status != 0 && r.status != 1)) return ending(r);
  const std::vector<std::string> errors = error_lines(r.output);
  if (r.status == 0) return errors.empty() ? "" : "exit 0 with an error line";
  if (errors.size() != 1) return std::to_string(errors.size()) + " error lines";
  if (errors[0] == "error: out of memory") return "out of memory";
  if (!names_flag(errors[0], flag) && (also.empty() || errors[0].find(also) == std::string::npos)) {
    return "the error does not name " + flag;
  }
  return "";
}

}  // namespace megatron::test
