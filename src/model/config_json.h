// tessera model: typed reads of HF config.json values for the config parsers (model_config.cpp for
// the Qwen families, config_diffusion_gemma.cpp). Every failure is Error(kCorrupt) naming the file
// (`where`) and the key, so a bad config never surfaces later as an out-of-bounds read.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hf_config.h"

namespace tessera::config_json {

using json = nlohmann::json;

// The value of `key`, nullptr when absent or null (HF writes null for "unset").
inline const json* Lookup(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline int64_t GetInt(const json& j, const char* key, const std::string& where) {
  const json* v = Lookup(j, key);
  if (!v) Fail(ErrorKind::kCorrupt, "{}: missing required key \"{}\"", where, key);
  if (!v->is_number_integer())
    Fail(ErrorKind::kCorrupt, "{}: key \"{}\" must be an integer, got {}", where, key, v->dump());
  return v->get<int64_t>();
}

inline int64_t GetInt(const json& j, const char* key, int64_t fallback, const std::string& where) {
  return Lookup(j, key) ? GetInt(j, key, where) : fallback;
}

inline double GetNumber(const json& j, const char* key, double fallback, const std::string& where) {
  const json* v = Lookup(j, key);
  if (!v) return fallback;
  if (!v->is_number())
    Fail(ErrorKind::kCorrupt, "{}: key \"{}\" must be a number, got {}", where, key, v->dump());
  return v->get<double>();
}

inline bool GetBool(const json& j, const char* key, bool fallback, const std::string& where) {
  const json* v = Lookup(j, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    Fail(ErrorKind::kCorrupt, "{}: key \"{}\" must be true or false, got {}", where, key, v->dump());
  return v->get<bool>();
}

// A size read from the config must be positive (a zero or negative one would surface later as an
// out-of-bounds read or a division by zero).
inline void RequirePositive(int64_t v, const char* key, const std::string& where) {
  if (v <= 0) Fail(ErrorKind::kCorrupt, "{}: \"{}\" must be positive, got {}", where, key, v);
}

inline std::string GetString(const json& j, const char* key, const std::string& fallback, const std::string& where) {
  const json* v = Lookup(j, key);
  if (!v) return fallback;
  if (!v->is_string()) Fail(ErrorKind::kCorrupt, "{}: key \"{}\" must be a string, got {}", where, key, v->dump());
  return v->get<std::string>();
}

// Appends an id or a list of ids (eos_token_id may be either).
inline void AddTokenIds(const json* v, std::vector<int64_t>* out, const std::string& where, const char* key) {
  if (!v) return;
  if (v->is_number_integer()) {
    out->push_back(v->get<int64_t>());
  } else if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer())
        Fail(ErrorKind::kCorrupt, "{}: \"{}\" must hold integers, got {}", where, key, e.dump());
      out->push_back(e.get<int64_t>());
    }
  } else {
    Fail(ErrorKind::kCorrupt, "{}: \"{}\" must be an integer or a list, got {}", where, key, v->dump());
  }
}

}  // namespace tessera::config_json
