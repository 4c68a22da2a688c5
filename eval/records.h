// JSONL records (eval.md 8.1): one object per line, keys in insertion order, floats as %.9g, a
// non-finite value written as null and its key listed in "nonfinite". Every record starts with
// the envelope v, kind, time, run, config_sha256, step, seed.
//   Record r("ppl", env);  r.add("loss", 3.21).add("windows", int64_t(64));  append_record(path, r);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hyb {

struct RecordEnvelope {
  std::string run;
  std::string config_sha256;
  int64_t step = 0;
  uint64_t seed = 0;
};

class Record {
 public:
  Record(const std::string& kind, const RecordEnvelope& env);
  Record& add(const std::string& key, double v);
  Record& add(const std::string& key, int64_t v);
  Record& add(const std::string& key, int v) { return add(key, int64_t(v)); }
  Record& add(const std::string& key, const std::string& v);
  Record& add(const std::string& key, const char* v) { return add(key, std::string(v)); }
  Record& add(const std::string& key, bool v);
  Record& add_raw(const std::string& key, const std::string& json_text);  // an already-serialised value
  Record& add(const std::string& key, const std::vector<double>& v);
  std::string line() const;  // without the trailing newline

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::string> nonfinite_;
};

std::string format_number(double v);  // %.9g
std::string utc_now_iso8601();
// Appends one line and flushes it to disk, so a crash loses at most the record being written.
void append_record(const std::string& path, const Record& r);

}  // namespace hyb
