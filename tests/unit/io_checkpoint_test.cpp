// tessera tests: sharded checkpoints (model.safetensors.index.json): every inconsistency between
// the index and the shards is an error naming the tensor and the shard.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "expect_error.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::ScratchDir;
using testing::WriteFile;

using testing::ExpectError;

// Writes shard `name` in `dir` holding f32 tensors of 2 elements each.
void Shard(const std::string& dir, const std::string& name, const std::vector<std::string>& tensors) {
  std::vector<TensorSpec> specs;
  std::vector<std::string> bytes;
  for (const auto& t : tensors) {
    specs.push_back({t, DType::kF32, {2}});
    bytes.push_back(std::string(8, static_cast<char>(t.size())));
  }
  WriteSafetensorsFile(dir + "/" + name, specs, bytes);
}

void Index(const std::string& dir, const std::string& weight_map) {
  WriteFile(dir + "/model.safetensors.index.json",
            R"({"metadata": {"total_size": 0}, "weight_map": )" + weight_map + "}");
}

TEST(IoCheckpoint, HandMadeShardsLoad) {  // the baseline the corruptions start from
  std::string dir = ScratchDir("io-ck-ok");
  Shard(dir, "s1.safetensors", {"a", "b"});
  Shard(dir, "s2.safetensors", {"c"});
  Index(dir, R"({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"})");
  CheckpointReader r(dir);
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.Get("c").file, dir + "/s2.safetensors");
  EXPECT_EQ(r.files().size(), 2u);
}

TEST(IoCheckpoint, IndexNamesMissingShard) {
  std::string dir = ScratchDir("io-ck-missing");
  Shard(dir, "s1.safetensors", {"a"});
  Index(dir, R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kNotFound, {"s2.safetensors", "'b'", "does not exist"});
}

TEST(IoCheckpoint, TensorInShardNotInIndex) {
  std::string dir = ScratchDir("io-ck-extra");
  Shard(dir, "s1.safetensors", {"a", "stray"});
  Index(dir, R"({"a": "s1.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {"'stray'", "s1.safetensors", "not in the index"});
}

TEST(IoCheckpoint, TensorInIndexNotInShard) {
  std::string dir = ScratchDir("io-ck-absent");
  Shard(dir, "s1.safetensors", {"a"});
  Shard(dir, "s2.safetensors", {"c"});
  Index(dir, R"({"a": "s1.safetensors", "ghost": "s2.safetensors", "c": "s2.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {"'ghost'", "s2.safetensors", "does not hold"});
}

TEST(IoCheckpoint, TensorInWrongShard) {
  std::string dir = ScratchDir("io-ck-wrong");
  Shard(dir, "s1.safetensors", {"a", "c"});
  Shard(dir, "s2.safetensors", {"b"});
  Index(dir, R"({"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {"'c'", "s1.safetensors", "assigns it to s2"});
}

TEST(IoCheckpoint, DuplicateAcrossShards) {
  std::string dir = ScratchDir("io-ck-dup");
  Shard(dir, "s1.safetensors", {"a", "x"});
  Shard(dir, "s2.safetensors", {"b", "x"});
  Index(dir, R"({"a": "s1.safetensors", "b": "s2.safetensors", "x": "s2.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {"'x'", "s1.safetensors", "s2.safetensors", "both"});
  // Without an index, the loose *.safetensors files are read and a duplicate is still an error.
  std::filesystem::remove(dir + "/model.safetensors.index.json");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {"'x'", "both"});
}

TEST(IoCheckpoint, LooseShardsWithoutIndex) {
  std::string dir = ScratchDir("io-ck-loose");
  Shard(dir, "b.safetensors", {"y"});
  Shard(dir, "a.safetensors", {"x"});
  CheckpointReader r(dir);
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r.files(), (std::vector<std::string>{dir + "/a.safetensors", dir + "/b.safetensors"}));
}

TEST(IoCheckpoint, MalformedIndex) {
  std::string dir = ScratchDir("io-ck-badindex");
  Shard(dir, "s1.safetensors", {"a"});
  const std::string index = dir + "/model.safetensors.index.json";
  WriteFile(index, R"({"weight_map": {"a": "s1.safetensors",}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "invalid JSON"});
  WriteFile(index, R"({"metadata": {}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "weight_map"});
  WriteFile(index, R"({"weight_map": {}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "no tensors"});
  WriteFile(index, R"({"weight_map": {"a": 3}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "'a'"});
  WriteFile(index, R"({"weight_map": {"a": "../s1.safetensors"}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "'a'", "outside"});
  WriteFile(index, R"({"weight_map": {"a": "s1.safetensors", "a": "s1.safetensors"}})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {index, "duplicate key 'a'"});
}

TEST(IoCheckpoint, CorruptShardIsNamed) {
  std::string dir = ScratchDir("io-ck-corrupt-shard");
  Shard(dir, "s1.safetensors", {"a"});
  WriteFile(dir + "/s2.safetensors", "garbage");
  Index(dir, R"({"a": "s1.safetensors", "b": "s2.safetensors"})");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kCorrupt, {dir + "/s2.safetensors"});
}

TEST(IoCheckpoint, EmptyOrMissingDirectory) {
  std::string dir = ScratchDir("io-ck-empty");
  ExpectError([&] { CheckpointReader r(dir); }, ErrorKind::kNotFound, {dir});
  ExpectError([&] { CheckpointReader r(dir + "/nope"); }, ErrorKind::kNotFound, {dir + "/nope"});
}

}  // namespace
}  // namespace tessera
