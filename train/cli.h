// The `hybrid` subcommands. Each verb is one function in its own file; main.cpp lists them in one
// table. Args holds what follows the verb; parse errors throw hyb::Error naming the option.
//   int cmd_tokenize(Args& args) {
//     auto inputs = args.values("--input");  std::string out = args.value("--out");
//     double f = args.number("--val-fraction", 0.0);  args.finish();  ...
//   }
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hyb {

class Args {
 public:
  Args(std::string command, std::vector<std::string> argv) : command_(std::move(command)), argv_(std::move(argv)), used_(argv_.size(), false) {}
  // "--name VALUE" or "--name=VALUE": the last occurrence, or nullopt.
  std::optional<std::string> get(const std::string& name);
  std::string value(const std::string& name);                       // required
  std::string value(const std::string& name, const std::string& fallback);
  double number(const std::string& name, double fallback);
  int64_t integer(const std::string& name, int64_t fallback);
  std::vector<std::string> values(const std::string& name);         // every occurrence; "--input a b c" takes all until the next option
  std::vector<double> numbers(const std::string& name);             // values(name), each a number
  std::vector<int64_t> integers(const std::string& name);           // values(name), each an integer
  bool flag(const std::string& name);                                // present without a value
  std::vector<std::string> positional();                             // arguments not consumed by options
  // The first argument when it is not an option ("ops" of `hybrid bench ops --reps 5`), consumed.
  std::optional<std::string> subcommand();
  // Everything after a literal "--" (hybrid launch ... -- train ...).
  std::vector<std::string> rest_after_separator();
  void finish();  // an unconsumed option is an error naming it
  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::vector<std::string> argv_;
  std::vector<bool> used_;
  size_t end() const;
  double parse_number(const std::string& name, const std::string& text) const;
  int64_t parse_integer(const std::string& name, const std::string& text) const;
};

// The running hybrid binary (/proc/self/exe), for commands that start copies of it.
std::string hybrid_executable();

struct CliCommand {
  const char* name;
  const char* summary;
  int (*run)(Args& args);
};

}  // namespace hyb
