#include "eval/records.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hyb {

std::string format_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Record::Record(const std::string& kind, const RecordEnvelope& env) {
  add("v", int64_t(1));
  add("kind", kind);
  add("time", utc_now_iso8601());
  add("run", env.run);
  add("config_sha256", env.config_sha256);
  add("step", env.step);
  add("seed", int64_t(env.seed));
}

Record& Record::add(const std::string& key, double v) {
  if (!std::isfinite(v)) {
    nonfinite_.push_back(key);
    fields_.emplace_back(key, "null");
  } else {
    fields_.emplace_back(key, format_number(v));
  }
  return *this;
}

Record& Record::add(const std::string& key, int64_t v) {
  fields_.emplace_back(key, std::to_string(v));
  return *this;
}

Record& Record::add(const std::string& key, const std::string& v) {
  fields_.emplace_back(key, nlohmann::json(v).dump());
  return *this;
}

Record& Record::add(const std::string& key, bool v) {
  fields_.emplace_back(key, v ? "true" : "false");
  return *this;
}

Record& Record::add_raw(const std::string& key, const std::string& json_text) {
  fields_.emplace_back(key, json_text);
  return *this;
}

Record& Record::add(const std::string& key, const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + (std::isfinite(v[i]) ? format_number(v[i]) : "null");
  for (double x : v)
    if (!std::isfinite(x)) {
      nonfinite_.push_back(key);
      break;
    }
  fields_.emplace_back(key, s + "]");
  return *this;
}

std::string Record::line() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i)
    s += (i ? "," : "") + nlohmann::json(fields_[i].first).dump() + ":" + fields_[i].second;
  if (!nonfinite_.empty()) s += ",\"nonfinite\":" + nlohmann::json(nonfinite_).dump();
  return s + "}";
}

void append_record(const std::string& path, const Record& r) {
  FILE* f = std::fopen(path.c_str(), "a");
  HYB_CHECK(f, path, ": cannot open for appending");
  std::string l = r.line() + "\n";
  const bool ok = std::fwrite(l.data(), 1, l.size(), f) == l.size() && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  std::fclose(f);
  HYB_CHECK(ok, path, ": write failed");
}

}  // namespace hyb
