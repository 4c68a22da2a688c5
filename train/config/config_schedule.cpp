// Schedule keys and the warm-up/decay derivation. Token counts convert with ceil, fractions with
// floor (config.md 6.2, 6.4); any two units given must give the same number of steps.
#include "train/config/config_schedule.h"

#include <cmath>

namespace hyb {

namespace {

const std::vector<std::string> kAllTypes = {"warmup_cosine", "constant", "warmup_stable_decay", "plateau"};
const std::vector<std::string> kFinalRatioTypes = {"warmup_cosine", "warmup_stable_decay"};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One length given in up to three units (steps, tokens, fraction of the run), resolved into steps.
// Returns -1 when none is given.
int64_t derive_length(Json& s, const char* what, int64_t steps, int64_t tokens_per_step, bool mqar) {
  const std::string k_steps = str_cat(what, "_steps"), k_tokens = str_cat(what, "_tokens"), k_fraction = str_cat(what, "_fraction");
  const std::string path = "train.schedule.";
  if (mqar && !s[k_tokens].is_null())
    throw ConfigKeyError(path + k_tokens, cannot_be_used_problem(str_cat("data task is \"mqar\" (give ", k_steps, ")")));
  int64_t from_tokens = -1, from_fraction = -1;
  if (!s[k_tokens].is_null()) from_tokens = ceil_div(json_int(s[k_tokens]), tokens_per_step);
  if (!s[k_fraction].is_null()) from_fraction = int64_t(std::floor(s[k_fraction].get<double>() * double(steps)));
  if (from_tokens >= 0 && from_fraction >= 0 && from_tokens != from_fraction)
    throw ConfigKeyError(path + k_fraction,
                         expected_problem(str_cat("a fraction that agrees with ", k_tokens, " (", from_tokens, " steps)"), s[k_fraction]) +
                             str_cat(" (", from_fraction, " steps; give one of them)"));
  const int64_t derived = from_tokens >= 0 ? from_tokens : from_fraction;
  const char* from = from_tokens >= 0 ? k_tokens.c_str() : k_fraction.c_str();
  if (s[k_steps].is_null()) {
    if (derived >= 0) s[k_steps] = derived;
    return derived;
  }
  if (derived >= 0 && json_int(s[k_steps]) != derived)
    throw ConfigKeyError(path + k_steps, expected_problem(str_cat(derived, " (from ", from, ")"), s[k_steps]) +
                                             str_cat(" (give one of ", k_steps, " and ", from, ", or set the other to null)"));
  return json_int(s[k_steps]);
}

}  // namespace

const KeyTable kScheduleKeys{"schedule", "type", {
    {.name = "type", .type = KeyType::enumeration, .default_value = "warmup_cosine", .values = kAllTypes,
     .doc = "f(s) multiplies the peak lr at step s"},
    {.name = "warmup_steps", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(0),
     .default_doc = "null: from the next two, else 0", .doc = "W; below train.steps"},
    {.name = "warmup_tokens", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(0),
     .doc = "W = ceil(warmup_tokens / tokens per step)"},
    {.name = "warmup_fraction", .type = KeyType::number, .null = Null::off, .range = Range::closed_open(0, 1),
     .doc = "W = floor(warmup_fraction * steps)"},
    {.name = "start_ratio", .type = KeyType::number, .default_value = 0.0, .range = Range::closed(0, 1),
     .doc = "f at the start of the warm-up"},
    {.name = "final_ratio", .type = KeyType::number, .default_value = 0.1, .range = Range::closed(0, 1),
     .only_for = kFinalRatioTypes, .doc = "f at the last step"},
    {.name = "decay_steps", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .only_for = {"warmup_stable_decay"}, .default_doc = "null: from the next two (one of the three is required)",
     .doc = "D; the decay starts at steps - D, not before the warm-up ends"},
    {.name = "decay_tokens", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(1),
     .only_for = {"warmup_stable_decay"}, .doc = "D = ceil(decay_tokens / tokens per step)"},
    {.name = "decay_fraction", .type = KeyType::number, .null = Null::off, .range = Range::open_closed(0, 1),
     .only_for = {"warmup_stable_decay"}, .doc = "D = floor(decay_fraction * steps)"},
    {.name = "decay_shape", .type = KeyType::enumeration, .default_value = "linear", .values = {"linear", "cosine"},
     .only_for = {"warmup_stable_decay"}, .doc = "shape of the decay"},
    {.name = "factor", .type = KeyType::number, .default_value = 0.1, .range = Range::open(0, 1),
     .only_for = {"plateau"}, .doc = "multiplier of f on a plateau"},
    {.name = "patience", .type = KeyType::integer, .default_value = 10, .range = Range::at_least(0),
     .only_for = {"plateau"}, .doc = "validations without improvement before a reduction"},
    {.name = "threshold", .type = KeyType::number, .default_value = 1e-4, .range = Range::at_least(0),
     .only_for = {"plateau"}, .doc = "improvement needed"},
    {.name = "threshold_mode", .type = KeyType::enumeration, .default_value = "rel", .values = {"rel", "abs"},
     .only_for = {"plateau"}, .doc = "relative or absolute threshold"},
    {.name = "cooldown", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .only_for = {"plateau"}, .doc = "validations after a reduction during which bad ones do not count"},
    {.name = "min_ratio", .type = KeyType::number, .default_value = 0.0, .range = Range::closed(0, 1),
     .only_for = {"plateau"}, .doc = "floor of f"},
}};

void derive_schedule(Json& s, int64_t steps, int64_t tokens_per_step, bool mqar) {
  int64_t w = derive_length(s, "warmup", steps, tokens_per_step, mqar);
  if (w < 0) s["warmup_steps"] = w = 0;
  if (w >= steps)
    throw ConfigKeyError("train.schedule.warmup_steps",
                         expected_problem(str_cat("an integer below train.steps (", steps, ")"), s["warmup_steps"]));
  if (s["type"] != "warmup_stable_decay") return;
  const int64_t d = derive_length(s, "decay", steps, tokens_per_step, mqar);
  if (d < 0)
    throw ConfigKeyError("train.schedule.decay_steps", missing_key_problem("give decay_steps, decay_tokens or decay_fraction"));
  if (d < 1)
    throw ConfigKeyError("train.schedule.decay_steps", expected_problem("at least one decay step", s["decay_steps"]));
  if (steps - d < w)
    throw ConfigKeyError("train.schedule.decay_steps",
                         expected_problem(str_cat("at most train.steps - warmup_steps (", steps, " - ", w, " = ", steps - w,
                                                  "): the decay starts after the warm-up"),
                                          s["decay_steps"]));
}

ScheduleConfig schedule_config_from_json(const Json& s, int64_t steps) {
  ScheduleConfig c;
  c.type = s.at("type").get<std::string>();
  c.total_steps = steps;
  c.warmup_steps = json_int(s.at("warmup_steps"));
  c.start_ratio = s.at("start_ratio").get<double>();
  if (s.contains("final_ratio")) c.final_ratio = s.at("final_ratio").get<double>();
  if (c.type == "warmup_stable_decay") {
    c.decay_steps = json_int(s.at("decay_steps"));
    c.decay_shape = s.at("decay_shape").get<std::string>();
  }
  if (c.type == "plateau") {
    c.factor = s.at("factor").get<double>();
    c.patience = json_int(s.at("patience"));
    c.threshold = s.at("threshold").get<double>();
    c.threshold_mode = s.at("threshold_mode").get<std::string>();
    c.cooldown = json_int(s.at("cooldown"));
    c.min_ratio = s.at("min_ratio").get<double>();
  }
  return c;
}

}  // namespace hyb
