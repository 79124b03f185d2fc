// Text for JSON answers: a tokenizer's decode() gives bytes, and a token boundary may split a
// UTF-8 character (GPT-2's byte-level BPE does), so what goes into a JSON string is first made
// valid, as Python's bytes.decode("utf-8", errors="replace") makes it (Megatron's segments).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace megatron::serve {

// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD (Unicode's "substitution of
// maximal subparts", which Python's "replace" error handler follows).
std::string utf8_replace_invalid(std::string_view bytes);

// Code points of valid UTF-8 text (Python's len() of the str).
size_t utf8_length(std::string_view text);

}  // namespace megatron::serve
