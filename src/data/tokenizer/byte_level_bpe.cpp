// The byte-level BPE model of GPT-2 (megatron/tokenizer/gpt2_tokenization.py) and of Hugging
// Face tokenizer.json files whose model is BPE over the ByteLevel alphabet (Llama 3, GPT-2,
// Qwen, ...): vocabulary keys and merge symbols are strings of byte characters
// (byte_level.h), a piece of text is mapped byte -> character and merged by rank.
//
// Design for throughput (many threads, each encoding its own documents):
//  - Everything read at encode time is immutable after construction; each thread has
//    its own word cache (thread_local), so there are no locks and no shared writes.
//  - BPE runs on integer symbols: a symbol is a vocab key (a string), the 256 byte
//    characters are symbols, and a merge is (left symbol, right symbol) -> (rank,
//    merged symbol) in an open-addressing table. This is Python's string algorithm with
//    strings replaced by their unique symbol numbers.
//  - A piece already seen by this thread costs one hash, one probe and a copy of ids.
#include "data/tokenizer/byte_level_bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <climits>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"

namespace megatron::data::detail {

namespace {

constexpr int32_t kNoRank = INT32_MAX;
constexpr uint64_t kEmptyKey = ~uint64_t{0};

inline uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }

inline uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}

// Hash of a piece's bytes, 8 bytes at a time.
inline uint64_t hash_bytes(const uint8_t* p, int64_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, static_cast<size_t>(n));
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
  }
  return mix(h);
}

// (left, right) -> (rank, merged) for all merges; linear probing, load <= 1/2.
class PairTable {
 public:
  struct Slot {
    uint64_t key = kEmptyKey;
    int32_t rank = kNoRank;
    int32_t merged = -1;
  };

  void reserve(int64_t count) {
    int64_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    slots_.assign(static_cast<size_t>(cap), Slot{});
    mask_ = static_cast<uint64_t>(cap - 1);
  }
  // A repeated pair takes the later rank (Python's dict(zip(merges, ranks))).
  void put(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = pair_key(a, b);
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmptyKey || s.key == key) {
        s = {key, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmptyKey) return nullptr;
    }
  }

 private:
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

// A piece as the word cache sees it. Pieces of up to 16 bytes (almost all of them)
// are their own key: two zero-padded little-endian words, compared without memcmp.
// Longer ones are keyed by a hash and compared byte by byte.
struct PieceKey {
  uint64_t w0 = 0;
  uint64_t w1 = 0;
  uint64_t hash = 0;
};

static_assert(std::endian::native == std::endian::little, "PieceKey packs bytes little-endian");

inline PieceKey make_key(const uint8_t* p, int64_t n, const uint8_t* text_end) {
  PieceKey k;
  if (n > 16) {
    k.hash = hash_bytes(p, n);
    return k;
  }
  uint64_t w[2] = {0, 0};
  if (text_end - p >= 16) {
    std::memcpy(w, p, 16);  // bytes past the piece are still inside the text; masked below
    if (n < 8) {
      w[0] &= (uint64_t{1} << (8 * n)) - 1;
      w[1] = 0;
    } else if (n < 16) {
      w[1] &= (uint64_t{1} << (8 * (n - 8))) - 1;  // n == 8 clears w[1]
    }
  } else {
    std::memcpy(w, p, static_cast<size_t>(n));
  }
  k.w0 = w[0];
  k.w1 = w[1];
  k.hash = mix(w[0] * 0x9E3779B97F4A7C15ull + w[1] * 0xC2B2AE3D27D4EB4Full + static_cast<uint64_t>(n));
  return k;
}

// One thread's memo of piece bytes -> token ids for one tokenizer instance: open
// addressing over 32-byte slots that hold the key and up to 3 ids inline, so a hit on
// a common word touches one cache line.
class WordCache {
 public:
  static constexpr int64_t kMaxPieceBytes = 128;   // longer pieces are not cached
  static constexpr int64_t kMaxEntries = 1 << 18;  // then the cache starts over
  static constexpr int64_t kInitialSlots = 1 << 12;

  explicit WordCache(uint64_t owner) : owner_(owner) { clear(kInitialSlots); }
  uint64_t owner() const { return owner_; }

