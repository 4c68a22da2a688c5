// Interop with Python's `safetensors` package (tools/safetensors_interop.py): our files load there,
// theirs load here. Needs python3; the script installs safetensors and numpy from PyPI if missing.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "process.h"

using namespace hyb;
namespace fs = std::filesystem;

namespace {

// Element i of tensor k is (i % 97) * 0.25 - k; integer dtypes take |floor| of it.
template <typename T>
Tensor pattern(const Shape& s, int k) {
  std::vector<T> v;
  for (int64_t i = 0; i < shape_numel(s); ++i) {
    const double x = double(i % 97) * 0.25 - k;
    v.push_back(std::is_integral_v<T> ? T(std::abs(std::floor(x))) : T(x));
  }
  return Tensor::from_vector<T>(v, s);
}

std::vector<std::pair<std::string, Tensor>> tensors() {
  return {{"a.f32", pattern<float>({3, 5}, 0)},
          {"b.f64", pattern<double>({7}, 1)},
          {"c.i32", pattern<int32_t>({2, 3}, 2)},
          {"d.i64", pattern<int64_t>({4}, 3)},
          {"e.u16", pattern<uint16_t>({2, 2, 2}, 4)}};
}

}  // namespace

TEST_CASE("files we write load in Python's safetensors, and files it writes load here", "[core][safetensors][python]") {
  fs::path dir = fs::temp_directory_path() / "hybrid_tests";
  fs::create_directories(dir);
  const std::string ours = (dir / "ours.safetensors").string(), theirs = (dir / "theirs.safetensors").string();
  const std::string script = std::string(HYBRID_SOURCE_DIR) + "/tools/safetensors_interop.py";
  save_safetensors(ours, tensors(), {{"format", "hybrid"}, {"step", "7"}});
  ProcessResult check = run_process({"python3", script, "check", ours});
  INFO(check.output);
  REQUIRE(check.exit_code == 0);
  REQUIRE(check.output.find("loaded 5 tensors") != std::string::npos);

  ProcessResult write = run_process({"python3", script, "write", theirs});
  INFO(write.output);
  REQUIRE(write.exit_code == 0);
  SafetensorsFile f = load_safetensors(theirs);
  REQUIRE(f.metadata.at("format") == "python");
  for (const auto& [name, t] : tensors()) {
    REQUIRE(f.get(name).dtype() == t.dtype());
    REQUIRE(f.get(name).to_double_vector() == t.to_double_vector());
  }
}
