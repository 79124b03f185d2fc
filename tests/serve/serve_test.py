"""`megatron serve` end to end, as its users run it.

A tiny GPT is trained on a repeating sentence (`megatron preprocess`, `megatron train`, the GPT-2
vocabulary), then the real server binary is started on 127.0.0.1 with a free port and talked to
with Python's http.client:

  - PUT /api and POST /v1/completions answer, greedily, what `megatron generate` prints for the
    same prompts; segments, tokens and logprobs are consistent;
  - four concurrent requests are all answered correctly, and at least two of them shared a batch
    (GET /stats, and the server's batch log line);
  - every bad request (bad JSON, missing or mistyped fields, too many tokens, a negative
    temperature, an unknown path, a wrong method, an oversized, compressed or chunked body, a
    broken HTTP request) gets a 4xx with a JSON message, and the server answers normally
    afterwards;
  - a second server on the same port is refused; SIGTERM stops the first cleanly (exit 0).

Bounded: one training run of a few seconds, one server, about 40 requests, every wait limited.
Run by CTest with MT_BIN (the megatron binary) and MT_DATA_DIR (data/, with gpt2/).
"""
import gzip
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN = os.environ.get("MT_BIN", "build/megatron")
DATA = os.environ.get("MT_DATA_DIR", "data")
VOCAB = ["--vocab-file", os.path.join(DATA, "gpt2", "vocab.json"),
         "--merge-file", os.path.join(DATA, "gpt2", "merges.txt")]
PROMPTS = ["the cat sat on", "the mat.", "on the", "sat"]
NEW = 6
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, flush=True)


def megatron(args, timeout=300):
    r = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"megatron {args[0]} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def make_checkpoint(tmp):
    with open(os.path.join(tmp, "corpus.jsonl"), "w") as f:
        for _ in range(60):
            f.write(json.dumps({"text": "the cat sat on the mat. " * 6}) + "\n")
    megatron(["preprocess", "--input", f"{tmp}/corpus.jsonl", "--output-prefix", f"{tmp}/c",
              "--tokenizer-type", "GPT2BPETokenizer", "--append-eod"] + VOCAB)
    megatron(["train", "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2",
              "--seq-length", "16", "--micro-batch-size", "4", "--global-batch-size", "4",
              "--train-iters", "100", "--lr", "0.01", "--attention-dropout", "0", "--hidden-dropout", "0",
              "--log-interval", "100", "--eval-interval", "1000", "--eval-iters", "1", "--split", "100,0,0",
              "--make-vocab-size-divisible-by", "1", "--data-path", f"{tmp}/c_text_document",
              "--data-cache-path", f"{tmp}/cache", "--save", f"{tmp}/ckpt"] + VOCAB)
    return f"{tmp}/ckpt"


