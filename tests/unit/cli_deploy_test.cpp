// tessera tests: the deploy/ files against the binary they deploy. Every `tessera serve` flag they
// pass is listed by `tessera serve --help`, each serve command line (Dockerfiles, compose, the
// Kubernetes Deployment) with its config file passes `--check-config`, every HTTP path they use is a
// route of the server, every port agrees with the config's server.port, every metric name of the
// dashboard, alerts and autoscaler exists on /metrics, the structural promises hold (non-root,
// HEALTHCHECK, probes, GPU resources, SSE-friendly nginx), and yamllint passes.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "server/http_server.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "test_util.h"
#include "unit/server_http_fakes.h"

namespace tessera {
namespace {

using namespace tessera::testing;
namespace fs = std::filesystem;

const std::string kDeploy = std::string(TESSERA_SOURCE_DIR) + "/deploy";

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Every file of deploy/, path relative to it.
std::vector<std::string> DeployFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(kDeploy))
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), kDeploy).string());
  std::sort(out.begin(), out.end());
  return out;
}
bool IsYaml(const std::string& f) {
  return f.ends_with(".yaml") || f.ends_with(".yml") || f == ".yamllint";
}
std::string Read(const std::string& rel) { return ReadFile(kDeploy + "/" + rel); }

// One `tessera serve` command line found in a deploy file, config path as written there.
struct ServeCommand {
  std::string where;
  std::vector<std::string> args;  // after "serve"
};

std::vector<std::string> JsonArray(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& v : nlohmann::json::parse(text)) out.push_back(v.get<std::string>());
  return out;
}

std::vector<std::string> YamlStrings(const YAML::Node& n) {
  std::vector<std::string> out;
  if (n && n.IsSequence())
    for (const auto& v : n) out.push_back(v.as<std::string>());
  return out;
}

void AddServe(std::vector<ServeCommand>& out, const std::string& where, std::vector<std::string> argv) {
  auto it = std::find(argv.begin(), argv.end(), "serve");
  if (it == argv.end()) return;
  out.push_back({where, std::vector<std::string>(it + 1, argv.end())});
}

std::vector<ServeCommand> ServeCommands() {
  std::vector<ServeCommand> out;
  for (const auto& f : DeployFiles()) {
    if (!fs::path(f).filename().string().starts_with("Dockerfile") || f.ends_with(".dockerignore")) continue;
    std::string text = Read(f);
    std::regex cmd(R"re((?:^|\n)(?:CMD|ENTRYPOINT)\s+(\[[^\n]*\]))re");
    std::vector<std::string> argv;
    for (std::sregex_iterator it(text.begin(), text.end(), cmd), end; it != end; ++it)
      for (auto& a : JsonArray((*it)[1])) argv.push_back(a);
    AddServe(out, f, argv);
  }
  YAML::Node compose = YAML::LoadFile(kDeploy + "/docker-compose.yaml");
  AddServe(out, "docker-compose.yaml", YamlStrings(compose["services"]["tessera"]["command"]));
  for (const auto& doc : YAML::LoadAllFromFile(kDeploy + "/k8s/deployment.yaml"))
    for (const auto& c : doc["spec"]["template"]["spec"]["containers"]) {
      auto argv = YamlStrings(c["command"]);
      for (auto& a : YamlStrings(c["args"])) argv.push_back(a);
      AddServe(out, "k8s/deployment.yaml", argv);
    }
  return out;
}

// The config files: deploy/config/*.yaml and the ConfigMap's tessera.yaml, written to scratch.
std::map<std::string, std::string> ConfigTexts() {
  std::map<std::string, std::string> out;
  for (const auto& f : DeployFiles())
    if (f.starts_with("config/")) out[f] = Read(f);
  for (const auto& doc : YAML::LoadAllFromFile(kDeploy + "/k8s/configmap.yaml"))
    if (doc["kind"].as<std::string>() == "ConfigMap" && doc["data"]["tessera.yaml"])
      out["k8s/configmap.yaml"] = doc["data"]["tessera.yaml"].as<std::string>();
  return out;
}

