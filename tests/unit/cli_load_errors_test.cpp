// tessera tests: every way a model load can fail from the command line (`generate` and `serve`, the
// two commands that load weights through LoadModelForCli) ends in one line naming the file at fault
// and what is wrong with it, and a non-zero exit: no crash, no abort, no library-internal text.
// Each case damages a copy of the qwen3_moe fixture (with the byte tokenizer, so serve gets as far
// as the weights) and states the wording its message must have.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <regex>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace tessera::testing;
namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kQ = "model.layers.0.self_attn.q_proj.weight";  // [128, 64] bf16 in the fixture

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A complete model directory (qwen3_moe fixture + byte tokenizer), then `damage` applied to it.
std::string Broken(const std::string& name, const std::function<void(const std::string&)>& damage) {
  const std::string dir = ScratchDir("cli-load-" + name);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(DataPath("fixtures/models/qwen3_moe/") + f, dir + "/" + f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(DataPath("fixtures/tokenizers/bytes/") + f, dir + "/" + f);
  damage(dir);
  return dir;
}

void EditConfig(const std::string& dir, const std::function<void(json&)>& edit) {
  json c = json::parse(ReadFile(dir + "/config.json"));
  edit(c);
  WriteFile(dir + "/config.json", c.dump(1));
}

// Rewrites DIR/model.safetensors as a well-formed file whose tensors `edit` changed.
void EditWeights(const std::string& dir,
                 const std::function<void(std::vector<TensorSpec>&, std::vector<std::string>&)>& edit) {
  std::vector<TensorSpec> specs;
  std::vector<std::string> bytes;
  {
    SafetensorsFile f(dir + "/model.safetensors");
    for (const auto& [name, v] : f.tensors()) {
      specs.push_back(TensorSpec{name, v.dtype, v.shape});
      bytes.emplace_back(reinterpret_cast<const char*>(v.data), v.nbytes);
    }
  }
  edit(specs, bytes);
  WriteSafetensorsFile(dir + "/model.safetensors", specs, bytes);
}

size_t IndexOf(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return i;
  ADD_FAILURE() << name << " is not in the fixture";
  return 0;
}

struct LoadCase {
  std::string name;
  std::string model;  // the --model argument
  std::string want;   // a regular expression the error line must match (after "tessera: error: ")
  std::string serve_want = "";  // serve's, where its wording differs (its flags have other names)
};

std::vector<LoadCase> Cases() {
  std::vector<LoadCase> cases;
  auto add = [&](const std::string& name, const std::function<void(const std::string&)>& damage,
                 const std::function<std::string(const std::string&)>& want) {
    const std::string dir = Broken(name, damage);
    cases.push_back({name, dir, want(dir)});
  };
  auto re = [](const std::string& s) { return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"); };
  // generate's flag check answers a path that is not a directory (CLI11's wording, then " (see --help)");
  // serve's is the model directory's reader.
  const std::string gone = ScratchDir("cli-load-gone") + "/no-such-model";
  cases.push_back({"missing directory", gone,
                   "(--model: Directory does not exist: " + re(gone) + " \\(see --help\\)|model directory " + re(gone) +
                       ": no such directory)"});
  const std::string file = DataPath("fixtures/models/qwen3_moe/config.json");
  cases.push_back({"a file, not a directory", file,
                   "(--model: Directory is actually a file: " + re(file) + " \\(see --help\\)|model directory " +
                       re(file) + ": not a directory .*)"});
  add("missing config.json", [](const std::string& d) { fs::remove(d + "/config.json"); },
      [&](const std::string& d) {
        return re(d + "/config.json") + ": no such file: " + re(d) + " is not a Hugging Face model directory.*";
      });
  add("bad JSON", [](const std::string& d) { WriteFile(d + "/config.json", "{\"model_type\": "); },
      [&](const std::string& d) {
        return re(d + "/config.json") + ": invalid JSON at byte 15: parse error at line 1, column 16: .*";
      });
  add("unsupported architecture",
      [](const std::string& d) {
        EditConfig(d, [](json& c) {
          c["model_type"] = "mystery_lm";
          c["architectures"] = {"MysteryForCausalLM"};
        });
      },
      [&](const std::string& d) {
        return re(d + "/config.json") +
               ": unknown architecture \\(model_type \"mystery_lm\", architectures \"MysteryForCausalLM\"\\); "
               "supported model_type: qwen3_moe, .*";
      });
  add("missing tensor",
      [](const std::string& d) {
        EditWeights(d, [](std::vector<TensorSpec>& s, std::vector<std::string>& b) {
          const size_t i = IndexOf(s, kQ);
          s.erase(s.begin() + static_cast<std::ptrdiff_t>(i));
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(i));
        });
      },
      [&](const std::string& d) {
        return "checkpoint " + re(d) + ": tensor \"" + re(kQ) + "\" is missing \\(expected shape \\[128, 64\\]\\)";
      });
  add("wrong shape",
      [](const std::string& d) {
        EditWeights(d, [](std::vector<TensorSpec>& s, std::vector<std::string>&) {
          s[IndexOf(s, kQ)].shape = {64, 128};  // the same bytes
        });
      },
      [&](const std::string& d) {
        return "checkpoint " + re(d) + ": tensor \"" + re(kQ) + "\" has shape \\[64, 128\\], expected \\[128, 64\\]";
      });
  add("wrong dtype",
      [](const std::string& d) {
        EditWeights(d, [](std::vector<TensorSpec>& s, std::vector<std::string>& b) {
          const size_t i = IndexOf(s, kQ);
          s[i].dtype = DType::kI32;  // same shape, twice the bytes
          b[i] += b[i];
        });
      },
      [&](const std::string& d) {
        return "checkpoint " + re(d) + ": tensor \"" + re(kQ) + "\" has dtype i32, expected bf16, f16 or f32";
      });
  add("tensor nobody uses",
      [](const std::string& d) {
        EditWeights(d, [](std::vector<TensorSpec>& s, std::vector<std::string>& b) {
          s.push_back(TensorSpec{"model.layers.0.self_attn.extra.weight", DType::kBF16, {2}});
          b.emplace_back(4, '\0');
        });
      },
      [&](const std::string& d) {
        return "checkpoint " + re(d) +
               ": tensor \"model\\.layers\\.0\\.self_attn\\.extra\\.weight\" is not used by architecture qwen3_moe.*";
      });
  add("truncated safetensors",
      [](const std::string& d) {
        fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
      },
      [&](const std::string& d) {
        return re(d + "/model.safetensors") +
               ": tensor '.*': data_offsets .* beyond the data section .*; file truncated\\?";
      });
  add("empty safetensors", [](const std::string& d) { fs::resize_file(d + "/model.safetensors", 0); },
      [&](const std::string& d) {
        return re(d + "/model.safetensors") + ": 0 bytes is too short for a safetensors file";
      });
  add("no weights", [](const std::string& d) { fs::remove(d + "/model.safetensors"); },
      [&](const std::string& d) {
        return re(d) + ": no model\\.safetensors\\.index\\.json, model\\.safetensors or .*";
      });
  add("missing shard",
      [](const std::string& d) {
        json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
        const SafetensorsFile weights(d + "/model.safetensors");
        for (const auto& [name, v] : weights.tensors())
          index["weight_map"][name] =
              name == kQ ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
        fs::rename(d + "/model.safetensors", d + "/model-00001-of-00002.safetensors");
        WriteFile(d + "/model.safetensors.index.json", index.dump());
      },
      [&](const std::string& d) {
        return re(d + "/model.safetensors.index.json") +
               ": shard 'model-00002-of-00002\\.safetensors' \\(holding e\\.g\\. tensor '" + re(kQ) +
               "'\\) does not exist";
      });
  add("unsupported quantization method",
      [](const std::string& d) {
        EditConfig(d, [](json& c) {
          c["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};
        });
      },
      [&](const std::string& d) {
        return re(d + "/config.json") +
               ": quantization_config: quant_method \"bitsandbytes\" is not supported \\(fp8, gptq, awq, "
               "compressed-tensors are\\)";
      });
  add("unsupported quantization scheme",
      [](const std::string& d) {
        EditConfig(d, [](json& c) {
          c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 32}};
        });
      },
      [&](const std::string& d) {
        return re(d + "/config.json") + ": quantization_config: gptq bits 3 is not supported \\(4 and 8 are\\)";
      });
  // A diffusion checkpoint (sdar_moe) without a step count or block size: the message names the flag
  // of the command at hand (serve's are --diffusion-steps / --diffusion-block-size).
  auto diffusion = [](json& c) {
    c["model_type"] = "sdar_moe";
    c["mask_token_id"] = 511;
  };
  add("diffusion without steps",
      [&](const std::string& d) {
        EditConfig(d, [&](json& c) {
          diffusion(c);
          c["block_size"] = 4;
        });
      },
      [](const std::string&) {
        return "no denoising step count: give --steps N or set \"steps\" in generation_config\\.json";
      });
  cases.back().serve_want =
      "no denoising step count: give --diffusion-steps N or set \"steps\" in generation_config\\.json";
  add("diffusion without a block size", [&](const std::string& d) { EditConfig(d, diffusion); },
      [](const std::string&) {
        return "no block size for diffusion: give --block-size N or set \"block_size\" in config\\.json or .*";
      });
  cases.back().serve_want = "no block size for diffusion: give --diffusion-block-size N or set \"block_size\" .*";
  return cases;
}

