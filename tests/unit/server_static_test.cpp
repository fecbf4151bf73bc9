// tessera tests: the chat page built into the server (web/ -> static_assets): every file of web/
// is embedded byte for byte with its Content-Type and an ETag from its SHA-256 (sha256sum is the
// reference), the page's own references resolve, path lookups refuse traversal, and over HTTP the
// page loads without an API key, revalidates with If-None-Match (304) and carries its CSP.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "server/http_server.h"
#include "server/static_assets.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"

namespace tessera {
namespace {

using namespace testing_server;
using namespace tessera::testing;
namespace fs = std::filesystem;

const std::string kWebDir = std::string(TESSERA_SOURCE_DIR) + "/web";

std::vector<std::string> WebFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kWebDir)) {
    std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".html" || ext == ".js" || ext == ".css" || ext == ".svg"))
      out.push_back(e.path().filename().string());
  }
  return out;
}

TEST(ServerStatic, EveryWebFileIsEmbeddedVerbatim) {
  auto files = WebFiles();
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(StaticAssets().size(), files.size());
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    const StaticAsset* a = FindStaticAsset(f == "index.html" ? "/" : "/static/" + f);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->name, f);
    EXPECT_EQ(std::string(a->body), ReadFile(kWebDir + "/" + f));
    CommandResult sha = RunCommand("sha256sum '" + kWebDir + "/" + f + "'");
    ASSERT_EQ(sha.exit_code, 0) << sha.err;
    EXPECT_EQ(a->etag, "\"" + sha.out.substr(0, 20) + "\"");
  }
}

TEST(ServerStatic, ContentTypes) {
  EXPECT_EQ(FindStaticAsset("/")->content_type, "text/html; charset=utf-8");
  EXPECT_EQ(FindStaticAsset("/index.html")->name, "index.html");
  EXPECT_EQ(FindStaticAsset("/static/app.js")->content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(FindStaticAsset("/static/style.css")->content_type, "text/css; charset=utf-8");
  EXPECT_EQ(FindStaticAsset("/static/favicon.svg")->content_type, "image/svg+xml");
  EXPECT_EQ(ContentTypeFor("x.bin"), "application/octet-stream");
}

TEST(ServerStatic, LookupRefusesOtherPaths) {
  for (const char* p : {"/static/", "/static/../CMakeLists.txt", "/static/..%2fapp.js", "/static/a/app.js",
                        "/static/app.js/", "/static\\app.js", "/app.js", "/static/nothing.js", "", "/v1/models",
                        "/static/.."})
    EXPECT_EQ(FindStaticAsset(p), nullptr) << p;
}

TEST(ServerStatic, PageReferencesResolve) {
  // Every /static/ URL of index.html and every relative import of the modules is embedded, and the
  // page refers to nothing outside this server.
  std::set<std::string> refs;
  std::string html = ReadFile(kWebDir + "/index.html");
  std::regex url(R"re((?:src|href)="([^"#]+)")re");
  for (std::sregex_iterator it(html.begin(), html.end(), url), end; it != end; ++it) refs.insert((*it)[1]);
  std::regex import(R"re(from '\./([\w.]+)')re");
  for (const auto& f : WebFiles()) {
    std::string text = ReadFile(kWebDir + "/" + f);
    for (std::sregex_iterator it(text.begin(), text.end(), import), end; it != end; ++it)
      refs.insert("/static/" + (*it)[1].str());
    text = std::regex_replace(text, std::regex(R"re(xmlns="http://www\.w3\.org/2000/svg")re"), "");  // a name
    EXPECT_EQ(text.find("http://"), std::string::npos) << f << " refers to another site";
    EXPECT_EQ(text.find("https://"), std::string::npos) << f << " refers to another site";
  }
  EXPECT_GE(refs.size(), 5u);
  for (const auto& r : refs) EXPECT_NE(FindStaticAsset(r), nullptr) << r;
}

TEST(ServerStatic, EtagMatching) {
  EXPECT_TRUE(EtagMatches("\"abc\"", "\"abc\""));
  EXPECT_TRUE(EtagMatches("W/\"abc\"", "\"abc\""));
  EXPECT_TRUE(EtagMatches("\"x\", \"abc\"", "\"abc\""));
  EXPECT_TRUE(EtagMatches("*", "\"abc\""));
  EXPECT_FALSE(EtagMatches("\"abcd\"", "\"abc\""));
  EXPECT_FALSE(EtagMatches("abc", "\"abc\""));
  EXPECT_FALSE(EtagMatches("", "\"abc\""));
}

class ServerStaticHttp : public FakeServerTest {};

TEST_F(ServerStaticHttp, PageLoadsWithoutKeyAndRevalidates) {
  cfg.security.api_keys = {"sk-page"};
  Start();
  auto r = Call(port, "GET", "/");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_EQ(r.body, ReadFile(kWebDir + "/index.html"));
  EXPECT_EQ(r.headers["cache-control"], "no-cache");
  EXPECT_EQ(r.headers["x-content-type-options"], "nosniff");
  EXPECT_NE(r.headers["content-security-policy"].find("default-src 'self'"), std::string::npos);
  std::string etag = r.headers["etag"];
  EXPECT_EQ(etag, FindStaticAsset("/")->etag);

  auto again = Call(port, "GET", "/", "", {{"If-None-Match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(again.headers["etag"], etag);
  EXPECT_EQ(Call(port, "GET", "/", "", {{"If-None-Match", "\"stale\""}}).status, 200);

  auto js = Call(port, "GET", "/static/app.js?v=1");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.headers["content-type"], "text/javascript; charset=utf-8");
  EXPECT_EQ(js.body, ReadFile(kWebDir + "/app.js"));
  EXPECT_EQ(Call(port, "GET", "/static/missing.js").status, 404);
  EXPECT_EQ(Call(port, "GET", "/static/../CMakeLists.txt").status, 404);
  // The API itself still wants the key.
  EXPECT_EQ(Call(port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Call(port, "GET", "/v1/models", "", {{"Authorization", "Bearer sk-page"}}).status, 200);
}

TEST_F(ServerStaticHttp, PageIsNotServedToDisallowedClients) {
  cfg.security.allow_cidrs = {"10.0.0.0/8"};
  Start();
  EXPECT_EQ(Call(port, "GET", "/").status, 403);
}

}  // namespace
}  // namespace tessera
