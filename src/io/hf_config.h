// tessera io: Hugging Face model directories: config.json (with a nested text_config for
// multimodal wrappers such as Qwen3.5), generation_config.json and tokenizer_config.json.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <functional>
#include <string>

namespace tessera {

// Reads and parses a JSON file; throws Error(kNotFound) / Error(kCorrupt) naming the file and,
// for a parse error, the 0-based byte offset where parsing stopped.
nlohmann::json ReadJsonFile(const std::string& path);

struct HfModelDir {
  std::string dir;
  nlohmann::json config;             // config.json as written
  // config["text_config"]'s keys merged over the top level's (the inner ones win, the
  // "text_config" key itself dropped); a copy of config when there is no text_config.
  nlohmann::json text_config;
  nlohmann::json generation_config;  // {} when the file is absent
  nlohmann::json tokenizer_config;   // {} when the file is absent

  // The first entry of "architectures" of config.json, "" when absent.
  std::string Architecture() const;
  // text_config["model_type"], falling back to config["model_type"].
  std::string ModelType() const;
};

// Loads config.json (required) and the optional generation / tokenizer configs.
HfModelDir LoadHfModelDir(const std::string& dir);

// True for a regular file (or a symlink to one, as in the Hugging Face cache); false for a
// directory or nothing.
bool FileExists(const std::string& path);
// "dir/name"; `name` alone when dir is empty or name is absolute; no doubled '/'.
std::string JoinPath(const std::string& dir, const std::string& name);
// Whole file as bytes; throws Error(kNotFound) when missing, kCorrupt when unreadable.
std::string ReadFileText(const std::string& path);
// The file's bytes in order, handed to `sink` in pieces of at most `chunk` bytes (the same errors as
// ReadFileText; what sink throws propagates, the file closed).
void ReadFileChunks(const std::string& path, size_t chunk, const std::function<void(const char*, size_t)>& sink);

}  // namespace tessera
