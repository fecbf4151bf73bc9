// tessera engine tests: a DiffusionGemma checkpoint loads and runs its encoder (the model tests), but
// the engine refuses to generate with it until the canvas decoder exists (issue 31), rather than
// sampling the encoder's logits as if it were an autoregressive model. The checkpoint is the numpy
// self-check one (tools/dgemma_fixtures/make_dgemma_selfcheck.py), made at test time.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "expect_error.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

TEST(EngineDiffusionGemma, RefusesToGenerateWithoutTheCanvasDecoder) {
  const std::string out = testing::ScratchDir("dgemma_engine");
  const auto r = testing::RunCommand("/usr/bin/python3 " + std::string(TESSERA_SOURCE_DIR) +
                                     "/tools/dgemma_fixtures/make_dgemma_selfcheck.py " + out);
  ASSERT_EQ(r.exit_code, 0) << "make_dgemma_selfcheck.py failed: " << r.out << r.err;
  auto model = Model::Load(out + "/dgemma_tiny_a");
  EngineConfig cfg;
  cfg.num_pages = 8;
  testing::ExpectError([&] { Engine engine(model.get(), nullptr, cfg); }, ErrorKind::kUnsupported,
                       {"diffusion_gemma", "canvas decoder"});
}

}  // namespace
}  // namespace tessera
