// Hugging Face normalizers (see the header).
#include "data/tokenizer/hf_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"

namespace megatron::data::detail {

namespace {

void unicode_normalize(std::string* text, utf8proc_option_t options, const std::string& source) {
  if (text->empty()) return;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                                          static_cast<utf8proc_ssize_t>(text->size()), &out, options);
  if (n < 0) throw_error(source, ": normalizer: ", utf8proc_errmsg(n));
  text->assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
}

}  // namespace

void normalize(const std::vector<NormalizerStep>& steps, std::string* text, const std::string& source) {
  for (const NormalizerStep& s : steps) {
    switch (s.kind) {
      case NormalizerStep::Kind::kNfc:
        unicode_normalize(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE), source);
        break;
      case NormalizerStep::Kind::kNfd:
        unicode_normalize(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE), source);
        break;
      case NormalizerStep::Kind::kNfkc:
        unicode_normalize(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT),
                          source);
        break;
      case NormalizerStep::Kind::kNfkd:
        unicode_normalize(text, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT),
                          source);
        break;
      case NormalizerStep::Kind::kReplace: {
        std::string out;
        s.pattern->split(*text, /*keep_gaps=*/true, [&](int64_t o, int64_t n, bool matched) {
          if (matched) {
            out += s.content;
          } else {
            out.append(*text, static_cast<size_t>(o), static_cast<size_t>(n));
          }
        });
        text->swap(out);
        break;
      }
      case NormalizerStep::Kind::kPrepend:
        if (!text->empty()) text->insert(0, s.content);
        break;
    }
  }
}

}  // namespace megatron::data::detail