  // Appends the cached ids of the piece to `out` and returns true, or returns false.
  bool lookup(const uint8_t* p, int64_t n, const PieceKey& key, std::vector<int32_t>* out) const {
    for (uint64_t i = key.hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.length == 0) return false;
      if (s.length != n) continue;
      if (n <= 16) {
        if (s.w0 != key.w0 || s.w1 != key.w1) continue;
      } else if (s.w0 != key.hash || std::memcmp(keys_.data() + s.w1, p, static_cast<size_t>(n)) != 0) {
        continue;
      }
      if (s.count <= kInlineIds) {
        for (int k = 0; k < s.count; ++k) out->push_back(s.ids[k]);
      } else {
        const int32_t* ids = ids_.data() + s.ids[0];
        out->insert(out->end(), ids, ids + s.count);
      }
      return true;
    }
  }

  void insert(const uint8_t* p, int64_t n, const PieceKey& key, const int32_t* ids, int64_t count) {
    if (2 * (entries_ + 1) > static_cast<int64_t>(slots_.size())) {
      if (entries_ >= kMaxEntries) {
        clear(static_cast<int64_t>(slots_.size()));
      } else {
        grow();
      }
    }
    Slot s;
    s.length = static_cast<uint8_t>(n);
    s.count = static_cast<uint8_t>(count);
    if (n <= 16) {
      s.w0 = key.w0;
      s.w1 = key.w1;
    } else {
      s.w0 = key.hash;
      s.w1 = keys_.size();
      keys_.insert(keys_.end(), p, p + n);
    }
    if (count <= kInlineIds) {
      for (int64_t k = 0; k < count; ++k) s.ids[k] = ids[k];
    } else {
      s.ids[0] = static_cast<int32_t>(ids_.size());
      ids_.insert(ids_.end(), ids, ids + count);
    }
    place(s, key.hash);
    ++entries_;
  }

 private:
  static constexpr int kInlineIds = 3;
  struct Slot {
    uint64_t w0 = 0;                      // key bytes 0-7, or the hash of a piece longer than 16 bytes
    uint64_t w1 = 0;                      // key bytes 8-15, or the offset of a long piece's bytes in keys_
    int32_t ids[kInlineIds] = {0, 0, 0};  // the ids, or ids[0] = offset in ids_ when count > 3
    uint8_t length = 0;                   // piece bytes (<= kMaxPieceBytes); 0 = empty slot
    uint8_t count = 0;
    uint16_t unused = 0;
  };
  static_assert(sizeof(Slot) == 32);

  uint64_t hash_of(const Slot& s) const {
    if (s.length > 16) return s.w0;
    return mix(s.w0 * 0x9E3779B97F4A7C15ull + s.w1 * 0xC2B2AE3D27D4EB4Full + s.length);
  }
  void clear(int64_t slots) {
    slots_.assign(static_cast<size_t>(slots), Slot{});
    mask_ = static_cast<uint64_t>(slots - 1);
    keys_.clear();
    ids_.clear();
    entries_ = 0;
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = static_cast<uint64_t>(slots_.size() - 1);
    for (const Slot& s : old) {
      if (s.length != 0) place(s, hash_of(s));
    }
  }
  void place(const Slot& s, uint64_t hash) {
    uint64_t i = hash & mask_;
    while (slots_[i].length != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }

  uint64_t owner_;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  std::vector<uint8_t> keys_;
  std::vector<int32_t> ids_;
  int64_t entries_ = 0;
};

std::atomic<uint64_t> g_next_instance{1};

// The calling thread's cache for tokenizer `instance`. A thread keeps caches for the
// few tokenizers it used last; instance numbers are never reused, so a cache of a
// destroyed tokenizer is never consulted again (it is evicted in turn).
WordCache& thread_cache(uint64_t instance) {
  constexpr int kCachesPerThread = 4;
  thread_local std::array<std::unique_ptr<WordCache>, kCachesPerThread> caches;
  thread_local int next_victim = 0;
  for (auto& c : caches) {
    if (c && c->owner() == instance) return *c;
  }
  auto& slot = caches[static_cast<size_t>(next_victim)];
  next_victim = (next_victim + 1) % kCachesPerThread;
  slot = std::make_unique<WordCache>(instance);
  return *slot;
}

// A vocab key's bytes through byte_decoder, or false when a character stands for no
// byte (such a token is never produced by encode and cannot be decoded).
bool key_to_bytes(const std::string& key, std::string* bytes) {
  bytes->clear();
  const auto* p = reinterpret_cast<const uint8_t*>(key.data());
  const size_t n = key.size();
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n) {
      cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
      i += 2;
    } else {
      return false;  // every byte character is below U+0800
    }
    if (cp >= detail::kByteDecoder.size() || detail::kByteDecoder[cp] < 0) return false;
    bytes->push_back(static_cast<char>(detail::kByteDecoder[cp]));
  }
  return true;
}

std::string byte_char(int b) {
  std::string s;
  const uint32_t cp = detail::kByteEncoder[static_cast<size_t>(b)];
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

}  // namespace

struct ByteLevelBpe::Impl {
  std::string vocab_source;
  uint64_t instance = 0;
  bool ignore_merges = false;
  std::vector<int32_t> symbol_id;  // symbol -> vocab id
  std::array<int32_t, 256> byte_symbol{};
  std::unordered_map<std::string, int32_t> id_of_key;  // key -> vocab id
  PairTable pairs;
  // id -> bytes for decode(); offset -1 marks an id that is unused or has no byte form.
  std::vector<int64_t> decode_offset;
  std::vector<int32_t> decode_length;
  std::string decode_bytes;