class Server:
    """The `megatron serve` process; its output lines are collected as they come."""

    def __init__(self, ckpt):
        self.proc = subprocess.Popen(
            [BIN, "serve", "--load", ckpt, "--host", "127.0.0.1", "--port", "0", "--max-batch-size", "4",
             "--batch-wait-ms", "300", "--max-tokens-to-oom", "100", "--max-request-bytes", "65536",
             "--served-model-name", "tiny-gpt"] + VOCAB,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.new = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.port = None
        deadline = time.time() + 60
        while self.port is None and time.time() < deadline:
            try:
                line = self.new.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                break
            if line is None:
                break
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None:
            self.proc.kill()
            sys.exit("the server did not start:\n" + "".join(self.lines))

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self.new.put(line)
        self.new.put(None)

    def request(self, method, path, body=None, raw=None):
        """(status, parsed JSON body or None, headers)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        return r.status, parsed, dict(r.getheaders())


def references(ckpt, tmp):
    with open(f"{tmp}/prompts.txt", "w") as f:
        f.write("\n".join(PROMPTS) + "\n")
    out = megatron(["generate", "--load", ckpt, "--prompt-file", f"{tmp}/prompts.txt", "--temperature", "0",
                    "--max-new-tokens", str(NEW)] + VOCAB)
    lines = out.split("\n")[:len(PROMPTS)]
    check(len(lines) == len(PROMPTS), f"generate printed {out!r}")
    return dict(zip(PROMPTS, lines))


def greedy_answers(server, ref):
    eod = "<|endoftext|>"
    status, a, _ = server.request("PUT", "/api", {"prompts": PROMPTS, "tokens_to_generate": NEW, "top_k": 1,
                                                 "logprobs": True})
    check(status == 200, f"PUT /api: {status} {a}")
    for i, p in enumerate(PROMPTS):
        text = a["text"][i]
        # Megatron keeps the end-of-document token that stopped a sequence; generate does not print it.
        check(text.split(eod)[0] == ref[p], f"/api {p!r}: {text!r} != generate's {ref[p]!r}")
        check("".join(a["segments"][i]) == text, f"segments of {p!r} do not make its text")
        check(len(a["segments"][i]) == len(a["tokens"][i]), "one segment per token")
        check(len(a["logprobs"][i]) == len(a["tokens"][i]) - 1, "a logprob per token after the first")
        check(all(x <= 0 for x in a["logprobs"][i]), "logprobs are log-probabilities")
    check(a["text"][0] == "the cat sat on the mat. the cat sat", f"the model learned its sentence: {a['text'][0]!r}")

    status, c, _ = server.request("POST", "/v1/completions", {"model": "tiny-gpt", "prompt": PROMPTS,
                                                              "max_tokens": NEW, "temperature": 0})
    check(status == 200, f"POST /v1/completions: {status} {c}")
    check(c["object"] == "text_completion" and c["id"].startswith("cmpl-") and c["model"] == "tiny-gpt",
          f"completion envelope {c}")
    for i, p in enumerate(PROMPTS):
        choice = c["choices"][i]
        check(choice["index"] == i and choice["logprobs"] is None, f"choice {choice}")
        check(p + choice["text"] == ref[p], f"/v1/completions {p!r}: {choice['text']!r} after the prompt")
        check(choice["finish_reason"] in ("length", "stop"), f"finish_reason {choice}")
    usage = c["usage"]
    check(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and
          usage["completion_tokens"] <= NEW * len(PROMPTS), f"usage {usage}")

    # One prompt as a string, logprobs with alternatives, a stop string, Megatron's old path.
    status, c, _ = server.request("POST", "/completions", {"prompt": "the cat sat on", "max_tokens": NEW,
                                                           "temperature": 0, "logprobs": 2, "stop": "mat"})
    check(status == 200 and c["choices"][0]["text"] == " the " and c["choices"][0]["finish_reason"] == "stop",
          f"stop string: {c}")
    lp = c["choices"][0]["logprobs"]
    check(lp["tokens"][0] == " the" and len(lp["top_logprobs"][0]) == 2 and lp["text_offset"][0] == 14,
          f"logprobs {lp}")
    # Sampling is reproducible by seed.
    body = {"prompts": ["the"], "tokens_to_generate": NEW, "temperature": 2.0, "random_seed": 7}
    first = server.request("PUT", "/api", body)[1]
    check(first == server.request("PUT", "/api", body)[1], "the same random_seed, the same text")


def concurrent_answers(server, ref):
    barrier = threading.Barrier(4)
    got = {}

    def ask(p):
        barrier.wait(timeout=30)
        got[p] = server.request("PUT", "/api", {"prompts": [p], "tokens_to_generate": NEW, "top_k": 1})

    threads = [threading.Thread(target=ask, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for p in PROMPTS:
        status, a, _ = got.get(p, (None, None, None))
        check(status == 200 and a["text"][0].split("<|endoftext|>")[0] == ref[p],
              f"concurrent {p!r}: {status} {a}")
    status, stats, _ = server.request("GET", "/stats")
    check(status == 200 and stats["multi_request_batches"] >= 1 and stats["largest_batch"] >= 2,
          f"no batch held two requests: {stats}")
    check(any(re.search(r"batch \d+: [2-4] sequences from [2-4] requests", line) for line in server.lines),
          "no batch log line of several requests:\n" + "".join(server.lines))


def bad_requests(server):
    long_body = {"prompts": ["the " * 40000]}
    cases = [
        ("PUT", "/api", None, "{not json", 400, "Failed to decode JSON object"),
        ("PUT", "/api", None, "", 400, "Failed to decode JSON object"),
        ("PUT", "/api", [1, 2], None, 400, "the request body must be a JSON object"),
        ("PUT", "/api", {}, None, 400, "prompts argument required"),
        ("PUT", "/api", {"prompts": "the"}, None, 400, "prompts is not a list of strings"),
        ("PUT", "/api", {"prompts": [3]}, None, 400, "prompts is not a list of strings"),
        ("PUT", "/api", {"prompts": []}, None, 400, "prompts is empty"),
        ("PUT", "/api", {"prompts": ["the"], "tokens_to_generate": "5"}, None, 400,
         "tokens_to_generate must be an integer"),
        ("PUT", "/api", {"prompts": ["the"], "tokens_to_generate": 1000000}, None, 400,
         "Length of prompt + tokens_to_generate longer than allowed"),
        ("PUT", "/api", {"prompts": ["the"] * 10, "tokens_to_generate": 10}, None, 400, "Too many tokens."),
        ("PUT", "/api", {"prompts": ["the"], "temperature": -1}, None, 400,
         "temperature must be a positive number"),
        ("PUT", "/api", {"prompts": ["the"], "top_k": 2, "top_p": 0.5}, None, 400,
         "cannot set both top-k and top-p samplings."),
        ("PUT", "/api", {"prompts": ["the"], "logprobs": "yes"}, None, 400, "logprobs must be a boolean value"),
        ("PUT", "/api", {"prompts": [""]}, None, 400, "Empty prompts require add_BOS=true"),
        ("PUT", "/api", {"prompts": ["the"], "beam_width": 2}, None, 400, "beam search is not supported"),
        ("PUT", "/api", None, '{"prompts": ["\xff"]}'.encode("latin-1"), 400, "Failed to decode JSON object"),
        ("GET", "/api", None, None, 405, "The method is not allowed for the requested URL."),
        ("POST", "/api", {"prompts": ["the"]}, None, 405, "The method is not allowed"),
        ("GET", "/nowhere", None, None, 404, "The requested URL was not found on the server."),
        ("PUT", "/v1/completions", {"prompt": "the"}, None, 405, "The method is not allowed"),
        ("POST", "/v1/completions", {}, None, 400, "'prompt' is a required property"),
        ("POST", "/v1/completions", {"prompt": "the", "max_tokens": 1000}, None, 400,
         "This model's maximum context length is 16 tokens"),
        ("POST", "/v1/completions", {"prompt": "the", "temperature": -1}, None, 400, "temperature must be"),
        ("POST", "/v1/completions", {"prompt": "the", "n": 2}, None, 400, "n > 1 not supported"),
        ("POST", "/v1/completions", {"prompt": "the", "stream": True}, None, 400, "stream=true is not supported"),
        ("POST", "/v1/completions", {"prompt": [[262, 99999999]]}, None, 400, "outside the vocabulary"),
        ("POST", "/v1/completions", {"prompt": "the", "max_tokens": -3}, None, 400, "max_tokens must be"),
        ("PUT", "/api", long_body, None, 413, "the request body is larger than 65536 bytes"),
    ]
    for method, path, body, raw, want, message in cases:
        status, answer, _ = server.request(method, path, body, raw)
        if path.startswith("/v1/"):
            got = (answer or {}).get("error", {}).get("message", "")
        else:
            got = (answer or {}).get("message", "")
        check(status == want and message in got, f"{method} {path} {body or raw!r}: {status} {answer}")
        check(server.proc.poll() is None, f"the server died after {method} {path} {body or raw!r}")
    # Bodies the size limit would not bound: compressed (a gzip bomb) or chunked.
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("PUT", "/api", gzip.compress(b'{"prompts": ["' + b"a" * (64 << 20) + b'"]}'),
              {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    r = c.getresponse()
    check(r.status == 415 and b"Content-Encoding gzip is not accepted" in r.read(), f"gzip body: {r.status}")
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("PUT", "/api", iter([b'{"prompts": ["', b"a" * 100000, b'"]}']),
              {"Content-Type": "application/json"}, encode_chunked=True)
    r = c.getresponse()
    check(r.status == 411 and b"Transfer-Encoding chunked is not accepted" in r.read(), f"chunked body: {r.status}")
    c.close()
    # Not HTTP at all, then a request cut short: the server answers 400 or closes, and lives on.
    for junk in (b"HELLO THERE\r\n\r\n", b"PUT /api HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"pro"):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        reply = s.recv(4096)
        s.close()
        check(reply == b"" or reply.startswith(b"HTTP/1.1 4"), f"{junk!r} got {reply[:80]!r}")
    status, a, _ = server.request("PUT", "/api", {"prompts": ["the cat sat on"], "tokens_to_generate": 2,
                                                 "top_k": 1})
    check(status == 200 and a["text"] == ["the cat sat on the mat"], f"after the bad requests: {status} {a}")


def main():
    if not os.path.isfile(VOCAB[1]):
        print(f"SKIP: {VOCAB[1]} is missing (scripts/setup.sh fetches it)")
        return 0
    tmp = tempfile.mkdtemp(prefix="serve_test_")
    server = None
    try:
        ckpt = make_checkpoint(tmp)
        ref = references(ckpt, tmp)
        server = Server(ckpt)
        greedy_answers(server, ref)
        concurrent_answers(server, ref)
        bad_requests(server)
        # A second server on the same port is refused (no SO_REUSEPORT sharing of connections).
        second = subprocess.run([BIN, "serve", "--load", ckpt, "--host", "127.0.0.1", "--port", str(server.port)] +
                                VOCAB, capture_output=True, text=True, timeout=60)
        check(second.returncode == 1 and "error: [--port] cannot listen on" in second.stderr,
              f"a second server on port {server.port}: {second.returncode} {second.stderr}")
        status, models, _ = server.request("GET", "/v1/models")
        check(status == 200 and models["data"][0]["id"] == "tiny-gpt", f"/v1/models {models}")
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = server.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            code = "still running 30 s after SIGTERM"
        time.sleep(0.2)
        log = "".join(server.lines)
        check(code == 0 and "received SIGTERM, stopping" in log and "[serve] stopped" in log,
              f"shutdown: exit {code}\n{log}")
    finally:
        if server is not None and server.proc.poll() is None:
            server.proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("serve: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
