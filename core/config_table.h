// Declarative key tables for config objects (config.md 2): each key's type, range or enum values,
// default, what null means, and its description. One table gives the checks, the defaults, the
// schema order of the resolved config and the rows of docs/configs.md; the owner of the object
// adds only its rules between keys.
//   const KeyTable kT{"schedule", "type", {   // noun, variant key, keys
//     {.name = "type", .type = KeyType::enumeration, .default_value = "constant", .values = {"constant", "plateau"}},
//     {.name = "factor", .type = KeyType::number, .default_value = 0.1, .range = Range::open(0, 1), .only_for = {"plateau"}}}};
//   Json out = apply_key_table(kT, in, "train.schedule");   // normalized, defaults filled, table order
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "core/config_error.h"

namespace hyb {

enum class KeyType {
  integer,      // an exact integer within +-2^53, written 4096, 4096.0 or 4.096e3 alike; stored as integer
  number,       // any number; stored as double
  boolean,
  string,
  enumeration,  // a string from `values`
  list,         // elements of type `elem` (integer, number or string) within `range`; `list_len` fixed when >= 0
  object,       // keys of `table`
  custom,       // checked by `check` alone
};

// What null means for a key (config.md 2.1): not allowed (a type error), derived during resolution,
// or "off".
enum class Null { error, derived, off };

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;

  static Range at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
  static Range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }      // [lo, hi]
  static Range closed_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
  static Range open_closed(double lo, double hi) { return {lo, hi, true, false}; }  // (lo, hi]
  static Range open(double lo, double hi) { return {lo, hi, true, true}; }          // (lo, hi)
  bool contains(double x) const;
  bool unbounded() const;
  std::string text() const;  // ">= 1", "> 0", "in [0, 1)"; "" when unbounded
};

struct KeyTable;

struct KeySpec {
  const char* name;
  KeyType type;
  Json default_value = nullptr;  // what an absent key becomes; null with Null::derived / Null::off
  bool required = false;         // absent is an error
  Null null = Null::error;
  Range range = {};
  std::vector<std::string> values = {};  // enumeration
  KeyType elem = KeyType::number;        // list elements
  int list_len = -1;
  const KeyTable* table = nullptr;       // object
  std::vector<std::string> only_for = {};  // values of the table's variant_key under which the key applies
  // Further checks after the type check (every type), and the whole check of a custom key: returns
  // the normalized value or throws ConfigKeyError with a path below `path`.
  Json (*check)(const Json& value, const std::string& path) = nullptr;
  const char* type_doc = nullptr;     // replaces the generated type text, in errors ("an even integer >= 4") and docs
  const char* default_doc = nullptr;  // replaces the generated default text in docs
  const char* doc = "";               // the meaning column of the docs
};

struct KeyTable {
  const char* noun;                // the object's name in "cannot be used here: schedule type is ..."
  const char* variant_key = nullptr;  // the key whose value decides which keys apply (only_for)
  std::vector<KeySpec> keys;

  const KeySpec* find(std::string_view name) const;
  std::vector<std::string> names() const;
};

// Checks `obj` (an object) against the table and returns it normalized, in table order: absent keys
// take their defaults, keys that do not apply under the variant key's value are left out, nested
// object keys are applied recursively. Errors are ConfigKeyError with paths under `path`.
Json apply_key_table(const KeyTable& table, const Json& obj, const std::string& path);
// The unknown-key check alone (with the suggestion of config.md 8.2 among the table's keys).
void check_known_keys(const KeyTable& table, const Json& obj, const std::string& path);
// One value against one key (type, range, values, check); null handled by the caller.
Json normalize_value(const KeySpec& spec, const Json& value, const std::string& path);

// "an integer >= 1", "one of \"dot\", \"cosine\"", with " or null" where null is allowed.
std::string type_description(const KeySpec& spec);
// Shorthands for the checkers of the owners.
void require_object(const Json& v, const std::string& path, std::string_view what = "an object");
int64_t json_int(const Json& v);  // a normalized integer value

// docs/configs.md rows: "| key | type | default | meaning |".
std::string key_table_markdown(const KeyTable& table);

}  // namespace hyb