// What no load error may show: an abort, a signal, a sanitizer's or the C++ runtime's report, or an
// exception's internal id (nlohmann's "[json.exception.parse_error.101]").
void ExpectNoCrashText(const std::string& text, const std::string& what) {
  for (const char* bad : {"terminate called", "what():", "Aborted", "Segmentation fault", "core dumped", "Sanitizer",
                          "json.exception", "std::", "stoi", "stoll"})
    EXPECT_EQ(text.find(bad), std::string::npos) << what << ": \"" << bad << "\" in\n" << text;
}

std::string ErrorLine(const std::string& err) {
  const size_t at = err.rfind("tessera: error: ");
  if (at == std::string::npos) return "";
  const size_t end = err.find('\n', at);
  return err.substr(at + 16, end == std::string::npos ? std::string::npos : end - at - 16);
}

TEST(CliLoadErrors, GenerateSaysWhatIsWrongInOneLine) {
  for (const LoadCase& c : Cases()) {
    auto r = RunCommand("timeout 120 " + TesseraBinary() + " generate --model " + Quote(c.model) +
                        " --ids 1,2,3 --max-tokens 2");
    EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << c.name << ": exit " << r.exit_code << "\n" << r.err;
    // Exactly one line on stderr, and it is the error.
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << c.name << "\n" << r.err;
    EXPECT_TRUE(std::regex_match(ErrorLine(r.err), std::regex(c.want)))
        << c.name << ":\n  got:  " << ErrorLine(r.err) << "\n  want: " << c.want;
    EXPECT_EQ(r.out, "") << c.name;
    ExpectNoCrashText(r.err, c.name);
  }
}

