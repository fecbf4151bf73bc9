// tessera tests: a checker of the Prometheus text exposition format 0.0.4, written from the
// format's documentation (independent of src/server/metrics.cpp): HELP/TYPE comment lines, metric
// and label name grammar, label value escapes (\\ \" \n only), numeric values (+Inf -Inf NaN),
// one TYPE per family before its samples, no duplicate series, and histogram rules (le labels
// increasing, cumulative counts, a +Inf bucket equal to _count, _sum and _count present).
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing_metrics {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types, help;
  std::vector<Sample> samples;
  double Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const auto& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    return NAN;
  }
};

inline bool ParseNumber(const std::string& t, double* v) {
  if (t == "+Inf" || t == "Inf") return *v = INFINITY, true;
  if (t == "-Inf") return *v = -INFINITY, true;
  if (t == "NaN") return *v = NAN, true;
  if (t.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

inline bool CheckExposition(const std::string& text, Exposition* out, std::string* err) {
  Exposition local;
  Exposition& e = out != nullptr ? *out : local;
  auto fail = [&](const std::string& line, const std::string& why) {
    if (err != nullptr) *err = why + " in line: " + line;
    return false;
  };
  if (!text.empty() && text.back() != '\n') return fail("<end>", "text must end with a newline");
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kLabel("[a-zA-Z_][a-zA-Z0-9_]*");
  static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary", "untyped"};
  std::set<std::string> seen_series, families_with_samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream ls(line);
      std::string hash, kw, name;
      ls >> hash >> kw >> name;
      if (kw != "HELP" && kw != "TYPE") continue;  // a plain comment
      if (!std::regex_match(name, kName)) return fail(line, "bad metric name");
      std::string rest;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kw == "TYPE") {
        if (!kTypes.count(rest)) return fail(line, "unknown type");
        if (e.types.count(name)) return fail(line, "second TYPE line");
        if (families_with_samples.count(name)) return fail(line, "TYPE after samples");
        e.types[name] = rest;
      } else {
        std::string doc;
        for (size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] != '\\') {
            doc += rest[i];
            continue;
          }
          if (i + 1 >= rest.size()) return fail(line, "dangling backslash in HELP");
          char c = rest[++i];
          if (c == '\\')
            doc += '\\';
          else if (c == 'n')
            doc += '\n';
          else
            return fail(line, "bad escape in HELP");
        }
        if (e.help.count(name)) return fail(line, "second HELP line");
        e.help[name] = doc;
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!std::regex_match(s.name, kName)) return fail(line, "bad metric name");
    std::string series_key = s.name + "{";
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) return fail(line, "label without '='");
        std::string lname = line.substr(i, eq - i);
        if (!std::regex_match(lname, kLabel)) return fail(line, "bad label name '" + lname + "'");
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') return fail(line, "label value not quoted");
        ++i;
        std::string val;
        bool closed = false;
        while (i < line.size()) {
          char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) return fail(line, "dangling backslash");
            char d = line[i++];
            if (d == '\\')
              val += '\\';
            else if (d == '"')
              val += '"';
            else if (d == 'n')
              val += '\n';
            else
              return fail(line, "bad escape in label value");
          } else {
            val += c;
          }
        }
        if (!closed) return fail(line, "unterminated label value");
        if (s.labels.count(lname)) return fail(line, "repeated label");
        s.labels[lname] = val;
        if (i < line.size() && line[i] == ',')
          ++i;
        else if (i < line.size() && line[i] == '}')
          continue;
        else
          return fail(line, "expected ',' or '}'");
      }
    }
    for (const auto& [k, v] : s.labels) series_key += k + "=" + v + ",";
    if (i >= line.size() || line[i] != ' ') return fail(line, "missing value");
    std::istringstream vs(line.substr(i + 1));
    std::string value, ts, extra;
    vs >> value >> ts >> extra;
    if (!extra.empty()) return fail(line, "trailing text");
    if (!ParseNumber(value, &s.value)) return fail(line, "bad value '" + value + "'");
    if (!ts.empty() && !std::regex_match(ts, std::regex("-?[0-9]+"))) return fail(line, "bad timestamp");
    if (!seen_series.insert(series_key).second) return fail(line, "duplicate series");
    // Family: the name itself, or a histogram/summary base for _bucket/_sum/_count.
    std::string family = s.name;
    if (!e.types.count(family)) {
      for (const char* suf : {"_bucket", "_sum", "_count"}) {
        std::string sf(suf);
        if (s.name.size() > sf.size() && s.name.compare(s.name.size() - sf.size(), sf.size(), sf) == 0) {
          std::string base = s.name.substr(0, s.name.size() - sf.size());
          if (e.types.count(base) && (e.types[base] == "histogram" || e.types[base] == "summary"))
            family = base;
        }
      }
    }
    if (e.types.count(family) && e.types[family] == "histogram" && family == s.name)
      return fail(line, "histogram sample without _bucket/_sum/_count suffix");
    families_with_samples.insert(family);
    e.samples.push_back(std::move(s));
  }
  // Histogram rules, per series (labels without le).
  for (const auto& [family, type] : e.types) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> buckets;
    std::map<std::map<std::string, std::string>, double> counts;
    std::set<std::map<std::string, std::string>> sums;
    for (const auto& s : e.samples) {
      if (s.name == family + "_bucket") {
        auto it = s.labels.find("le");
        if (it == s.labels.end()) return fail(s.name, "bucket without le");
        double le;
        if (!ParseNumber(it->second, &le)) return fail(s.name, "bad le");
        auto key = s.labels;
        key.erase("le");
        buckets[key].emplace_back(le, s.value);
      } else if (s.name == family + "_count") {
        counts[s.labels] = s.value;
      } else if (s.name == family + "_sum") {
        sums.insert(s.labels);
      }
    }
    for (const auto& [key, bs] : buckets) {
      for (size_t i = 1; i < bs.size(); ++i) {
        if (!(bs[i].first > bs[i - 1].first)) return fail(family, "le not increasing");
        if (bs[i].second < bs[i - 1].second) return fail(family, "buckets not cumulative");
      }
      if (bs.empty() || !std::isinf(bs.back().first)) return fail(family, "no +Inf bucket");
      if (!counts.count(key) || counts[key] != bs.back().second) return fail(family, "+Inf bucket != _count");
      if (!sums.count(key)) return fail(family, "no _sum");
    }
  }
  return true;
}

}  // namespace tessera::testing_metrics
