// tessera io: parsing of quantization_config (see quant_config.h). The keys and their meaning follow
// the producers' own configs: transformers' FineGrainedFP8Config, AutoGPTQ / GPTQModel's
// BaseQuantizeConfig, AutoAWQ's AwqConfig, and compressed-tensors' QuantizationConfig /
// QuantizationScheme / QuantizationArgs.
#include "io/quant_config.h"

#include <fmt/format.h>

#include <regex>

#include "core/error.h"

namespace tessera {

namespace {

using json = nlohmann::json;

[[noreturn]] void Unsupported(const std::string& what) {
  Fail(ErrorKind::kUnsupported, "quantization_config: {}", what);
}

int64_t IntOr(const json& j, const char* key, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number_integer()) Fail(ErrorKind::kCorrupt, "quantization_config: \"{}\" is not an integer", key);
  return j[key].get<int64_t>();
}

bool BoolOr(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) Fail(ErrorKind::kCorrupt, "quantization_config: \"{}\" is not a boolean", key);
  return j[key].get<bool>();
}

std::string StrOr(const json& j, const char* key, const std::string& def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_string()) Fail(ErrorKind::kCorrupt, "quantization_config: \"{}\" is not a string", key);
  return j[key].get<std::string>();
}

std::vector<std::string> StrList(const json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.contains(key) || j[key].is_null()) return out;
  if (!j[key].is_array()) Fail(ErrorKind::kCorrupt, "quantization_config: \"{}\" is not a list", key);
  for (const json& v : j[key]) {
    if (!v.is_string()) Fail(ErrorKind::kCorrupt, "quantization_config: \"{}\" holds a non-string", key);
    out.push_back(v.get<std::string>());
  }
  return out;
}

QuantScheme ParseFp8(const json& q) {
  const std::string fmt = StrOr(q, "fmt", "e4m3");
  if (fmt != "e4m3") Unsupported(fmt::format("fp8 fmt \"{}\" is not supported (e4m3 is)", fmt));
  if (const std::string sf = StrOr(q, "scale_fmt", "float"); sf != "float")
    Unsupported(fmt::format("fp8 scale_fmt \"{}\" is not supported (float is)", sf));
  QuantScheme s;
  s.kind = QuantKind::kFp8;
  s.bits = 8;
  const std::string act = StrOr(q, "activation_scheme", "dynamic");
  if (act != "dynamic" && act != "static")
    Unsupported(fmt::format("fp8 activation_scheme \"{}\" is not supported (dynamic, static are)", act));
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
      Fail(ErrorKind::kCorrupt, "quantization_config: weight_block_size must be two positive integers");
    s.strategy = "block";
    s.block_rows = b[0].get<int64_t>();
    s.block_cols = b[1].get<int64_t>();
    if (act == "static") Unsupported("fp8 block-wise weights with activation_scheme \"static\"");
    // Dynamic activations of block-wise FP8 are quantized per token and 128-column group by other
    // engines; tessera multiplies FP8 weights with unrounded activations.
    s.act_note = "activations per token-group: run unquantized";
  } else {
    s.strategy = "tensor";
    if (act == "static")
      s.act = ActQuant::kStatic;
    else
      s.act_note = "activations dynamic per tensor: run unquantized";
  }
  return s;
}

QuantScheme ParseGptq(const json& q, bool* v1_zeros) {
  QuantScheme s;
  s.bits = static_cast<int>(IntOr(q, "bits", 4));
  if (s.bits != 4 && s.bits != 8) Unsupported(fmt::format("gptq bits {} is not supported (4 and 8 are)", s.bits));
  s.kind = s.bits == 4 ? QuantKind::kInt4 : QuantKind::kInt8;
  s.group_size = IntOr(q, "group_size", 128);
  if (s.group_size == 0 || s.group_size < -1)
    Fail(ErrorKind::kCorrupt, "quantization_config: gptq group_size {} (expected -1 or > 0)", s.group_size);
  s.strategy = s.group_size == -1 ? "channel" : "group";
  s.symmetric = BoolOr(q, "sym", true);
  const std::string cf = StrOr(q, "checkpoint_format", "gptq");
  if (cf != "gptq" && cf != "gptq_v2")
    Unsupported(fmt::format("gptq checkpoint_format \"{}\" is not supported (gptq, gptq_v2 are)", cf));
  *v1_zeros = cf == "gptq";
  if (q.contains("dynamic") && !q["dynamic"].is_null() && !q["dynamic"].empty())
    Unsupported("gptq \"dynamic\" per-module overrides are not supported");
  if (BoolOr(q, "lm_head", false)) Unsupported("gptq with a quantized lm_head is not supported");
  return s;
}

