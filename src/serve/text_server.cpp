#include "serve/text_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <mutex>
#include <random>

#include "core/error.h"
#include "core/json_writer.h"

namespace megatron::serve {
namespace {

// Flask's (Werkzeug's) wording, which Megatron's server answers with.
constexpr const char* kNotFound =
    "The requested URL was not found on the server. If you entered the URL manually please check your spelling and "
    "try again.";
constexpr const char* kNotAllowed = "The method is not allowed for the requested URL.";

// What httplib answers by itself, in words.
std::string status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 404:
      return kNotFound;
    case 405:
      return kNotAllowed;
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return status >= 500 ? "Internal Server Error" : "Bad Request";
  }
}

bool openai_path(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/completions"; }

void answer_error(const httplib::Request& req, httplib::Response& res, int status, const std::string& message,
                  const std::string& param = "") {
  res.status = status;
  res.set_content(openai_path(req.path) ? openai_error_body(status, message, param) : megatron_error_body(message),
                  "application/json");
}

}  // namespace

struct TextServer::Impl {
  BatchEngine& engine;
  ServeSettings settings;
  ServerOptions options;
  LogLine log;
  httplib::Server http;
  std::atomic<uint64_t> requests{0};
  const uint64_t run_id =
      (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();  // of completion ids
  int port = -1;

  Impl(BatchEngine& e, ServeSettings s, ServerOptions o, LogLine l)
      : engine(e), settings(std::move(s)), options(std::move(o)), log(std::move(l)) {}

  void say(const std::string& line) {
    if (log) log(line);
  }

  // Runs `body` and turns whatever it throws into an answer.
  template <class F>
  void guarded(const httplib::Request& req, httplib::Response& res, F&& body) {
    const std::string who = req.method + " " + req.path + " from " + req.remote_addr;
    try {
      body();
      return;
    } catch (const RequestError& e) {
      answer_error(req, res, e.status(), e.what(), e.param());
    } catch (const BatchEngine::QueueFull& e) {
      answer_error(req, res, 503, e.what());
    } catch (const BatchEngine::ShuttingDown& e) {
      answer_error(req, res, 503, e.what());
    } catch (const std::bad_alloc&) {
      answer_error(req, res, 500, "out of memory");
    } catch (const std::exception& e) {
      answer_error(req, res, 500, std::string("generation failed: ") + e.what());
    }
    say(who + ": " + std::to_string(res.status) + " " + std::string(res.body.substr(0, 300)));
  }

  void megatron_api(const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      const uint64_t seed = options.seed + requests.fetch_add(1);
      ApiRequest r = parse_api_request(req.body, settings, seed);
      if (!r.no_log) {
        say(req.method + " " + req.path + " from " + req.remote_addr + ": " + std::to_string(r.sequences.size()) +
            " prompt" + (r.sequences.size() == 1 ? "" : "s") + ", tokens_to_generate " +
            std::to_string(r.tokens_to_generate));
      }
      std::vector<SequenceResult> results = engine.submit(std::move(r.sequences)).get();
      res.set_content(api_response(r, results, settings), "application/json");
    });
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      const uint64_t n = requests.fetch_add(1);
      CompletionRequest r = parse_completion_request(req.body, settings, options.seed + n);
      say(req.method + " " + req.path + " from " + req.remote_addr + ": " + std::to_string(r.sequences.size()) +
          " prompt" + (r.sequences.size() == 1 ? "" : "s") + ", max_tokens " + std::to_string(r.max_tokens));
      std::vector<SequenceResult> results = engine.submit(r.sequences).get();
      char id[48];
      std::snprintf(id, sizeof id, "cmpl-%016llx%08llx", static_cast<unsigned long long>(run_id),
                    static_cast<unsigned long long>(n));
      res.set_content(completion_response(r, results, settings, id, static_cast<int64_t>(std::time(nullptr))),
                      "application/json");
    });
  }

  void models(const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      JsonWriter w;
      w.begin_object().key("object").value("list").key("data").begin_array();
      w.begin_object().key("id").value(settings.model_name).key("object").value("model");
      w.key("owned_by").value("megatron.cpp").key("max_model_len").value(settings.context).end_object();
      w.end_array().end_object();
      res.set_content(w.take(), "application/json");
    });
  }

  void stats(const httplib::Request& req, httplib::Response& res) {
    guarded(req, res, [&] {
      const EngineStats s = engine.stats();
      JsonWriter w;
      w.begin_object();
      w.key("requests").value(s.submitted).key("sequences").value(s.sequences).key("batches").value(s.batches);
      w.key("largest_batch").value(s.largest_batch).key("multi_request_batches").value(s.multi_request_batches);
      w.key("generated_tokens").value(s.generated_tokens).key("queued").value(s.queued);
      w.end_object();
      res.set_content(w.take(), "application/json");
    });
  }

  void routes() {
    http.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    http.set_payload_max_length(options.max_body_bytes);
    // SO_REUSEADDR (a restart binds at once) without httplib's SO_REUSEPORT, which would let a
    // second server bind the same port and take half of the connections.
    http.set_socket_options([](socket_t sock) {
      const int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http.Put("/api", [this](const httplib::Request& q, httplib::Response& r) { megatron_api(q, r); });
    for (const char* path : {"/v1/completions", "/completions"}) {
      http.Post(path, [this](const httplib::Request& q, httplib::Response& r) { completions(q, r); });
    }
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) { models(q, r); });
    http.Get("/stats", [this](const httplib::Request& q, httplib::Response& r) { stats(q, r); });
    // The other methods of these paths: 405, naming the one allowed.
    struct Allowed {
      const char* path;
      const char* method;
    };
    for (const Allowed& a : {Allowed{"/api", "PUT"}, Allowed{"/v1/completions", "POST"},
                             Allowed{"/completions", "POST"}, Allowed{"/v1/models", "GET"}, Allowed{"/stats", "GET"}}) {
      const std::string method = a.method;
      auto not_allowed = [method](const httplib::Request& q, httplib::Response& r) {
        r.set_header("Allow", method);
        answer_error(q, r, 405, kNotAllowed);
      };
      if (method != "GET") http.Get(a.path, not_allowed);
      if (method != "POST") http.Post(a.path, not_allowed);
      if (method != "PUT") http.Put(a.path, not_allowed);
      http.Patch(a.path, not_allowed);
      http.Delete(a.path, not_allowed);
    }
    // Bodies --max-request-bytes would not bound are refused before they are read: httplib
    // inflates compressed ones past it (a few hundred KB of gzip make gigabytes) and reads
    // chunked ones to their end.
    http.set_pre_routing_handler([](const httplib::Request& q, httplib::Response& r) {
      const std::string encoding = q.get_header_value("Content-Encoding");
      const std::string transfer = q.get_header_value("Transfer-Encoding");
      if ((encoding.empty() || encoding == "identity") && (transfer.empty() || transfer == "identity")) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      r.set_header("Connection", "close");  // the body is left unread
      if (!transfer.empty() && transfer != "identity") {
        answer_error(q, r, 411,
                     "Transfer-Encoding " + transfer + " is not accepted: send the body with a Content-Length");
      } else {
        answer_error(q, r, 415, "Content-Encoding " + encoding + " is not accepted: send the body uncompressed");
      }
      return httplib::Server::HandlerResponse::Handled;
    });
    // What httplib answers by itself (no route, a body over the limit, a request it cannot
    // read) gets a JSON body too.
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;
      std::string message = status_text(r.status);
      if (r.status == 413) {
        message = "the request body is larger than " + std::to_string(options.max_body_bytes) +
                  " bytes (megatron serve --max-request-bytes)";
      }
      const int status = r.status;
      answer_error(q, r, status, message);
    });
    http.set_exception_handler([](const httplib::Request& q, httplib::Response& r, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      answer_error(q, r, 500, what);
    });
  }
};

TextServer::TextServer(BatchEngine& engine, ServeSettings settings, ServerOptions options, LogLine log)
    : impl_(std::make_unique<Impl>(engine, std::move(settings), std::move(options), std::move(log))) {
  impl_->routes();
}

TextServer::~TextServer() = default;

int TextServer::bind() {
  Impl& m = *impl_;
  if (m.options.port == 0) {
    m.port = m.http.bind_to_any_port(m.options.host);
    if (m.port <= 0) throw_error("[--host] cannot listen on ", m.options.host, " (any port)");
  } else {
    if (!m.http.bind_to_port(m.options.host, m.options.port)) {
      throw_error("[--port] cannot listen on ", m.options.host, ":", m.options.port,
                  " (in use, or the host is not an address of this machine)");
    }
    m.port = m.options.port;
  }
  return m.port;
}

void TextServer::run() {
  MT_CHECK(impl_->port > 0) << "run() before bind()";
  impl_->http.listen_after_bind();
}

void TextServer::stop() { impl_->http.stop(); }

}  // namespace megatron::serve
