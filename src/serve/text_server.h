// The HTTP side of `megatron serve` (cpp-httplib, Debian's libcpp-httplib-dev): routes, status
// codes, error bodies and logs around serve/requests.h and the batch engine.
//
//   PUT  /api                             Megatron's text generation API
//   POST /v1/completions, /completions    the OpenAI completions API (/completions: Megatron's path)
//   GET  /v1/models                       the one model served (OpenAI's list format)
//   GET  /stats                           the engine's counters (batches, largest batch, ...)
//
// Every request is answered, whatever it holds: a refused one with 4xx and a JSON message
// (400 for a bad body, 404 an unknown path, 405 a known path with another method, 411 a chunked
// body, 413 one over the limit, 415 a compressed one), 503 when the queue is full or the server
// is stopping, 500 when its batch failed. Errors under /v1/ and /completions use OpenAI's
// {"error": {...}} body, the rest Megatron's {"message": ...}.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "serve/batch_engine.h"
#include "serve/requests.h"

namespace megatron::serve {

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 5000;  // 0: any free port (bind() says which)
  size_t max_body_bytes = size_t{4} << 20;
  int threads = 16;      // connections served at once
  uint64_t seed = 1234;  // request k of a run samples with seed + k unless it gives a seed
};

class TextServer {
 public:
  using LogLine = std::function<void(const std::string&)>;
  // The engine must outlive the server; settings.tokenizer too.
  TextServer(BatchEngine& engine, ServeSettings settings, ServerOptions options, LogLine log);
  ~TextServer();
  TextServer(const TextServer&) = delete;
  TextServer& operator=(const TextServer&) = delete;

  // Binds the listening socket; returns the port. Throws Error naming --host/--port when it
  // cannot.
  int bind();
  // Serves until stop(); the requests being served when it is called are answered first.
  void run();
  // From any thread (a signal-waiting one): stop accepting and make run() return.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron::serve