  void bpe(const uint8_t* p, int64_t n, std::vector<int32_t>* symbols) const;
  void bpe_long(const uint8_t* p, int64_t n, std::vector<int32_t>* symbols) const;
  // The id of the piece's key when the vocab has it whole (ignore_merges), else -1.
  int32_t whole_piece_id(const uint8_t* p, int64_t n) const {
    std::string key;
    for (int64_t k = 0; k < n; ++k) key += byte_char(p[k]);
    auto it = id_of_key.find(key);
    return it == id_of_key.end() ? -1 : it->second;
  }
  void encode_piece(const uint8_t* p, int64_t n, const uint8_t* text_end, WordCache& cache,
                    std::vector<int32_t>* scratch, std::vector<int32_t>* out) const;
};

ByteLevelBpe::ByteLevelBpe(const std::vector<VocabEntry>& vocab, const std::vector<MergeRule>& merges,
                           const std::string& vocab_source, const std::string& merge_source, bool ignore_merges)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab_source = vocab_source;
  m.ignore_merges = ignore_merges;
  m.instance = g_next_instance.fetch_add(1);
  int32_t max_id = -1;
  for (const auto& e : vocab) max_id = std::max(max_id, e.id);

  std::unordered_map<std::string, int32_t> symbol_of;  // key -> symbol
  symbol_of.reserve(vocab.size() * 2);
  m.symbol_id.reserve(vocab.size());
  for (const auto& e : vocab) {
    symbol_of.emplace(e.token, static_cast<int32_t>(m.symbol_id.size()));
    m.symbol_id.push_back(e.id);
    if (ignore_merges) m.id_of_key.emplace(e.token, e.id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = symbol_of.find(byte_char(b));
    if (it == symbol_of.end()) {
      throw_error(vocab_source, ": no token for byte ", b, " ('", byte_char(b), "'): a byte-level vocab has all 256");
    }
    m.byte_symbol[static_cast<size_t>(b)] = it->second;
  }

  m.decode_offset.assign(static_cast<size_t>(max_id + 1), -1);
  m.decode_length.assign(static_cast<size_t>(max_id + 1), 0);
  std::string bytes;
  for (const auto& e : vocab) {
    if (!key_to_bytes(e.token, &bytes)) continue;
    m.decode_offset[static_cast<size_t>(e.id)] = static_cast<int64_t>(m.decode_bytes.size());
    m.decode_length[static_cast<size_t>(e.id)] = static_cast<int32_t>(bytes.size());
    m.decode_bytes += bytes;
  }

  m.pairs.reserve(static_cast<int64_t>(merges.size()));
  for (const auto& r : merges) {
    auto symbol = [&](const std::string& token, const char* what) {
      auto it = symbol_of.find(token);
      if (it == symbol_of.end()) {
        throw_error(merge_source, ":", r.line, ": ", what, " '", token, "' is not in the vocab file ", vocab_source);
      }
      return it->second;
    };
    const int32_t a = symbol(r.first, "merge symbol");
    const int32_t b = symbol(r.second, "merge symbol");
    const int32_t merged = symbol(r.first + r.second, "merge result");
    m.pairs.put(a, b, r.rank, merged);
  }
}

ByteLevelBpe::~ByteLevelBpe() = default;

// Python's bpe(): merge the lowest-ranked adjacent pair, all its non-overlapping
// occurrences left to right, until no adjacent pair has a rank. Ranks of unchanged
// pairs are kept between rounds; only pairs next to a merge are looked up again.
void ByteLevelBpe::Impl::bpe(const uint8_t* p, int64_t n, std::vector<int32_t>* symbols) const {
  constexpr int64_t kShort = 64;
  if (n > kShort) {
    bpe_long(p, n, symbols);
    return;
  }
  int32_t sym[kShort];
  int32_t rank[kShort];
  int32_t merged[kShort];
  bool changed[kShort];
  int64_t len = n;
  for (int64_t k = 0; k < len; ++k) sym[k] = byte_symbol[p[k]];
  for (int64_t k = 0; k + 1 < len; ++k) {
    const PairTable::Slot* s = pairs.find(sym[k], sym[k + 1]);
    rank[k] = s ? s->rank : kNoRank;
    merged[k] = s ? s->merged : -1;
  }
  while (len > 1) {
    int32_t best = kNoRank;
    for (int64_t k = 0; k + 1 < len; ++k) best = std::min(best, rank[k]);
    if (best == kNoRank) break;
    // A rank names one pair, so rank[k] == best means (sym[k], sym[k+1]) is the pair.
    int64_t w = 0;
    for (int64_t k = 0; k < len; ++w) {
      if (k + 1 < len && rank[k] == best) {
        sym[w] = merged[k];
        changed[w] = true;
        k += 2;
      } else {
        sym[w] = sym[k];
        rank[w] = rank[k];
        merged[w] = merged[k];
        changed[w] = false;
        k += 1;
      }
    }
    len = w;
    for (int64_t k = 0; k + 1 < len; ++k) {
      if (!changed[k] && !changed[k + 1]) continue;
      const PairTable::Slot* s = pairs.find(sym[k], sym[k + 1]);
      rank[k] = s ? s->rank : kNoRank;
      merged[k] = s ? s->merged : -1;
    }
  }
  symbols->assign(sym, sym + len);
}

