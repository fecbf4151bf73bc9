// tessera CLI: helpers shared by the subcommands: id-list parsing, the one-line error / exit-code
// convention (2 for usage errors, 1 for failures), and loading a model directory's tokenizer.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class Model;
struct LoadOptions;
class Tokenizer;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Thrown for a bad flag value found after parsing (exit code 2, one line).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Flag checks whose messages say what the flag wants (CLI11's PositiveNumber answers 0 with "not in
// range 0.000000 to 1797693134862315708...": its range's upper end is the largest double).
extern const CLI::Validator kPositiveNumber;     // > 0
extern const CLI::Validator kNonNegativeNumber;  // >= 0
// A seed: an integer in [0, 2^64). CLI11 would take -1 as 2^64 - 1 and clamp 2^70 to it, so that
// llama.cpp's "--seed -1" (a random seed there) would silently mean one fixed seed here.
extern const CLI::Validator kSeed;

// "5,17,301" or "[5, 17, 301]" -> ids; throws UsageError on anything else.
std::vector<int32_t> ParseIdList(const std::string& text, const std::string& flag);

// The tokenizer of a model directory, or nullptr when it has no tokenizer.json.
std::unique_ptr<Tokenizer> LoadTokenizerIfPresent(const std::string& dir);
std::unique_ptr<Tokenizer> LoadTokenizerRequired(const std::string& dir, const std::string& why);

// The demo model that ships with tessera (models/demo; see docs/DEMO_MODEL.md), used by serve and
// generate without --model: $TESSERA_DEMO_MODEL, else beside the executable (build tree or install).
// Throws UsageError naming the places looked at.
std::string DemoModelDir();

// Model::Load, with a device out of memory (the weights do not fit beside what the GPU already holds)
// explained: the backend names the allocation that failed and the device's free memory; this adds
// what the whole checkpoint needs and what to change (serve and generate).
std::unique_ptr<Model> LoadModelForCli(const std::string& dir, const LoadOptions& lo);

// Writes a JSON array of ids on one line.
std::string IdsToJson(const std::vector<int32_t>& ids);

// Registration of the subcommands (each in its own cmd_*.cpp). `run` is called after parsing
// when that subcommand was chosen and returns the exit code.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};
Subcommand AddGenerateCommand(CLI::App& root);
Subcommand AddLogitsCommand(CLI::App& root);
Subcommand AddTokenizeCommand(CLI::App& root);
Subcommand AddDetokenizeCommand(CLI::App& root);
Subcommand AddRenderCommand(CLI::App& root);
Subcommand AddInspectCommand(CLI::App& root);
Subcommand AddVerifyCommand(CLI::App& root);
Subcommand AddServeCommand(CLI::App& root);
Subcommand AddBenchCommand(CLI::App& root);

}  // namespace tessera