TEST(CliDeploy, YamllintPasses) {
  if (RunCommand("command -v yamllint").exit_code != 0)
    FAIL() << "yamllint is not installed (Debian package `yamllint`, scripts/install_deps.sh installs it)";
  CommandResult r = RunCommand("cd " + Quote(kDeploy) + " && yamllint -s -c .yamllint .");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  int yaml_files = 0;
  for (const auto& f : DeployFiles()) yaml_files += IsYaml(f) && f != ".yamllint";
  EXPECT_GE(yaml_files, 12);
}

TEST(CliDeploy, ServeFlagsExist) {
  CommandResult help = RunCommand(Quote(TesseraBinary()) + " serve --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  std::set<std::string> flags;
  for (const auto& c : ServeCommands())
    for (const auto& a : c.args)
      if (a.starts_with("--")) flags.insert(a.substr(0, a.find('=')));
  // The README's example command lines too.
  std::string readme = Read("README.md");
  std::regex line(R"re(serve (--[^\n`]*))re"), flag(R"re(--[a-z][a-z0-9-]*)re");
  for (std::sregex_iterator it(readme.begin(), readme.end(), line), end; it != end; ++it) {
    std::string rest = (*it)[1];
    for (std::sregex_iterator f(rest.begin(), rest.end(), flag); f != end; ++f) flags.insert(f->str());
  }
  EXPECT_GE(flags.size(), 4u);
  for (const auto& f : flags) {
    std::regex listed("(^|[\\s,])" + f + "(?![a-z0-9-])");
    EXPECT_TRUE(std::regex_search(help.out, listed)) << f << " is used in deploy/ but `tessera serve --help` "
                                                     << "does not list it";
  }
}

TEST(CliDeploy, ServeCommandLinesPassCheckConfig) {
  auto configs = ConfigTexts();
  ASSERT_EQ(configs.size(), 2u);
  std::string dir = ScratchDir("cli_deploy_configs");
  auto commands = ServeCommands();
  ASSERT_EQ(commands.size(), 4u);  // two Dockerfiles, compose, the Deployment
  for (const auto& c : commands) {
    SCOPED_TRACE(c.where);
    // The config path inside the container -> the file in deploy/ it comes from.
    std::string source = c.where.starts_with("k8s/") ? "k8s/configmap.yaml" : "config/tessera.yaml";
    std::string file = dir + "/" + std::to_string(&c - commands.data()) + ".yaml";
    WriteFile(file, configs.at(source));
    std::string line = Quote(TesseraBinary()) + " serve";
    bool has_config = false;
    for (size_t i = 0; i < c.args.size(); ++i) {
      std::string a = c.args[i];
      if (i > 0 && c.args[i - 1] == "--config") {
        a = file;
        has_config = true;
      }
      line += ' ';  // not " " + Quote(a): GCC 12 warns (-Wrestrict) on that
      line += Quote(a);
    }
    EXPECT_TRUE(has_config);
    CommandResult r = RunCommand("env -u TESSERA_API_KEY " + line + " --check-config");
    EXPECT_EQ(r.exit_code, 0) << line << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("server.port: "), std::string::npos) << r.out;
  }
}

