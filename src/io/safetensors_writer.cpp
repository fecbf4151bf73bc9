// tessera io: safetensors writer (see safetensors_writer.h).
#include "io/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_config.h"

namespace tessera {
namespace {

const char* SafetensorsTag(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kBool: return "BOOL";
    case DType::kF64: return "F64";
  }
  Fail(ErrorKind::kInternal, "no safetensors tag for dtype {}", static_cast<int>(t));
}

void CheckSpecs(const std::string& where, const std::vector<TensorSpec>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      Fail(ErrorKind::kInvalidArgument, "{}: invalid tensor name '{}'", where, t.name);
    if (!seen.insert(t.name).second)
      Fail(ErrorKind::kInvalidArgument, "{}: tensor '{}' declared twice", where, t.name);
    for (int64_t d : t.shape)
      if (d < 0) Fail(ErrorKind::kInvalidArgument, "{}: tensor '{}' has a negative dimension", where, t.name);
    (void)t.nbytes();
  }
}

class OutFile {
 public:
  explicit OutFile(const std::string& path) : path_(path) {
    fp_ = std::fopen(path.c_str(), "wb");
    if (fp_ == nullptr) Fail(ErrorKind::kNotFound, "{}: cannot create: {}", path, std::strerror(errno));
  }
  ~OutFile() {
    if (fp_ != nullptr) std::fclose(fp_);
  }
  void Put(const void* p, size_t n) {
    if (n > 0 && std::fwrite(p, 1, n, fp_) != n)
      Fail(ErrorKind::kCorrupt, "{}: write failed: {}", path_, std::strerror(errno));
  }
  void Close() {
    FILE* fp = fp_;
    fp_ = nullptr;
    if (std::fclose(fp) != 0) Fail(ErrorKind::kCorrupt, "{}: write failed: {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  FILE* fp_ = nullptr;
};

}  // namespace

size_t TensorSpec::nbytes() const {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      Fail(ErrorKind::kInvalidArgument, "tensor '{}': invalid or overflowing shape", name);
  return static_cast<size_t>(n);
}

void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors,
                          const TensorProducer& produce, const std::map<std::string, std::string>& metadata) {
  CheckSpecs(path, tensors);
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t n = t.nbytes();
    header[t.name] = {{"dtype", SafetensorsTag(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section 8-byte aligned, as the reference pads
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const std::string tmp = path + ".tmp";
  try {
    OutFile out(tmp);
    out.Put(len, 8);
    out.Put(text.data(), text.size());
    for (const auto& t : tensors) {
      size_t want = t.nbytes(), got = 0;
      TensorSink sink = [&](const void* p, size_t n) {
        if (n > want - got)
          Fail(ErrorKind::kInvalidArgument, "{}: producer gave more than the {} bytes of tensor '{}'", path, want, t.name);
        out.Put(p, n);
        got += n;
      };
      produce(t, sink);
      if (got != want)
        Fail(ErrorKind::kInvalidArgument, "{}: producer gave {} of the {} bytes of tensor '{}'", path, got, want, t.name);
    }
    out.Close();
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) Fail(ErrorKind::kCorrupt, "{}: cannot rename from {}: {}", path, tmp, ec.message());
}

void WriteSafetensorsFile(const std::string& path, const std::vector<TensorSpec>& tensors,
                          const std::vector<std::string>& bytes, const std::map<std::string, std::string>& metadata) {
  if (bytes.size() != tensors.size())
    Fail(ErrorKind::kInvalidArgument, "{}: {} tensors but {} byte buffers", path, tensors.size(), bytes.size());
  std::map<std::string, const std::string*> by_name;
  for (size_t i = 0; i < tensors.size(); ++i) by_name[tensors[i].name] = &bytes[i];
  WriteSafetensorsFile(path, tensors, [&](const TensorSpec& t, const TensorSink& sink) {
    const std::string* b = by_name.at(t.name);
    sink(b->data(), b->size());
  }, metadata);
}

SafetensorsWriter::SafetensorsWriter(std::string dir, size_t max_shard_bytes)
    : dir_(std::move(dir)), max_shard_bytes_(max_shard_bytes) {}

void SafetensorsWriter::Add(TensorSpec spec) { tensors_.push_back(std::move(spec)); }

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape) {
  Add(TensorSpec{std::move(name), dtype, std::move(shape)});
}

std::vector<std::string> SafetensorsWriter::Write(const TensorProducer& produce) {
  CheckSpecs(dir_, tensors_);
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (max_shard_bytes_ == 0) {
    WriteSafetensorsFile(JoinPath(dir_, "model.safetensors"), tensors_, produce, metadata_);
    return {"model.safetensors"};
  }
  // Greedy split in declaration order.
  std::vector<std::vector<TensorSpec>> shards(1);
  size_t in_shard = 0;
  uint64_t total = 0;
  for (const auto& t : tensors_) {
    size_t n = t.nbytes();
    if (!shards.back().empty() && in_shard + n > max_shard_bytes_) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += n;
    total += n;
  }
  std::vector<std::string> names;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    WriteSafetensorsFile(JoinPath(dir_, name), shards[i], produce, metadata_);
    for (const auto& t : shards[i]) weight_map[t.name] = name;
    names.push_back(name);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_path = JoinPath(dir_, "model.safetensors.index.json");
  FILE* fp = std::fopen(index_path.c_str(), "wb");
  if (fp == nullptr) Fail(ErrorKind::kNotFound, "{}: cannot create: {}", index_path, std::strerror(errno));
  std::string text = index.dump(2) + "\n";
  bool ok = std::fwrite(text.data(), 1, text.size(), fp) == text.size();
  ok = (std::fclose(fp) == 0) && ok;
  if (!ok) Fail(ErrorKind::kCorrupt, "{}: write failed", index_path);
  names.push_back("model.safetensors.index.json");
  return names;
}

}  // namespace tessera
