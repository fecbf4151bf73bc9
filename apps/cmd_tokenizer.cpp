// tessera CLI: `tessera tokenize`, `tessera detokenize` and `tessera render`: the tokenizer and
// the chat template of a model directory (tokenizer.json + tokenizer_config.json are enough).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "tokenizer/template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

std::string ReadWholeFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UsageError("cannot read " + path);
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace

Subcommand AddTokenizeCommand(CLI::App& root) {
  struct Flags {
    std::string model, text, file;
    bool add_special = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  app->add_option("--model", f->model, "Model or tokenizer directory")->required()->check(CLI::ExistingDirectory);
  auto* text = app->add_option("--text", f->text, "Text to tokenize");
  auto* file = app->add_option("--file", f->file, "File whose content to tokenize")->check(CLI::ExistingFile);
  text->excludes(file);
  app->add_flag("--add-special-tokens", f->add_special, "Add the tokenizer's special tokens (e.g. BOS)");
  return {app, [f, text, file] {
            if (!*text && !*file) throw UsageError("give --text or --file");
            auto tok = LoadTokenizerRequired(f->model, "tokenize needs a tokenizer");
            std::string input = *file ? ReadWholeFile(f->file) : f->text;
            std::printf("%s\n", IdsToJson(tok->Encode(input, f->add_special)).c_str());
            return 0;
          }};
}

Subcommand AddDetokenizeCommand(CLI::App& root) {
  struct Flags {
    std::string model, ids;
    bool skip_special = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("detokenize", "Print the text of token ids");
  app->add_option("--model", f->model, "Model or tokenizer directory")->required()->check(CLI::ExistingDirectory);
  app->add_option("--ids", f->ids, "Token ids, e.g. 5,17,301")->required();
  app->add_flag("--skip-special-tokens", f->skip_special, "Leave special tokens out of the text");
  return {app, [f] {
            auto ids = ParseIdList(f->ids, "--ids");
            auto tok = LoadTokenizerRequired(f->model, "detokenize needs a tokenizer");
            for (int32_t id : ids)
              if (id >= tok->vocab_size())
                throw UsageError(fmt::format("--ids: token id {} is out of range [0, {})", id, tok->vocab_size()));
            std::string text = tok->Decode(ids, f->skip_special);
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fputs("\n", stdout);
            return 0;
          }};
}

Subcommand AddRenderCommand(CLI::App& root) {
  struct Flags {
    std::string model, request;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* app = root.add_subcommand("render", "Render a chat request through the model's chat template");
  app->add_option("--model", f->model, "Model or tokenizer directory")->required()->check(CLI::ExistingDirectory);
  app->add_option("--request", f->request,
                  "JSON file: {messages, tools?, add_generation_prompt?, chat_template_kwargs?}")
      ->required()
      ->check(CLI::ExistingFile);
  return {app, [f] {
            nlohmann::ordered_json req;
            try {
              req = nlohmann::ordered_json::parse(ReadWholeFile(f->request));
            } catch (const nlohmann::json::exception& e) {
              throw UsageError(fmt::format("{}: not valid JSON: {}", f->request, e.what()));
            }
            if (!req.is_object() || !req.contains("messages") || !req["messages"].is_array())
              throw UsageError(f->request + ": expected an object with a \"messages\" list");
            auto tok = LoadTokenizerRequired(f->model, "render needs tokenizer_config.json with a chat template");
            const auto& tc = tok->config();
            if (tc.chat_template.empty()) throw UsageError(f->model + " has no chat template");
            ChatTemplateInputs in;
            in.messages = req["messages"];
            in.tools = req.value("tools", nlohmann::ordered_json());
            auto agp = req.value("add_generation_prompt", nlohmann::ordered_json(false));
            if (!agp.is_boolean()) throw UsageError(f->request + ": add_generation_prompt must be true or false");
            in.add_generation_prompt = agp.get<bool>();
            in.extra_kwargs = req.value("chat_template_kwargs", nlohmann::ordered_json::object());
            if (!in.extra_kwargs.is_object()) throw UsageError(f->request + ": chat_template_kwargs must be an object");
            in.bos_token = tc.bos_token;
            in.eos_token = tc.eos_token;
            std::string out = ChatTemplate(tc.chat_template).Render(in);
            std::fwrite(out.data(), 1, out.size(), stdout);
            return 0;
          }};
}

}  // namespace tessera