QuantScheme ParseAwq(const json& q) {
  QuantScheme s;
  s.bits = static_cast<int>(IntOr(q, "bits", IntOr(q, "w_bit", 4)));
  if (s.bits != 4) Unsupported(fmt::format("awq bits {} is not supported (4 is)", s.bits));
  s.kind = QuantKind::kInt4;
  const std::string version = StrOr(q, "version", "gemm");
  if (version != "gemm" && version != "GEMM")
    Unsupported(fmt::format("awq version \"{}\" is not supported (gemm is)", version));
  s.group_size = IntOr(q, "group_size", IntOr(q, "q_group_size", 128));
  if (s.group_size == 0 || s.group_size < -1)
    Fail(ErrorKind::kCorrupt, "quantization_config: awq group_size {} (expected -1 or > 0)", s.group_size);
  s.strategy = s.group_size == -1 ? "channel" : "group";
  s.symmetric = !BoolOr(q, "zero_point", true);
  return s;
}

// One compressed-tensors QuantizationScheme (a config_groups entry).
QuantScheme ParseCtScheme(const std::string& name, const json& g, const std::string& top_format) {
  QuantScheme s;
  s.format = StrOr(g, "format", top_format);
  s.targets = StrList(g, "targets");
  if (s.targets.empty()) Fail(ErrorKind::kCorrupt, "quantization_config: config group {} has no targets", name);
  if (!g.contains("weights") || !g["weights"].is_object())
    Unsupported(fmt::format("compressed-tensors group {} without weight quantization", name));
  if (g.contains("output_activations") && !g["output_activations"].is_null())
    Unsupported(fmt::format("compressed-tensors group {}: output_activations quantization", name));
  const json& w = g["weights"];
  const std::string type = StrOr(w, "type", "int");
  s.bits = static_cast<int>(IntOr(w, "num_bits", 8));
  s.symmetric = BoolOr(w, "symmetric", true);
  s.group_size = IntOr(w, "group_size", 0);
  s.strategy = StrOr(w, "strategy", s.group_size > 0 ? "group" : s.group_size == -1 ? "channel" : "tensor");
  if (s.strategy == "group" && s.group_size <= 0)
    Fail(ErrorKind::kCorrupt, "quantization_config: group {} has strategy group without a group_size", name);
  if (s.strategy == "block") {
    const json& b = w.contains("block_structure") ? w["block_structure"] : json();
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer())
      Fail(ErrorKind::kCorrupt, "quantization_config: group {} has strategy block without block_structure", name);
    s.block_rows = b[0].get<int64_t>();
    s.block_cols = b[1].get<int64_t>();
  } else if (s.strategy != "tensor" && s.strategy != "channel" && s.strategy != "group") {
    Unsupported(fmt::format("compressed-tensors weight strategy \"{}\" (group {})", s.strategy, name));
  }
  if (w.contains("dynamic") && w["dynamic"].is_boolean() && w["dynamic"].get<bool>())
    Unsupported(fmt::format("compressed-tensors dynamic weight quantization (group {})", name));
  const std::string actorder = w.contains("actorder") && w["actorder"].is_boolean()
                                   ? (w["actorder"].get<bool>() ? "group" : "")
                                   : StrOr(w, "actorder", "");
  if (!actorder.empty() && actorder != "group" && actorder != "dynamic" && actorder != "weight" && actorder != "static")
    Unsupported(fmt::format("compressed-tensors actorder \"{}\"", actorder));
  if (type == "int") {
    if (s.bits != 4 && s.bits != 8)
      Unsupported(fmt::format("compressed-tensors int{} weights (int4 and int8 are supported)", s.bits));
    s.kind = s.bits == 4 ? QuantKind::kInt4 : QuantKind::kInt8;
    if (s.format == "pack-quantized") {
      // int4 / int8 packed into int32 words.
    } else if (s.format == "int-quantized" || s.format == "naive-quantized") {
      if (s.bits != 8) Unsupported(fmt::format("compressed-tensors {} with {} bits", s.format, s.bits));
    } else {
      Unsupported(fmt::format("compressed-tensors format \"{}\" for int weights", s.format));
    }
    if (s.strategy == "block") Unsupported("compressed-tensors int weights with strategy block");
  } else if (type == "float") {
    if (s.bits != 8) Unsupported(fmt::format("compressed-tensors float{} weights (fp8 is supported)", s.bits));
    if (s.format != "float-quantized" && s.format != "naive-quantized")
      Unsupported(fmt::format("compressed-tensors format \"{}\" for float weights", s.format));
    if (!s.symmetric) Unsupported("compressed-tensors asymmetric fp8 weights");
    if (s.strategy == "group") Unsupported("compressed-tensors fp8 weights with strategy group");
    s.kind = QuantKind::kFp8;
  } else {
    Unsupported(fmt::format("compressed-tensors weight type \"{}\"", type));
  }
  if (g.contains("input_activations") && !g["input_activations"].is_null()) {
    const json& a = g["input_activations"];
    const std::string atype = StrOr(a, "type", "int");
    const int abits = static_cast<int>(IntOr(a, "num_bits", 8));
    if (abits != 8 || atype != type)
      Unsupported(fmt::format("compressed-tensors input activations {}{} with {}{} weights", atype, abits, type,
                              s.bits));
    if (!BoolOr(a, "symmetric", true)) Unsupported("compressed-tensors asymmetric input activations");
    const bool dynamic = a.contains("dynamic") && (a["dynamic"].is_string() || BoolOr(a, "dynamic", false));
    const std::string astrat = StrOr(a, "strategy", dynamic ? "token" : "tensor");
    if (!dynamic && astrat == "tensor")
      s.act = ActQuant::kStatic;
    else if (dynamic && astrat == "token")
      s.act = ActQuant::kDynamicPerToken;
    else if (dynamic && (astrat == "group" || astrat == "tensor"))
      s.act_note = fmt::format("activations dynamic per {}: run unquantized", astrat);
    else
      Unsupported(fmt::format("compressed-tensors input activations {} {}", dynamic ? "dynamic" : "static", astrat));
  }
  return s;
}

