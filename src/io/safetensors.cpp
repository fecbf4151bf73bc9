// tessera io: safetensors reader (see safetensors.h). A file is an 8-byte little-endian header
// length N, N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets}, "__metadata__": {..}},
// then the data section. Everything is checked before a view is handed out, because a bad
// offset in a multi-GB mapping would otherwise surface as garbage weights or a SIGSEGV later.
#include "io/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string_view>

#include "core/error.h"
#include "io/hf_config.h"
#include "io/json_strict.h"

namespace tessera {
namespace {

// The reference implementation refuses headers above 100 MB; so do we (a corrupt length would
// otherwise make us parse most of a weight file as JSON).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Tags of the safetensors spec our DType cannot hold: valid files, but unsupported here.
bool IsSpecDTypeTag(const std::string& tag) {
  static const char* kTags[] = {"F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
                                "I16",     "U16",     "U32",     "U64",     "C64"};
  for (const char* t : kTags)
    if (tag == t) return true;
  return false;
}

uint64_t ReadU64Le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON value as a non-negative integer (safetensors writes shapes and offsets as unsigned).
bool AsU64(const nlohmann::json& v, uint64_t* out) {
  if (v.is_number_unsigned()) { *out = v.get<uint64_t>(); return true; }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) { *out = static_cast<uint64_t>(v.get<int64_t>()); return true; }
  return false;
}

void ParseEntry(const std::string& file, const std::string& name, const nlohmann::json& e,
                const uint8_t* data, uint64_t data_size, TensorView* tv, uint64_t* begin) {
  if (!e.is_object()) Fail(ErrorKind::kCorrupt, "{}: tensor '{}': entry is not an object", file, name);
  auto dt = e.find("dtype"), sh = e.find("shape"), off = e.find("data_offsets");
  if (dt == e.end() || sh == e.end() || off == e.end())
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': entry needs dtype, shape and data_offsets", file, name);
  if (!dt->is_string()) Fail(ErrorKind::kCorrupt, "{}: tensor '{}': dtype is not a string", file, name);
  const std::string& tag = dt->get_ref<const std::string&>();
  if (!ParseSafetensorsDType(tag, &tv->dtype)) {
    if (IsSpecDTypeTag(tag)) Fail(ErrorKind::kUnsupported, "{}: tensor '{}': unsupported dtype {}", file, name, tag);
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': unknown dtype '{}'", file, name, tag);
  }
  if (!sh->is_array()) Fail(ErrorKind::kCorrupt, "{}: tensor '{}': shape is not an array", file, name);
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t v;
    if (!AsU64(d, &v) || v > static_cast<uint64_t>(INT64_MAX))
      Fail(ErrorKind::kCorrupt, "{}: tensor '{}': shape {} has a dimension that is not a non-negative integer", file, name, sh->dump());
    if (__builtin_mul_overflow(numel, v, &numel))
      Fail(ErrorKind::kCorrupt, "{}: tensor '{}': shape {} overflows", file, name, sh->dump());
    tv->shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(tv->dtype)), &nbytes) ||
      numel > static_cast<uint64_t>(INT64_MAX))
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': shape {} overflows", file, name, sh->dump());
  uint64_t b, en;
  if (!off->is_array() || off->size() != 2 || !AsU64((*off)[0], &b) || !AsU64((*off)[1], &en))
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': data_offsets must be [begin, end] non-negative integers", file, name);
  if (b > en) Fail(ErrorKind::kCorrupt, "{}: tensor '{}': data_offsets [{}, {}] has begin > end", file, name, b, en);
  if (en > data_size)
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': data_offsets [{}, {}] beyond the data section ({} bytes); file truncated?",
         file, name, b, en, data_size);
  if (en - b != nbytes)
    Fail(ErrorKind::kCorrupt, "{}: tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] hold {}",
         file, name, tag, sh->dump(), nbytes, b, en, en - b);
  tv->name = name;
  tv->data = data + b;
  tv->nbytes = static_cast<size_t>(nbytes);
  tv->file = file;
  *begin = b;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(std::make_unique<MappedFile>(path)) {
  const uint8_t* base = file_->data();
  const uint64_t size = file_->size();
  if (size < 8) Fail(ErrorKind::kCorrupt, "{}: {} bytes is too short for a safetensors file", path, size);
  uint64_t n = ReadU64Le(base);
  if (n > size - 8)
    Fail(ErrorKind::kCorrupt, "{}: header length {} exceeds the file ({} bytes); truncated or not safetensors",
         path, n, size);
  if (n > kMaxHeaderBytes) Fail(ErrorKind::kCorrupt, "{}: header length {} is implausibly large", path, n);
  if (n < 2 || base[8] != '{') Fail(ErrorKind::kCorrupt, "{}: header is not a JSON object", path);
  std::string_view text(reinterpret_cast<const char*>(base + 8), n);
  nlohmann::json header = io_internal::ParseJsonStrict(text, path + ": header");
  if (!header.is_object()) Fail(ErrorKind::kCorrupt, "{}: header is not a JSON object", path);

  const uint8_t* data = base + 8 + n;
  const uint64_t data_size = size - 8 - n;
  std::vector<std::pair<uint64_t, const TensorView*>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) Fail(ErrorKind::kCorrupt, "{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          Fail(ErrorKind::kCorrupt, "{}: __metadata__ value of '{}' is not a string", path, k);
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (name.empty()) Fail(ErrorKind::kCorrupt, "{}: tensor with an empty name", path);
    TensorView tv;
    uint64_t begin = 0;
    ParseEntry(path, name, entry, data, data_size, &tv, &begin);
    auto it = tensors_.emplace(name, std::move(tv)).first;
    spans.emplace_back(begin, &it->second);
  }
  // Tensors must tile the data section exactly, as the reference reader demands: in order, no
  // overlap, no gap, nothing after the last one. Empty tensors take no room and may sit anywhere.
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second->nbytes < b.second->nbytes;
  });
  uint64_t end = 0;
  const TensorView* prev = nullptr;
  for (const auto& [b, tv] : spans) {
    if (tv->nbytes == 0) continue;
    if (b < end)
      Fail(ErrorKind::kCorrupt, "{}: tensor '{}' (bytes {}..{}) overlaps tensor '{}' (ending at {})", path,
           tv->name, b, b + tv->nbytes, prev->name, end);
    if (b > end)
      Fail(ErrorKind::kCorrupt, "{}: tensor '{}' starts at byte {} of the data section but the previous "
           "tensor ends at {} (gap)", path, tv->name, b, end);
    end = b + tv->nbytes;
    prev = tv;
  }
  if (end != data_size)
    Fail(ErrorKind::kCorrupt, "{}: data section is {} bytes but the tensors cover {} (trailing bytes)", path,
         data_size, end);
}

