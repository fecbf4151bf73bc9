// tessera CLI: `tessera verify`: checks a model directory's files against its SHA256SUMS (each
// mismatch reported) and that the checkpoint holds exactly the tensors the architecture needs.
#include <cstdio>

#include "cli_common.h"
#include "core/error.h"
#include "io/checksums.h"
#include "io/hf_config.h"
#include "model/model.h"

namespace tessera {

Subcommand AddVerifyCommand(CLI::App& root) {
  struct Flags {
    std::string model;
    std::string quantization = "none";
    bool skip_load = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("verify", "Check a model directory against SHA256SUMS and its architecture");
  app->add_option("--model", f->model, "Model directory")->required()->check(CLI::ExistingDirectory);
  app->add_flag("--checksums-only", f->skip_load, "Only check SHA256SUMS, not the tensors");
  app->add_option("--quantization", f->quantization,
                  "Also check that the weights quantize at load: none (default), fp8, int8 or int4")
      ->check(CLI::IsMember({"none", "fp8", "int8", "int4"}));
  return {app, [f] {
            int failures = 0;
            if (FileExists(JoinPath(f->model, "SHA256SUMS"))) {
              auto results = VerifyChecksums(f->model);
              for (const auto& r : results) {
                if (r.ok) {
                  std::printf("OK        %s\n", r.file.c_str());
                } else {
                  ++failures;
                  if (r.actual.empty()) std::printf("MISSING   %s\n", r.file.c_str());
                  else std::printf("MISMATCH  %s expected %s got %s\n", r.file.c_str(), r.expected.c_str(), r.actual.c_str());
                }
              }
            } else {
              std::printf("no SHA256SUMS in %s: checksums not checked\n", f->model.c_str());
            }
            if (!f->skip_load && FileExists(JoinPath(f->model, "config.json"))) {
              // Loading accounts for every tensor (missing, unknown, shape, dtype) without reading data.
              LoadOptions lo;
              lo.quantization = f->quantization;
              auto model = Model::Load(f->model, lo);
              std::printf("OK        tensors of %s (%s), weights %s\n", model->config().architecture.c_str(),
                          model->config().model_type.c_str(), model->config().WeightFormat().c_str());
            }
            if (failures) {
              std::fprintf(stderr, "tessera: error: %d file(s) failed verification\n", failures);
              return kExitFailure;
            }
            return 0;
          }};
}

}  // namespace tessera