bool TargetMatches(const std::string& target, const std::string& module) {
  if (target == "Linear") return true;  // every module tessera quantizes is a Linear
  if (target.rfind("re:", 0) == 0) {
    try {
      // Python's re.match: anchored at the start, not at the end.
      return std::regex_search(module, std::regex("^(?:" + target.substr(3) + ")"));
    } catch (const std::regex_error&) {
      Fail(ErrorKind::kCorrupt, "quantization_config: target \"{}\" is not a valid regular expression", target);
    }
  }
  return target == module;
}

}  // namespace

QuantConfig ParseQuantConfig(const json& config) {
  QuantConfig c;
  const json* q = nullptr;
  if (config.contains("quantization_config") && !config["quantization_config"].is_null())
    q = &config["quantization_config"];
  else if (config.contains("text_config") && config["text_config"].is_object() &&
           config["text_config"].contains("quantization_config"))
    q = &config["text_config"]["quantization_config"];
  if (!q) return c;
  if (!q->is_object()) Fail(ErrorKind::kCorrupt, "quantization_config is not an object");
  const std::string method = StrOr(*q, "quant_method", "");
  if (method == "fp8") {
    c.method = QuantMethod::kFp8;
    c.schemes.push_back(ParseFp8(*q));
    c.ignore = StrList(*q, q->contains("modules_to_not_convert") ? "modules_to_not_convert" : "ignored_layers");
  } else if (method == "gptq") {
    c.method = QuantMethod::kGptq;
    c.schemes.push_back(ParseGptq(*q, &c.gptq_v1_zeros));
    if (q->contains("desc_act")) BoolOr(*q, "desc_act", false);  // type check; g_idx carries the order
  } else if (method == "awq") {
    c.method = QuantMethod::kAwq;
    c.schemes.push_back(ParseAwq(*q));
    c.ignore = StrList(*q, "modules_to_not_convert");
  } else if (method == "compressed-tensors") {
    c.method = QuantMethod::kCompressedTensors;
    const std::string format = StrOr(*q, "format", "");
    if (q->contains("sparsity_config") && !(*q)["sparsity_config"].is_null() && !(*q)["sparsity_config"].empty())
      Unsupported("compressed-tensors sparsity_config (sparse weights)");
    if (q->contains("transform_config") && !(*q)["transform_config"].is_null())
      Unsupported("compressed-tensors transform_config");
    if (const std::string status = StrOr(*q, "quantization_status", "compressed"); status != "compressed")
      Unsupported(fmt::format("compressed-tensors quantization_status \"{}\" (compressed is)", status));
    if (!q->contains("config_groups") || !(*q)["config_groups"].is_object() || (*q)["config_groups"].empty())
      Fail(ErrorKind::kCorrupt, "quantization_config: compressed-tensors without config_groups");
    for (const auto& [name, g] : (*q)["config_groups"].items()) c.schemes.push_back(ParseCtScheme(name, g, format));
    c.ignore = StrList(*q, "ignore");
    if (q->contains("kv_cache_scheme") && !(*q)["kv_cache_scheme"].is_null())
      Unsupported("compressed-tensors kv_cache_scheme (quantized KV cache)");
  } else if (method.empty()) {
    Fail(ErrorKind::kCorrupt, "quantization_config has no quant_method");
  } else {
    Unsupported(fmt::format("quant_method \"{}\" is not supported (fp8, gptq, awq, compressed-tensors are)", method));
  }
  return c;
}

