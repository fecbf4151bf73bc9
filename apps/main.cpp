// tessera CLI entry point: dispatches to the subcommands (generate, logits, tokenize, detokenize,
// render, inspect, verify, serve). Usage errors print one line and exit 2; failures print one line and
// exit 1; --help prints the command's help and exits 0.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "core/error.h"

int main(int argc, char** argv) {
  using namespace tessera;
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(spdlog::stderr_color_mt("tessera"));
  // Commands print their results on stdout and errors as one line on stderr; progress logs are
  // opt-in (TESSERA_LOG_LEVEL=info|debug), except for long-running services that set their own.
  const char* level = std::getenv("TESSERA_LOG_LEVEL");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
  CLI::App root{"tessera: an inference engine for Mixture-of-Experts language models, autoregressive "
                "and block-diffusion, from Hugging Face checkpoints"};
  root.require_subcommand(1);
  root.set_version_flag("--version", "tessera 0.1.0");
  std::vector<Subcommand> cmds = {AddGenerateCommand(root), AddLogitsCommand(root),  AddTokenizeCommand(root),
                                  AddDetokenizeCommand(root), AddRenderCommand(root), AddInspectCommand(root),
                                  AddVerifyCommand(root),   AddServeCommand(root),
                                  AddBenchCommand(root)};
  try {
    root.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return root.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return root.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "tessera: error: %s (see --help)\n", msg.c_str());
    return kExitUsage;
  }
  try {
    for (auto& c : cmds)
      if (c.app->parsed()) return c.run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return e.kind() == ErrorKind::kInvalidArgument ? kExitUsage : kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}