// The same algorithm in O(n log n) for long pieces (a paragraph of CJK text is one
// \p{L}+ piece): a doubly linked list of symbols and a heap of candidate pairs keyed
// by (rank, position). One round pops every entry of the current lowest rank in
// position order (= Python's left-to-right scan; an entry whose symbols changed is
// stale and skipped). Pairs created by a round are pushed only after it, because a
// new pair may have a lower rank than the round's and Python merges all of the
// round's occurrences first.
void ByteLevelBpe::Impl::bpe_long(const uint8_t* p, int64_t n, std::vector<int32_t>* symbols) const {
  struct Entry {
    int32_t rank;
    int32_t pos;
    int32_t left;
    int32_t right;
    int32_t merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> sym(static_cast<size_t>(n)), next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    sym[k] = byte_symbol[p[k]];
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
    prev[k] = static_cast<int32_t>(k - 1);
  }
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::vector<Entry> created;
  auto candidate = [&](int32_t pos, std::vector<Entry>* into) {
    if (pos < 0 || next[pos] < 0) return;
    const PairTable::Slot* s = pairs.find(sym[pos], sym[next[pos]]);
    if (s) into->push_back({s->rank, pos, sym[pos], sym[next[pos]], s->merged});
  };
  for (int32_t k = 0; k + 1 < n; ++k) candidate(k, &created);
  for (const Entry& e : created) heap.push(e);
  created.clear();
  while (!heap.empty()) {
    const int32_t round = heap.top().rank;
    while (!heap.empty() && heap.top().rank == round) {
      const Entry e = heap.top();
      heap.pop();
      const int32_t q = next[e.pos];
      if (sym[e.pos] != e.left || q < 0 || sym[q] != e.right) continue;  // stale
      sym[e.pos] = e.merged;
      next[e.pos] = next[q];
      if (next[q] >= 0) prev[next[q]] = e.pos;
      sym[q] = -1;
      candidate(prev[e.pos], &created);
      candidate(e.pos, &created);
    }
    for (const Entry& e : created) heap.push(e);
    created.clear();
  }
  symbols->clear();
  for (int32_t k = 0; k >= 0; k = next[k]) symbols->push_back(sym[k]);
}

void ByteLevelBpe::Impl::encode_piece(const uint8_t* p, int64_t n, const uint8_t* text_end, WordCache& cache,
                                      std::vector<int32_t>* scratch, std::vector<int32_t>* out) const {
  if (n == 1) {
    out->push_back(symbol_id[byte_symbol[p[0]]]);
    return;
  }
  const bool cacheable = n <= WordCache::kMaxPieceBytes;
  PieceKey key;
  if (cacheable) {
    key = make_key(p, n, text_end);
    if (cache.lookup(p, n, key, out)) return;
  }
  const int32_t whole = ignore_merges ? whole_piece_id(p, n) : -1;
  if (whole >= 0) {
    scratch->assign(1, whole);
  } else {
    bpe(p, n, scratch);
    for (int32_t& s : *scratch) s = symbol_id[s];
  }
  if (cacheable) cache.insert(p, n, key, scratch->data(), static_cast<int64_t>(scratch->size()));
  out->insert(out->end(), scratch->begin(), scratch->end());
}

void ByteLevelBpe::encode_piece(std::string_view text, int64_t offset, int64_t length,
                                std::vector<int32_t>* out) const {
  thread_local std::vector<int32_t> scratch;
  const auto* base = reinterpret_cast<const uint8_t*>(text.data());
  impl_->encode_piece(base + offset, length, base + text.size(), thread_cache(impl_->instance), &scratch, out);
}

bool ByteLevelBpe::append_bytes(int32_t id, std::string* out) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.decode_offset.size() || m.decode_offset[static_cast<size_t>(id)] < 0) {
    return false;
  }
  out->append(m.decode_bytes, static_cast<size_t>(m.decode_offset[static_cast<size_t>(id)]),
              static_cast<size_t>(m.decode_length[static_cast<size_t>(id)]));
  return true;
}

}  // namespace megatron::data::detail
