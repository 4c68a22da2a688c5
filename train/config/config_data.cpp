// Data keys and file checks. Shard headers are read through data/shard.h; its own messages (bad
// magic, truncated file) are kept and placed after the config path.
#include "train/config/config_data.h"

#include <filesystem>

#include "data/shard.h"
#include "data/shard_glob.h"
#include "train/config/config_mqar.h"

namespace hyb {

namespace {

constexpr const char* kPatternsDoc = "shard paths or globs (*, ? and [...] in the last path component only)";

Json check_shard_patterns(const Json& v, const std::string& path) {
  auto check_one = [&](const Json& p, const std::string& at) {
    if (!p.is_string() || p.get<std::string>().empty()) throw ConfigKeyError(at, expected_problem(kPatternsDoc, p));
    const std::string s = p.get<std::string>();
    const size_t slash = s.rfind('/');
    if (slash != std::string::npos && s.find_first_of("*?[") < slash) throw ConfigKeyError(at, expected_problem(kPatternsDoc, p));
  };
  if (v.is_array()) {
    if (v.empty()) throw ConfigKeyError(path, expected_problem(kPatternsDoc, v));
    for (size_t i = 0; i < v.size(); ++i) check_one(v[i], str_cat(path, "[", i, "]"));
  } else {
    check_one(v, path);
  }
  return v;
}

Json check_mqar(const Json& v, const std::string& path) { return resolve_mqar(v, path); }

struct Shard {
  std::string file;
  int64_t tokens;
};

// The shards of data.train or data.val, with each pattern's own path for its errors.
std::vector<Shard> read_shards(const Json& patterns, const std::string& path) {
  std::vector<Shard> shards;
  const bool list = patterns.is_array();
  for (size_t i = 0; i < (list ? patterns.size() : 1); ++i) {
    const Json& p = list ? patterns[i] : patterns;
    const std::string at = list ? str_cat(path, "[", i, "]") : path;
    const std::string pattern = p.get<std::string>();
    std::vector<std::string> files = match_shard_pattern(pattern);
    const bool glob = pattern.find_first_of("*?[") != std::string::npos;
    if (files.empty() || (!glob && !std::filesystem::exists(pattern)))
      throw ConfigKeyError(at, expected_problem("shard files", p) + (glob ? " (no file matches)" : " (no such file)"));
    for (const std::string& f : files) {
      try {
        shards.push_back({f, read_shard_header(f).tokens});
      } catch (const Error& e) {
        std::string why = e.what();
        if (why.rfind(f + ": ", 0) == 0) why = why.substr(f.size() + 2);
        throw ConfigKeyError(at, expected_problem("a token shard", Json(f)) + str_cat(" (", why, ")"));
      }
    }
  }
  return shards;
}

// At least one window of T + 1 tokens in the stream (windows never cross shards).
void require_window(const std::vector<Shard>& shards, const Json& patterns, int64_t t, const std::string& path) {
  int64_t windows = 0, largest = 0;
  for (const Shard& s : shards) {
    windows += s.tokens > 0 ? (s.tokens - 1) / t : 0;
    largest = std::max(largest, s.tokens);
  }
  if (windows > 0) return;
  if (shards.size() == 1)
    throw ConfigKeyError(path, expected_problem(str_cat("a shard with at least ", t + 1, " tokens (seq_len + 1)"), Json(shards[0].file)) +
                                   str_cat(" (", shards[0].tokens, " tokens)"));
  throw ConfigKeyError(path, expected_problem(str_cat("a shard with at least ", t + 1, " tokens (seq_len + 1)"), patterns) +
                                 str_cat(" (", shards.size(), " shards of at most ", largest, " tokens)"));
}

}  // namespace

const KeyTable kDataKeys{"data", "task", {
    {.name = "task", .type = KeyType::enumeration, .default_value = "lm", .values = {"lm", "mqar"},
     .doc = "next-token prediction over token shards, or the MQAR task (eval.md 4)"},
    {.name = "tokenizer", .type = KeyType::enumeration, .default_value = "gpt2", .values = {"gpt2", "byte"},
     .only_for = {"lm"}, .doc = "the tokenizer that wrote the shards: GPT-2 BPE (50257 ids) or bytes (256 ids)"},
    {.name = "train", .type = KeyType::custom, .required = true, .only_for = {"lm"}, .check = check_shard_patterns,
     .type_doc = "string or list of strings", .doc = "shard paths or globs; a list is read in its order"},
    {.name = "val", .type = KeyType::custom, .null = Null::off, .only_for = {"lm"}, .check = check_shard_patterns,
     .type_doc = "string or list of strings", .doc = "validation shard paths or globs"},
    {.name = "val_fraction", .type = KeyType::number, .default_value = 0.0, .range = Range::closed_open(0, 0.5),
     .only_for = {"lm"}, .doc = "instead of `val`: hold out the last fraction of the training stream"},
    {.name = "seq_len", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "1024 for `lm`; the longest training segment for `mqar`", .doc = "T: a training window is T + 1 tokens"},
    {.name = "shuffle", .type = KeyType::boolean, .default_value = true, .only_for = {"lm"},
     .doc = "visit the training windows in a seeded random order each epoch"},
    {.name = "mqar", .type = KeyType::custom, .default_value = Json::object(), .only_for = {"mqar"}, .check = check_mqar,
     .type_doc = "object", .default_doc = "`{}`", .doc = "the MQAR task (keys below)"},
}};

Json resolve_data_section(const Json& data) {
  Json d = apply_key_table(kDataKeys, data, "data");
  if (d["task"] == "lm") {
    if (!d["val"].is_null() && d["val_fraction"].get<double>() > 0)
      throw ConfigKeyError("data.val_fraction", cannot_be_used_problem("data.val is given"));
    if (d["seq_len"].is_null()) d["seq_len"] = 1024;
    return d;
  }
  int64_t longest = 0;
  for (const Json& s : d["mqar"]["segments"]) longest = std::max(longest, json_int(s["seq_len"]));
  if (d["seq_len"].is_null()) d["seq_len"] = longest;
  else if (json_int(d["seq_len"]) != longest)
    throw ConfigKeyError("data.seq_len", expected_problem(str_cat("null or ", longest, " (the longest of data.mqar.segments)"), d["seq_len"]));
  return d;
}

DataFiles check_data_files(const Json& data) {
  DataFiles f;
  if (data["task"] != "lm") return f;
  const int64_t t = json_int(data["seq_len"]);
  std::vector<Shard> train = read_shards(data["train"], "data.train");
  std::vector<Shard> val;
  if (!data["val"].is_null()) val = read_shards(data["val"], "data.val");
  for (const Shard& s : train) f.train_tokens += s.tokens;

  const double fraction = data["val_fraction"].get<double>();
  if (fraction > 0) {
    // The last floor(f n) tokens of the training stream are the validation stream.
    const int64_t held = int64_t(fraction * double(f.train_tokens));
    if ((held > 0 ? (held - 1) / t : 0) < 1)
      throw ConfigKeyError("data.val_fraction",
                           expected_problem(str_cat("a fraction that holds out at least ", t + 1, " tokens (seq_len + 1)"), data["val_fraction"]) +
                               str_cat(" (", held, " of ", f.train_tokens, " tokens)"));
    int64_t cut = held;
    for (auto it = train.rbegin(); it != train.rend() && cut > 0; ++it) {
      const int64_t take = std::min(cut, it->tokens);
      it->tokens -= take;
      cut -= take;
    }
    f.train_tokens -= held;
    f.val_tokens = held;
  }
  require_window(train, data["train"], t, "data.train");
  if (!val.empty()) require_window(val, data["val"], t, "data.val");
  for (const Shard& s : train) f.train.push_back(s.file);
  for (const Shard& s : val) {
    f.val.push_back(s.file);
    f.val_tokens += s.tokens;
  }
  return f;
}

}  // namespace hyb
