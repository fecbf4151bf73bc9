// tessera fuzz: tokenizer.json loading (src/tokenizer: the model, normalizers, pre-tokenizers,
// post-processor, decoders, added tokens) and, on a tokenizer that loads, an encode / decode round
// trip of a text. Input: tokenizer.json bytes, a NUL byte, the text. A model directory is a file
// anyone can hand the server, and the text is the client's.
//
// Loading must end in a Tokenizer or tessera::Error. On a loaded tokenizer: Encode may refuse only
// with Error(kInvalidArgument) (invalid UTF-8: a 400); every id it returns is in [0, vocab_size)
// and decodes without an error; the IncrementalDecoder's pieces add up to Decode's text
// (tokenizer.h), which streaming relies on. Keep inputs small (-max_len): the seeds are the
// byte tokenizer and hand-made BPE files of a few KB.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

// Whether some 17 consecutive ids could all be held back by the IncrementalDecoder: each either a
// "<0xXX>" byte token or one whose text alone is not whole UTF-8 (ends in U+FFFD). A bound, so
// the check above stays exact for every other input.
bool HeldBackPast16(const tessera::Tokenizer& tok, const std::vector<int32_t>& ids) {
  size_t run = 0;
  for (int32_t id : ids) {
    const std::string t = tok.IdToToken(id), text = tok.Decode({id});
    const bool byte_token = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>';
    const bool partial = text.find("\xEF\xBF\xBD") != std::string::npos;
    run = (byte_token || partial) ? run + 1 : 0;
    if (run > 16) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string json(in.substr(0, nul));
  const std::string_view text = nul == std::string_view::npos ? std::string_view("Hello, world! 123") : in.substr(nul + 1);

  std::unique_ptr<tessera::Tokenizer> tok;
  try {
    tok = tessera::Tokenizer::FromJson(json, "");
  } catch (const tessera::Error&) {
    return 0;  // refused: the server does not start, naming the problem
  }
  for (bool special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tok->Encode(text, special);
    } catch (const tessera::Error& e) {
      if (e.kind() != tessera::ErrorKind::kInvalidArgument) throw;
      continue;
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) abort();
    const std::string whole = tok->Decode(ids, false);
    (void)tok->Decode(ids, true);
    tessera::IncrementalDecoder inc(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += inc.Push(id);
    streamed += inc.Flush();
    // IncrementalDecoder gives text out anyway after 16 ids held back (garbage that never forms a
    // character, tokenizer.h): only then may the pieces differ from Decode.
    if (streamed != whole && !HeldBackPast16(*tok, ids)) abort();
    for (int32_t id : ids) (void)tok->TokenBytes(id);
  }
  return 0;
}
