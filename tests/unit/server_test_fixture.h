// tessera tests: the fixture of the HTTP server tests: a real HttpServer on an ephemeral port over
// the fakes of server_http_fakes.h (FakeEngine, FakePromptBuilder), and the check of OpenAI's error
// object. A test sets cfg / engine / prompts, then calls Start().
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/http_server.h"
#include "server/server_config.h"
#include "unit/server_http_fakes.h"

namespace tessera::testing_server {

class FakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg.server.port = 0;
    cfg.server.threads = 2;
    cfg.server.access_log = "";
  }
  // The fake engine's threads hold their requests' callbacks, and through them the server's state of
  // each request (its timers belong to the server's io_context): they end before the server goes, as
  // `tessera serve` stops its engine before the server is destroyed (UBSan caught a timer destroyed
  // after its io_context when the server went first).
  void TearDown() override {
    if (server) server->Stop();
    engine.JoinThreads();
    server.reset();
  }
  void Start() {
    server = std::make_unique<HttpServer>(cfg, engine, prompts);
    server->Start();
    port = server->port();
    ASSERT_GT(port, 0);
  }
  // OpenAI's error object: {"error": {"message", "type", "param", "code"}} with this status, type and
  // param ("" = null); returns the message ("" when there is none).
  static std::string ExpectApiError(const HttpResponse& r, int status, const std::string& param,
                                    const std::string& type = "invalid_request_error") {
    EXPECT_EQ(r.status, status) << r.body;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
      ADD_FAILURE() << "not an OpenAI error object: " << r.body;
      return "";
    }
    const auto& e = j["error"];
    EXPECT_EQ(e["type"], type) << r.body;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
    if (param.empty())
      EXPECT_TRUE(e["param"].is_null()) << r.body;
    else
      EXPECT_EQ(e["param"], param) << r.body;
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
    return e["message"].is_string() ? e["message"].get<std::string>() : "";
  }

  ServerConfig cfg;
  FakeEngine engine;
  FakePromptBuilder prompts;
  std::unique_ptr<HttpServer> server;
  int port = 0;
};

}  // namespace tessera::testing_server
