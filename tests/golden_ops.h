// The golden-op table of the generic golden test (tests/golden_test.cpp, tests/golden/README.md).
// An entry maps a file's `op` to a function that runs our op on the file's `in.*` tensors (already
// Vars that require grad, in the target's dtype and on its device) and returns the outputs by the
// names the file uses after "out." ("o", "final_state", ...). The runner does the rest: backward
// from `grad_out.*`, comparison of `out.*` and `grad_in.*`. A new op family adds one line.
//   GoldenOutputs golden_attention(const GoldenCase& c) {
//     return {{"o", attention(c.input("q"), c.input("k"), c.input("v"), params_from(c))}};
//   }
#pragma once
#include <map>
#include <string>

#include "autograd/tape.h"
#include "core/safetensors.h"

namespace hyb {

struct GoldenCase {
  const SafetensorsFile& file;
  std::map<std::string, Var> inputs;  // "q" -> the file's "in.q"
  Device device;
  DType dtype;

  const Var& input(const std::string& name) const;  // error names the file and the tensor
  // Metadata values; a missing key or a malformed number is an error naming the file and the key.
  const std::string& meta(const std::string& key) const;
  double meta_double(const std::string& key) const;
  int64_t meta_int(const std::string& key) const;
};

using GoldenOutputs = std::map<std::string, Var>;
using GoldenOpFn = GoldenOutputs (*)(const GoldenCase&);

struct GoldenOp {
  const char* name;  // the file's metadata `op`
  GoldenOpFn run;
};

// The op of that name, or nullptr when the project does not implement it yet.
const GoldenOp* find_golden_op(const std::string& name);

}  // namespace hyb