TEST(CliDeploy, PortsAgreeWithTheConfig) {
  auto configs = ConfigTexts();
  const int64_t port = ParseServerConfig(configs.at("config/tessera.yaml"), "config/tessera.yaml").server.port;
  std::set<int64_t> health_ports;  // a config's server.health_port (the k8s probes' port)
  for (const auto& [name, text] : configs) {
    ServerConfig cfg = ParseServerConfig(text, name);
    EXPECT_NO_THROW(ValidateServerConfig(cfg)) << name;
    EXPECT_EQ(cfg.server.port, port) << name;
    if (cfg.server.health_port != 0) health_ports.insert(cfg.server.health_port);
  }
  // Ports of the other services these files name (Prometheus, Grafana, DCGM exporter).
  const std::set<int64_t> others = {9090, 3000, 9400};
  std::vector<std::regex> patterns = {
      std::regex(R"re(EXPOSE\s+(\d+))re"),
      std::regex(R"re(containerPort:\s*(\d+))re"),
      std::regex(R"re(targetPort:\s*(\d+))re"),
      std::regex(R"re(prometheus\.io/port:\s*"(\d+)")re"),
      std::regex(R"re(--port[ =]"?(\d+))re"),
      std::regex(R"re((?:localhost|127\.0\.0\.1|tessera[\w.-]*):(\d+))re"),
  };
  int checked = 0;
  for (const auto& f : DeployFiles()) {
    std::string text = Read(f);
    for (const auto& re : patterns)
      for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
        int64_t p = std::stoll((*it)[1]);
        if (others.count(p)) continue;
        if (health_ports.count(p)) {
          EXPECT_TRUE(f.starts_with("k8s/")) << f << ": '" << it->str() << "' is only the k8s ConfigMap's health port";
        } else {
          EXPECT_EQ(p, port) << f << ": '" << it->str() << "'";
        }
        ++checked;
      }
  }
  YAML::Node compose = YAML::LoadFile(kDeploy + "/docker-compose.yaml");
  for (const auto& m : compose["services"]["tessera"]["ports"]) {
    std::string s = m.as<std::string>();
    EXPECT_EQ(s.substr(s.rfind(':') + 1), std::to_string(port)) << "docker-compose.yaml ports: " << s;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(CliDeploy, HttpPathsAreRoutes) {
  std::set<std::string> paths;
  std::regex path(R"re((/health|/metrics|/v1/[a-z_/]*[a-z]))re");
  for (const auto& f : DeployFiles()) {
    std::string text = Read(f);
    for (std::sregex_iterator it(text.begin(), text.end(), path), end; it != end; ++it) paths.insert(it->str());
  }
  for (const char* p : {"/health", "/metrics", "/v1/chat/completions"}) EXPECT_TRUE(paths.count(p)) << p;
  testing_server::FakeEngine engine;
  testing_server::FakePromptBuilder prompts;
  ServerConfig cfg;
  cfg.server.port = 0;
  cfg.server.access_log = "";
  HttpServer server(cfg, engine, prompts);
  server.Start();
  for (const auto& p : paths) {
    auto r = testing_server::Call(server.port(), "GET", p);
    EXPECT_TRUE(r.status != 404 && r.status != 0) << p << " is used in deploy/ but is no route: " << r.status;
  }
}

TEST(CliDeploy, MetricNamesExist) {
  MetricsRegistry registry;
  ServerMetrics metrics(registry);
  std::string exposition = registry.Render();
  std::set<std::string> families, histograms;
  std::regex type(R"re(# TYPE (\S+) (\S+))re");
  for (std::sregex_iterator it(exposition.begin(), exposition.end(), type), end; it != end; ++it) {
    families.insert((*it)[1]);
    if ((*it)[2] == "histogram") histograms.insert((*it)[1]);
  }
  ASSERT_GE(families.size(), 10u);
  std::regex name(R"re(\btessera_[a-z0-9_]*[a-z0-9])re");
  int used = 0;
  for (const auto& f : DeployFiles()) {
    std::string text = Read(f);
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
      std::string n = it->str();
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (n.ends_with(suffix) && histograms.count(n.substr(0, n.size() - std::strlen(suffix))))
          n = n.substr(0, n.size() - std::strlen(suffix));
      EXPECT_TRUE(families.count(n)) << f << " uses metric " << it->str() << ", which /metrics does not export";
      ++used;
    }
  }
  EXPECT_GE(used, 20);
  // The autoscaler's metric and the alerts' sources.
  EXPECT_NE(Read("k8s/hpa.yaml").find("name: tessera_num_requests_waiting"), std::string::npos);
  std::string alerts = Read("prometheus/alerts.yaml");
  for (const char* s : {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "0.92", "for: 10m", "for: 3m",
                        "histogram_quantile(0.99", "tessera_request_errors_total"})
    EXPECT_NE(alerts.find(s), std::string::npos) << s;
}

