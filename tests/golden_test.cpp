// The one generic golden test (tests/golden/README.md): every *.safetensors of the folder named by
// HYBRID_GOLDEN_DIR (default: the repository's tests/golden) is run through the golden-op table
// (golden_ops.h) on each target (device, dtype, tolerance); out.* and grad_in.* are compared by
// ||x - ref|| / ||ref||. A file whose op is not in the table is reported by name as skipped, never
// counted as passed; the test fails when a run op mismatches or when no file ran at all.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "compare.h"
#include "golden_ops.h"

using namespace hyb;

namespace {

struct GoldenTarget {
  const char* name;  // "cpu f32", for messages
  Device device;
  DType dtype;
  double tol;  // on the relative error of every compared tensor
};

std::string golden_dir() {
  if (const char* d = std::getenv("HYBRID_GOLDEN_DIR"); d && *d) return d;
  return std::string(HYBRID_SOURCE_DIR) + "/tests/golden";
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

struct CaseRun {
  std::vector<std::string> failures;
  double worst = 0;  // largest relative error over the compared tensors
};

CaseRun run_case(const SafetensorsFile& f, const GoldenOp& op, const GoldenTarget& t) {
  CaseRun run;
  GoldenCase c{f, {}, t.device, t.dtype};
  for (const auto& [name, tensor] : f.tensors)
    if (starts_with(name, "in.")) c.inputs.emplace(name.substr(3), Var(tensor.to(t.dtype).to(t.device), true));
  GoldenOutputs outs;
  try {
    outs = op.run(c);
    std::vector<Var> roots;
    std::vector<Tensor> droots;
    for (const auto& [name, tensor] : f.tensors) {
      if (!starts_with(name, "grad_out.")) continue;
      auto it = outs.find(name.substr(9));
      HYB_CHECK(it != outs.end(), "the file has ", name, " but the op returned no output ", name.substr(9));
      roots.push_back(it->second);
      droots.push_back(tensor.to(t.dtype).to(t.device));
    }
    if (!roots.empty()) backward(roots, droots);
  } catch (const std::exception& e) {
    clear_tape();
    run.failures.push_back(e.what());
    return run;
  }
  auto compare = [&](const std::string& name, const Tensor& got, const Tensor& ref) {
    if (!got.defined()) {
      run.failures.push_back(str_cat(name, ": the op produced nothing"));
      return;
    }
    if (got.shape() != ref.shape()) {
      run.failures.push_back(str_cat(name, ": shape ", shape_str(got.shape()), ", reference ", shape_str(ref.shape())));
      return;
    }
    const double err = rel_error(got, ref);
    run.worst = std::max(run.worst, err);
    if (!(err < t.tol)) run.failures.push_back(str_cat(name, ": relative error ", err, " >= ", t.tol));
  };
  for (const auto& [name, ref] : f.tensors) {
    if (starts_with(name, "out.")) {
      auto it = outs.find(name.substr(4));
      compare(name, it == outs.end() ? Tensor() : it->second.data(), ref);
    } else if (starts_with(name, "grad_in.")) {
      auto it = c.inputs.find(name.substr(8));
      compare(name, it == c.inputs.end() ? Tensor() : it->second.grad(), ref);
    }
  }
  return run;
}

// Runs the whole folder on every target; a [gpu] variant passes cuda targets (bf16 at 2e-2). With
// `only` set, files of other ops are skipped (reported by name, never counted as passed).
void run_golden_folder(const std::vector<GoldenTarget>& targets, const std::vector<std::string>& only = {}) {
  namespace fs = std::filesystem;
  const std::string dir = golden_dir();
  INFO("golden folder " << dir);
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());

  int passed = 0, failed = 0;
  std::string skipped;
  std::vector<double> worst_err(targets.size(), 0.0);
  for (const fs::path& path : files) {
    const std::string stem = path.stem().string();
    const SafetensorsFile f = load_safetensors(path.string());
    auto op_name = f.metadata.find("op");
    if (op_name == f.metadata.end()) {
      FAIL_CHECK(path.string() << ": __metadata__ has no op");
      ++failed;
      continue;
    }
    const GoldenOp* op = find_golden_op(op_name->second);
    if (op && !only.empty() && std::find(only.begin(), only.end(), op_name->second) == only.end()) {
      skipped += str_cat(skipped.empty() ? "" : ", ", stem, ": op ", op_name->second, " not in this run");
      continue;
    }
    if (!op) {
      WARN("golden: skipped " << stem << ": op " << op_name->second << " not implemented");
      skipped += str_cat(skipped.empty() ? "" : ", ", stem, ": op ", op_name->second, " not implemented");
      continue;
    }
    bool ok = true;
    for (size_t i = 0; i < targets.size(); ++i) {
      CaseRun run = run_case(f, *op, targets[i]);
      worst_err[i] = std::max(worst_err[i], run.worst);
      for (const std::string& msg : run.failures) {
        FAIL_CHECK("golden " << stem << " [" << targets[i].name << "]: " << msg);
        ok = false;
      }
    }
    ok ? ++passed : ++failed;
  }
  std::string errors;
  for (size_t i = 0; i < targets.size(); ++i)
    errors += str_cat(i ? ", " : "", targets[i].name, " ", worst_err[i]);
  WARN("golden: " << passed << " passed, " << (failed ? str_cat(failed, " failed, ") : std::string()) << files.size() -
           size_t(passed + failed) << " skipped (" << skipped << "); worst relative error " << errors);
  REQUIRE(passed + failed > 0);
}

}  // namespace

TEST_CASE("every golden file whose op is implemented matches its outputs and input gradients on the cpu",
          "[golden][cpu]") {
  run_golden_folder({{"cpu f64", Device::cpu(), DType::f64, 1e-10}, {"cpu f32", Device::cpu(), DType::f32, 1e-5}});
}

// The chunked CUDA kernels of the linear-recurrence ops on the same files. f32 at 1e-4: chunked fp32
// against the f64 golden recurrence; bf16 at 2e-2 (specs mamba2.md 6, gated_deltanet.md 6).
TEST_CASE("the golden simple_gla and gated_delta_rule files match on cuda in f32 and bf16", "[golden][gpu]") {
  run_golden_folder({{"cuda f32", Device::cuda(0), DType::f32, 1e-4}, {"cuda bf16", Device::cuda(0), DType::bf16, 2e-2}},
                    {"simple_gla", "gated_delta_rule"});
}

// The slot-memory kernels of gsa and nha (layers/gsa/slot_attention_cuda.h) on the same files; f32 at
// 1e-4 (chunked fp32 against the f64 golden recurrence), bf16 at the README's 2e-2.
TEST_CASE("the golden gsa and nha files match on cuda in f32 and bf16", "[golden][gpu]") {
  run_golden_folder({{"cuda f32", Device::cuda(0), DType::f32, 1e-4}, {"cuda bf16", Device::cuda(0), DType::bf16, 2e-2}},
                    {"gsa", "nha"});
}
