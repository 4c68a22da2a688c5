// nlohmann's parser reports syntax errors with line and column; duplicates are found by its parse
// callback, which sees every key and the start and end of every container, so a stack of open
// containers gives both the duplicate and its path.
#include "train/config/config_json.h"

#include <cstdio>
#include <set>

#include "core/safetensors.h"

namespace hyb {

namespace {

struct Container {
  bool is_object = false;
  std::set<std::string> keys;
  std::string key;    // the key being read (objects)
  size_t index = 0;   // the element being read (arrays)
};

std::string stack_path(const std::string& root, const std::vector<Container>& stack) {
  std::string path = root;
  for (const Container& c : stack) path = join_path(path, c.is_object ? c.key : str_cat("[", c.index, "]"));
  return path;
}

Json parse_checked(const std::string& text, const std::string& root) {
  std::vector<Container> stack;
  auto element_done = [&] {
    if (!stack.empty() && !stack.back().is_object) ++stack.back().index;
  };
  Json::parser_callback_t cb = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: stack.push_back({true, {}, {}, 0}); break;
      case Json::parse_event_t::array_start: stack.push_back({false, {}, {}, 0}); break;
      case Json::parse_event_t::key: {
        Container& c = stack.back();
        c.key = parsed.get<std::string>();
        if (!c.keys.insert(c.key).second) throw ConfigKeyError(stack_path(root, stack), "duplicate key");
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        stack.pop_back();
        element_done();
        break;
      case Json::parse_event_t::value: element_done(); break;
    }
    return true;
  };
  return Json::parse(text, cb);
}

}  // namespace

Json parse_json_no_duplicates(const std::string& text, const std::string& path) { return parse_checked(text, path); }

Json parse_config_json(const std::string& text, const std::string& source) {
  try {
    return parse_checked(text, "");
  } catch (const ConfigKeyError& e) {
    throw Error(format_config_error(source, e.path(), e));
  } catch (const Json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line L, column C: MESSAGE"
    const std::string what = e.what();
    size_t line = 0, column = 0;
    const size_t at = what.find("at line ");
    if (at != std::string::npos && std::sscanf(what.c_str() + at, "at line %zu, column %zu", &line, &column) == 2) {
      const size_t colon = what.find(": ", at);
      throw Error(str_cat(source, ":", line, ":", column, ": invalid JSON: ", what.substr(colon + 2)));
    }
    const size_t colon = what.find("] ");
    throw Error(str_cat(source, ": invalid JSON: ", colon == std::string::npos ? what : what.substr(colon + 2)));
  }
}

Json read_config_file(const std::string& path) { return parse_config_json(read_file(path), path); }

}  // namespace hyb