namespace {

bool IsSafeRelativeName(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : std::filesystem::path(name))
    if (part == "..") return false;
  return true;
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(ErrorKind::kNotFound, "{}: checkpoint directory not found", dir);
  const std::string index_path = JoinPath(dir, "model.safetensors.index.json");
  // Shard name -> tensors the index assigns to it (empty when there is no index).
  std::map<std::string, std::set<std::string>> assigned;
  std::vector<std::string> shard_names;
  bool have_index = FileExists(index_path);
  if (have_index) {
    nlohmann::json index = io_internal::ParseJsonStrict(ReadFileText(index_path), index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      Fail(ErrorKind::kCorrupt, "{}: no \"weight_map\" object", index_path);
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        Fail(ErrorKind::kCorrupt, "{}: weight_map entry of '{}' is not a string", index_path, tensor);
      const std::string& s = shard.get_ref<const std::string&>();
      if (!IsSafeRelativeName(s))
        Fail(ErrorKind::kCorrupt, "{}: tensor '{}' names shard '{}' outside the directory", index_path, tensor, s);
      if (assigned.find(s) == assigned.end()) shard_names.push_back(s);
      assigned[s].insert(tensor);
    }
    if (shard_names.empty()) Fail(ErrorKind::kCorrupt, "{}: weight_map lists no tensors", index_path);
    std::sort(shard_names.begin(), shard_names.end());
    for (const auto& s : shard_names)
      if (!FileExists(JoinPath(dir, s)))
        Fail(ErrorKind::kNotFound, "{}: shard '{}' (holding e.g. tensor '{}') does not exist", index_path, s,
             *assigned[s].begin());
  } else if (FileExists(JoinPath(dir, "model.safetensors"))) {
    shard_names.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".safetensors" && FileExists(entry.path().string()))
        shard_names.push_back(entry.path().filename().string());
    std::sort(shard_names.begin(), shard_names.end());
    if (shard_names.empty())
      Fail(ErrorKind::kNotFound, "{}: no model.safetensors.index.json, model.safetensors or *.safetensors", dir);
  }

  // Open everything first so that a tensor stored twice is reported as such, whatever the index says.
  for (const auto& s : shard_names) {
    std::string path = JoinPath(dir, s);
    shards_.push_back(std::make_unique<SafetensorsFile>(path));
    files_.push_back(path);
    for (const auto& [name, tv] : shards_.back()->tensors()) {
      auto [it, inserted] = index_.emplace(name, &tv);
      if (!inserted)
        Fail(ErrorKind::kCorrupt, "{}: tensor '{}' is in both {} and {}", dir, name, it->second->file, path);
    }
  }
  if (!have_index) return;
  std::map<std::string, std::string> shard_of;  // tensor -> shard, as the index says
  for (const auto& [s, names] : assigned)
    for (const auto& name : names) shard_of[name] = s;
  for (size_t i = 0; i < shard_names.size(); ++i) {
    for (const auto& [name, tv] : shards_[i]->tensors()) {
      auto it = shard_of.find(name);
      if (it == shard_of.end())
        Fail(ErrorKind::kCorrupt, "{}: tensor '{}' is in shard {} but not in the index", index_path, name,
             shard_names[i]);
      if (it->second != shard_names[i])
        Fail(ErrorKind::kCorrupt, "{}: tensor '{}' is in shard {} but the index assigns it to {}", index_path,
             name, shard_names[i], it->second);
    }
    for (const auto& name : assigned[shard_names[i]])
      if (!shards_[i]->tensors().count(name))
        Fail(ErrorKind::kCorrupt, "{}: tensor '{}' is assigned to shard {} but that shard does not hold it",
             index_path, name, shard_names[i]);
  }
}

const TensorView* CheckpointReader::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& CheckpointReader::Get(const std::string& name) const {
  const TensorView* tv = Find(name);
  if (tv == nullptr) Fail(ErrorKind::kNotFound, "checkpoint has no tensor '{}'", name);
  return *tv;
}

std::vector<std::string> CheckpointReader::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, tv] : index_) names.push_back(name);
  return names;
}

}  // namespace tessera
