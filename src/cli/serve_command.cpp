// megatron serve: Megatron's text generation server (PUT /api) and the OpenAI completions API
// over a checkpoint, with concurrent requests batched through the KV-cache generator
// (serve/text_server.h, serve/batch_engine.h; docs/serving.md).
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "cli/args.h"
#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "cli/inference_model.h"
#include "cli/tokenizer_flags.h"
#include "core/error.h"
#include "model/gpt_generator.h"
#include "serve/batch_engine.h"
#include "serve/requests.h"
#include "serve/text_server.h"

namespace megatron::cli {
namespace {

// SIGINT and SIGTERM, from whichever thread takes them (OpenBLAS starts its threads before main()
// can mask anything): the handler writes the signal's number to a pipe that a waiting thread
// reads (write() is async-signal-safe; stopping the HTTP server is not).
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

// Installs the handler for the command's lifetime; the old dispositions come back after.
class StopSignals {
 public:
  StopSignals() {
    if (::pipe(g_signal_pipe) != 0) throw_error("cannot create a pipe: ", errno_string(errno));
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  // Blocks until a signal (its number) or wake() (0).
  int wait() {
    unsigned char byte = 0;
    while (::read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    return byte;
  }
  void wake() { on_stop_signal(0); }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

}  // namespace

int run_serve(const CommandArgs& argv) {
  Args args("serve", "answer Megatron's text generation API and OpenAI's completions over HTTP");
  args.option("--load", "DIR", "checkpoint directory (its latest iteration)", std::nullopt, true)
      .option("--iteration", "N", "load this iteration instead of the latest")
      .option("--host", "ADDR", "address to listen on (Megatron's server: all of them)", "0.0.0.0")
      .option("--port", "PORT", "port to listen on (0: any free one, printed at start)", "5000")
      .option("--max-batch-size", "N",
              "sequences generated together in one batch (Megatron's --inference-max-batch-size)", "8")
      .option("--inference-max-batch-size", "N", "the same as --max-batch-size")
      .option("--batch-wait-ms", "MS", "how long a batch that is not full waits for more requests to join", "0")
      .option("--max-tokens-to-oom", "N",
              "refuse a request of more tokens (prompts x (longest prompt + tokens to generate))", "12000")
      .option("--max-prompts", "N", "prompts per request at most (Megatron: 128)", "128")
      .option("--max-queued", "N", "prompts waiting at most; more are answered 503", "1024")
      .option("--max-request-bytes", "N", "request bodies larger than this are answered 413", "4194304")
      .option("--threads", "N", "connections served at once", "16")
      .option("--max-new-tokens", "N", "tokens_to_generate of a PUT /api request that gives none", "64")
      .option("--temperature", "T", "temperature of a request that gives none; 0 is greedy", "1.0")
      .option("--top-k", "K", "top_k of a request that gives none (0: all)", "0")
      .option("--top-p", "P", "top_p of a request that gives none (0: off)", "0")
      .option("--seed", "S", "sampling seed of the first request that gives none (then S+1, ...)", "1234")
      .option("--served-model-name", "NAME", "the model's name in OpenAI answers (default: --load's folder name)");
  declare_tokenizer_flags(args, "");  // default: the checkpoint's tokenizer, else GPT2BPETokenizer
  declare_device_flag(args);
  if (!args.parse(argv)) {
    std::cout << args.usage();
    return 0;
  }
  const int64_t max_batch = args.given("--inference-max-batch-size")
                                ? args.get_int("--inference-max-batch-size", 1, 4096)
                                : args.get_int("--max-batch-size", 1, 4096);
  serve::BatchEngine::Options engine_options;
  engine_options.max_batch = max_batch;
  engine_options.batch_wait = std::chrono::milliseconds(args.get_int("--batch-wait-ms", 0, 600000));
  engine_options.max_queued = args.get_int("--max-queued", 1);
  serve::ServerOptions server_options;
  server_options.host = args.get_string("--host");
  server_options.port = static_cast<int>(args.get_int("--port", 0, 65535));
  server_options.max_body_bytes = static_cast<size_t>(args.get_int("--max-request-bytes", 1, int64_t{1} << 40));
  server_options.threads = static_cast<int>(args.get_int("--threads", 1, 4096));
  server_options.seed = static_cast<uint64_t>(args.get_int("--seed"));
  serve::ServeSettings settings;
  settings.max_prompts = args.get_int("--max-prompts", 1, 1 << 20);
  settings.max_tokens_to_oom = args.get_int("--max-tokens-to-oom", 1);
  settings.tokens_to_generate = args.get_int("--max-new-tokens", 0);
  settings.sampling.temperature = static_cast<float>(args.get_double("--temperature", {0.0, kMaxFp32}));
  settings.sampling.top_k = args.get_int("--top-k", 0);
  settings.sampling.top_p = static_cast<float>(args.get_double("--top-p", {0.0, 1.0}));
  if (settings.sampling.top_k > 0 && settings.sampling.top_p > 0.0f) {
    throw_error("[--top-p] cannot be set with --top-k (Megatron's API samples with one of them)");
  }

  std::mutex log_mutex;
  auto log = [&log_mutex](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    std::cout << "[serve] " << line << "\n" << std::flush;
  };
  std::ostringstream device_line;
  const InferenceModel loaded = load_inference_model(args, device_line);
  const int64_t context = loaded.config.max_position_embeddings;
  settings.tokenizer = loaded.tokenizer.get();
  settings.vocab_size = loaded.config.vocab_size;
  settings.context = context;
  std::string name = args.given("--served-model-name") ? args.get_string("--served-model-name") : "";
  if (name.empty()) {
    std::filesystem::path dir(args.get_string("--load"));
    if (dir.filename().empty()) dir = dir.parent_path();
    name = dir.filename().string();
  }
  settings.model_name = name;

  model::GPTGenerator generator(loaded.config, loaded.model->parameters(), *loaded.backend, context, max_batch);
  // From here on SIGINT and SIGTERM stop the server cleanly (while loading they end the process).
  StopSignals stop_signals;
  serve::BatchEngine engine(generator, *loaded.tokenizer, loaded.config.vocab_size, engine_options, log);
  serve::TextServer server(engine, settings, server_options, log);
  const int port = server.bind();

  // The signal thread: the first SIGINT or SIGTERM stops the server; run() returning for any
  // other reason wakes it.
  std::thread waiter([&] {
    const int sig = stop_signals.wait();
    if (sig != 0) log(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
    server.stop();
  });
  std::string device = device_line.str();
  while (!device.empty() && device.back() == '\n') device.pop_back();
  const size_t text = device.find_first_not_of(" >");
  device = text == std::string::npos ? "" : device.substr(text);
  log("model " + name + " (iteration " + std::to_string(loaded.iteration) + ", " +
      std::to_string(loaded.config.num_layers) + " layers, hidden " + std::to_string(loaded.config.hidden_size) + ", " +
      std::to_string(context) + " positions)" + (device.empty() ? "" : "; " + device));
  log("listening on http://" + server_options.host + ":" + std::to_string(port) + " (PUT /api, POST /v1/completions; " +
      "batches of up to " + std::to_string(max_batch) + ")");
  server.run();
  stop_signals.wake();  // unread if the waiter took a signal already
  waiter.join();
  engine.stop();
  log("stopped");
  return 0;
}

}  // namespace megatron::cli