TEST(CliDeploy, GrafanaDashboardIsProvisioned) {
  nlohmann::json d = nlohmann::json::parse(Read("grafana/dashboards/tessera.json"));
  YAML::Node ds = YAML::LoadFile(kDeploy + "/grafana/provisioning/datasources/prometheus.yaml");
  std::string uid = ds["datasources"][0]["uid"].as<std::string>();
  ASSERT_GE(d["panels"].size(), 8u);
  for (const auto& p : d["panels"]) {
    EXPECT_EQ(p["datasource"]["uid"], uid) << p["title"];
    ASSERT_FALSE(p["targets"].empty()) << p["title"];
    for (const auto& t : p["targets"]) EXPECT_FALSE(t["expr"].get<std::string>().empty()) << p["title"];
  }
}

TEST(CliDeploy, ContainersAndManifestsKeepTheirPromises) {
  for (const char* f : {"Dockerfile.cpu", "Dockerfile.cuda"}) {
    SCOPED_TRACE(f);
    std::string text = Read(f);
    std::regex from(R"re((?:^|\n)FROM )re");
    EXPECT_GE(std::distance(std::sregex_iterator(text.begin(), text.end(), from), std::sregex_iterator()), 2);
    EXPECT_NE(text.find("scripts/install_deps.sh"), std::string::npos);
    EXPECT_NE(text.find("HEALTHCHECK"), std::string::npos);
    EXPECT_NE(text.find("/health"), std::string::npos);
    EXPECT_NE(text.find("VOLUME [\"/models\"]"), std::string::npos);
    std::smatch user;
    ASSERT_TRUE(std::regex_search(text, user, std::regex(R"re(\nUSER (\S+))re")));
    EXPECT_NE(user[1].str().substr(0, 2), "0:");
    EXPECT_NE(user[1].str(), "root");
  }
  EXPECT_NE(Read("Dockerfile.cuda").find("FROM ${CUDA_RUNTIME_IMAGE}"), std::string::npos);
  EXPECT_NE(Read("Dockerfile.cuda").find("ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:"), std::string::npos);

  std::set<std::string> kinds;
  for (const auto& f : DeployFiles()) {
    if (!f.starts_with("k8s/")) continue;
    for (const auto& doc : YAML::LoadAllFromFile(kDeploy + "/" + f))
      if (doc["kind"]) kinds.insert(doc["kind"].as<std::string>());
  }
  for (const char* k : {"Deployment", "Service", "Secret", "ConfigMap", "PodDisruptionBudget",
                        "HorizontalPodAutoscaler"})
    EXPECT_TRUE(kinds.count(k)) << k;
  YAML::Node dep = YAML::LoadFile(kDeploy + "/k8s/deployment.yaml");
  YAML::Node pod = dep["spec"]["template"]["spec"];
  EXPECT_TRUE(pod["securityContext"]["runAsNonRoot"].as<bool>());
  YAML::Node c = pod["containers"][0];
  // The probes reach /health on the ConfigMap's health port (outside the connection caps, so a flood
  // on the API port does not get a live pod restarted), through the container port that exposes it.
  const int health_port = ParseServerConfig(ConfigTexts().at("k8s/configmap.yaml")).server.health_port;
  EXPECT_NE(health_port, 0);
  std::map<std::string, int> ports;
  for (const auto& p : c["ports"]) ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
  for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
    EXPECT_EQ(c[probe]["httpGet"]["path"].as<std::string>(), "/health") << probe;
    EXPECT_EQ(ports[c[probe]["httpGet"]["port"].as<std::string>()], health_port) << probe;
  }
  EXPECT_EQ(dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(),
            std::to_string(health_port));
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);

  std::string nginx = Read("nginx/tessera.conf");
  for (const char* s : {"proxy_buffering off;", "proxy_http_version 1.1;", "proxy_set_header Connection \"\";",
                        "keepalive "})
    EXPECT_NE(nginx.find(s), std::string::npos) << s;
  std::smatch rt;
  ASSERT_TRUE(std::regex_search(nginx, rt, std::regex(R"re(proxy_read_timeout (\d+)s;)re")));
  ServerConfig k8s_cfg = ParseServerConfig(ConfigTexts().at("k8s/configmap.yaml"));
  EXPECT_GT(std::stod(rt[1]), k8s_cfg.server.request_timeout_s) << "nginx would cut streams the server still runs";
}

}  // namespace
}  // namespace tessera
