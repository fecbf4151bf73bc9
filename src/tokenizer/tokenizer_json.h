// tessera tokenizer internals: a faster reader for tokenizer.json. The vocab (up to 200k entries)
// and merges (up to 450k) are streamed straight into flat vectors through nlohmann's SAX interface
// instead of becoming a DOM of std::map nodes; everything else becomes an ordinary json DOM.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::tok {

struct MergeEntry {
  std::string a, b;  // for the "a b" string form: a holds the whole string, b is unused
  bool string_form = false;
};

struct TokenizerJson {
  nlohmann::json doc;  // the file; model.vocab / model.merges are left empty when extracted
  bool extracted = false;
  std::vector<std::pair<std::string, int64_t>> vocab;  // in file order
  std::vector<MergeEntry> merges;                      // in file order (= rank)
};

// Throws Error(kCorrupt) for malformed JSON (naming the position).
TokenizerJson ParseTokenizerJson(const std::string& text);

}  // namespace tessera::tok
