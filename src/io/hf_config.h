// tessera io: Hugging Face model directories: config.json (with a nested text_config for
// multimodal wrappers such as Qwen3.5), generation_config.json and tokenizer_config.json.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tessera {

// Reads and parses a JSON file; throws Error(kNotFound) / Error(kCorrupt) naming the file and,
// for a parse error, the byte offset.
nlohmann::json ReadJsonFile(const std::string& path);

struct HfModelDir {
  std::string dir;
  nlohmann::json config;             // config.json as written
  nlohmann::json text_config;        // config["text_config"] merged over the top level, or config
  nlohmann::json generation_config;  // {} when the file is absent
  nlohmann::json tokenizer_config;   // {} when the file is absent

  // The first entry of "architectures" of config.json, "" when absent.
  std::string Architecture() const;
  // text_config["model_type"], falling back to config["model_type"].
  std::string ModelType() const;
};

// Loads config.json (required) and the optional generation / tokenizer configs.
HfModelDir LoadHfModelDir(const std::string& dir);

bool FileExists(const std::string& path);
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace tessera
