// tessera tokenizer internals: HF `pre_tokenizer` section: Split (regex or string, all five
// behaviours, invert), ByteLevel, Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation,
// Sequence. A pre-tokenizer turns a list of pieces into a finer list of pieces ("words").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::tok {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // first_segment: the pieces come from the very start of the input (Metaspace prepend "first").
  virtual void PreTokenize(std::vector<std::string>* pieces, bool first_segment) const = 0;
};

// nullptr for JSON null. Throws Error(kUnsupported) for unknown types.
std::unique_ptr<PreTokenizer> MakePreTokenizer(const nlohmann::json& j);

}  // namespace tessera::tok
