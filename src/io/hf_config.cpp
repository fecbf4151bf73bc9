// tessera io: Hugging Face model directory configs (see hf_config.h).
#include "io/hf_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "io/json_strict.h"

namespace tessera {

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || (!name.empty() && name[0] == '/')) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

void ReadFileChunks(const std::string& path, size_t chunk, const std::function<void(const char*, size_t)>& sink) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) Fail(ErrorKind::kNotFound, "{}: no such file", path);
    Fail(ErrorKind::kCorrupt, "{}: cannot open: {}", path, std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::unique_ptr<char[]> buf(new char[chunk]);
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail(ErrorKind::kCorrupt, "{}: cannot read: {}", path, std::strerror(errno));
    if (n == 0) return;
    sink(buf.get(), static_cast<size_t>(n));
  }
}

std::string ReadFileText(const std::string& path) {
  std::string out;
  ReadFileChunks(path, 1 << 16, [&](const char* p, size_t n) { out.append(p, n); });
  return out;
}

nlohmann::json ReadJsonFile(const std::string& path) {
  std::string text = ReadFileText(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    Fail(ErrorKind::kCorrupt, "{}: invalid JSON at byte {}: {}", path, e.byte > 0 ? e.byte - 1 : 0,
         io_internal::JsonErrorText(e));
  }
}

namespace {

// An optional JSON object file: {} when absent, an error when present but not an object.
nlohmann::json ReadOptionalObject(const std::string& path) {
  if (!FileExists(path)) return nlohmann::json::object();
  nlohmann::json j = ReadJsonFile(path);
  if (!j.is_object()) Fail(ErrorKind::kCorrupt, "{}: not a JSON object", path);
  return j;
}

}  // namespace

HfModelDir LoadHfModelDir(const std::string& dir) {
  HfModelDir m;
  m.dir = dir;
  const std::string config_path = JoinPath(dir, "config.json");
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) Fail(ErrorKind::kNotFound, "model directory {}: no such directory", dir);
  if (!std::filesystem::is_directory(dir, ec))
    Fail(ErrorKind::kNotFound, "model directory {}: not a directory (a Hugging Face model directory holds "
         "config.json and the *.safetensors weights)", dir);
  if (!FileExists(config_path))
    Fail(ErrorKind::kNotFound, "{}: no such file: {} is not a Hugging Face model directory (no config.json)",
         config_path, dir);
  m.config = ReadJsonFile(config_path);
  if (!m.config.is_object()) Fail(ErrorKind::kCorrupt, "{}: not a JSON object", config_path);
  // Multimodal wrappers (Qwen3.5) keep the language model's hyper-parameters in text_config while
  // some keys (tie_word_embeddings, torch_dtype...) stay at the top: merge, inner keys winning.
  m.text_config = m.config;
  m.text_config.erase("text_config");
  if (auto it = m.config.find("text_config"); it != m.config.end()) {
    if (!it->is_object()) Fail(ErrorKind::kCorrupt, "{}: \"text_config\" is not an object", config_path);
    for (const auto& [k, v] : it->items()) m.text_config[k] = v;
  }
  m.generation_config = ReadOptionalObject(JoinPath(dir, "generation_config.json"));
  m.tokenizer_config = ReadOptionalObject(JoinPath(dir, "tokenizer_config.json"));
  return m;
}

std::string HfModelDir::Architecture() const {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
  return (*it)[0].get<std::string>();
}

std::string HfModelDir::ModelType() const {
  for (const auto* j : {&text_config, &config}) {
    if (!j->is_object()) continue;
    auto it = j->find("model_type");
    if (it != j->end() && it->is_string()) return it->get<std::string>();
  }
  return "";
}

}  // namespace tessera