const QuantScheme& QuantConfig::SchemeFor(const std::string& module) const {
  if (schemes.size() == 1 && method != QuantMethod::kCompressedTensors) return schemes[0];
  for (const QuantScheme& s : schemes)
    for (const std::string& t : s.targets)
      if (TargetMatches(t, module)) return s;
  Fail(ErrorKind::kCorrupt, "quantization_config: module {} is stored quantized but no config group targets it",
       module);
}

std::string QuantConfig::Describe() const {
  if (method == QuantMethod::kNone) return "none";
  const char* names[] = {"none", "fp8", "gptq", "awq", "compressed-tensors"};
  std::string out = names[static_cast<int>(method)];
  for (size_t i = 0; i < schemes.size(); ++i) {
    const QuantScheme& s = schemes[i];
    out += i ? "; " : " ";
    out += QuantKindName(s.kind);
    if (s.strategy == "block")
      out += fmt::format(" block [{}, {}]", s.block_rows, s.block_cols);
    else if (s.strategy == "group")
      out += fmt::format(" group {}", s.group_size);
    else
      out += " per " + s.strategy;
    if (s.kind != QuantKind::kFp8) out += s.symmetric ? " symmetric" : " asymmetric";
    if (s.act == ActQuant::kDynamicPerToken) out += ", W8A8 (activations per token)";
    if (s.act == ActQuant::kStatic) out += ", W8A8 (static activation scale)";
    if (!s.act_note.empty()) out += " (" + s.act_note + ")";
  }
  return out;
}

QuantKind ParseLoadQuantization(const std::string& name) {
  if (name.empty() || name == "none") return QuantKind::kNone;
  if (name == "fp8") return QuantKind::kFp8;
  if (name == "int8") return QuantKind::kInt8;
  if (name == "int4") return QuantKind::kInt4;
  Fail(ErrorKind::kInvalidArgument, "--quantization \"{}\": expected none, fp8, int8 or int4", name);
}

}  // namespace tessera