// serve logs its effective configuration first (and binds its port before the weights load), so the
// error is its last line, the only error line, and the exit is prompt (no server left running).
TEST(CliLoadErrors, ServeSaysWhatIsWrongInItsLastLine) {
  for (const LoadCase& c : Cases()) {
    auto r = RunCommand("timeout 120 " + TesseraBinary() + " serve --port 0 --access-log '' --model " + Quote(c.model));
    EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << c.name << ": exit " << r.exit_code << "\n" << r.err;
    std::string err = r.err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    const std::string last = err.substr(err.rfind('\n') == std::string::npos ? 0 : err.rfind('\n') + 1);
    EXPECT_EQ(last.rfind("tessera: error: ", 0), 0u) << c.name << "\n" << r.err;
    // The one error line: no error-level log line beside it (the configuration's values may say "error").
    size_t errors = 0;
    for (size_t at = 0; at < err.size();) {
      const size_t end = std::min(err.find('\n', at), err.size());
      const std::string line = err.substr(at, end - at);
      errors += line.rfind("tessera: error: ", 0) == 0 || line.find("[error]") != std::string::npos ||
                line.find("[critical]") != std::string::npos;
      at = end + 1;
    }
    EXPECT_EQ(errors, 1u) << c.name << ": more than the one error line\n" << r.err;
    const std::string& want = c.serve_want.empty() ? c.want : c.serve_want;
    EXPECT_TRUE(std::regex_match(ErrorLine(r.err), std::regex(want)))
        << c.name << ":\n  got:  " << ErrorLine(r.err) << "\n  want: " << want;
    ExpectNoCrashText(r.err + r.out, c.name);
  }
}

// Weights the GPU cannot hold (Qwen3-Next-80B's shapes with dummy weights: 160 GB of bf16, beyond an
// H100's 80 GB and an H200's 141 GB): generate's one error line says the load ran out of GPU memory,
// with the backend's allocation and free memory (EngineFaults.CudaOutOfMemoryAtLoad...), and what to
// change (apps/cli_common.cpp LoadModelForCli); no crash.
TEST(CliLoadErrors, GenerateSaysTheGpuIsTooSmallOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  const std::string model = DataPath("configs/qwen3-next-80b-a3b");
  auto r = RunCommand("timeout 600 " + TesseraBinary() + " generate --device cuda --load-format dummy --model " +
                      Quote(model) + " --ids 1,2,3 --max-tokens 2");
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit " << r.exit_code << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("tessera: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const std::string line = ErrorLine(r.err);
  for (const char* want : {"cannot load ", "onto the GPU: ", "out of memory", "device free",
                           "shard the model (--tensor-parallel-size) or quantize it (--quantization)"})
    EXPECT_NE(line.find(want), std::string::npos) << "\"" << want << "\" not in: " << line;
  EXPECT_EQ(r.out, "");
  ExpectNoCrashText(r.err, "GPU out of memory at load");
}

}  // namespace
}  // namespace tessera
