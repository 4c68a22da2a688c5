#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "autograd/gradcheck.h"
#include "core/safetensors.h"

using namespace hyb;
namespace fs = std::filesystem;

static std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / "hybrid_tests";
  fs::create_directories(dir);
  return (dir / name).string();
}

static std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("safetensors round trip is bit-identical for every dtype and keeps metadata", "[core][safetensors]") {
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("a.f32", random_tensor({3, 5}, 1, DType::f32));
  ts.emplace_back("b.f64", random_tensor({7}, 2, DType::f64));
  ts.emplace_back("c.bf16", random_tensor({2, 2, 3}, 3, DType::f32).to(DType::bf16));
  ts.emplace_back("d.i32", Tensor::from_vector<int32_t>({-5, 7, 1 << 30}, {3}));
  ts.emplace_back("e.i64", Tensor::from_vector<int64_t>({int64_t(1) << 40, -1}, {2}));
  ts.emplace_back("f.u16", Tensor::from_vector<uint16_t>({0, 65535, 50256}, {3}));
  ts.emplace_back("g.strided", random_tensor({4, 6}, 4, DType::f32).transpose(0, 1));
  std::string p = temp_path("roundtrip.safetensors");
  save_safetensors(p, ts, {{"format", "hybrid"}, {"step", "500"}});
  SafetensorsFile f = load_safetensors(p);
  REQUIRE(f.metadata.at("format") == "hybrid");
  REQUIRE(f.metadata.at("step") == "500");
  REQUIRE(f.tensors.size() == ts.size());
  for (const auto& [name, t] : ts) {
    const Tensor& r = f.get(name);
    REQUIRE(r.dtype() == t.dtype());
    REQUIRE(r.shape() == t.shape());
    Tensor c = t.contiguous();
    REQUIRE(std::memcmp(r.raw_data(), c.raw_data(), c.nbytes()) == 0);
  }
  // Writing what was read gives the same bytes.
  std::string p2 = temp_path("roundtrip2.safetensors");
  std::vector<std::pair<std::string, Tensor>> back(f.tensors.begin(), f.tensors.end());
  std::sort(back.begin(), back.end(), [&](auto& a, auto& b) {
    auto ia = std::find_if(ts.begin(), ts.end(), [&](auto& x) { return x.first == a.first; });
    auto ib = std::find_if(ts.begin(), ts.end(), [&](auto& x) { return x.first == b.first; });
    return ia < ib;
  });
  save_safetensors(p2, back, f.metadata);
  REQUIRE(read_bytes(p) == read_bytes(p2));
}

TEST_CASE("a truncated safetensors file is refused with the file and tensor named", "[core][safetensors]") {
  std::string p = temp_path("trunc.safetensors");
  save_safetensors(p, {{"w", random_tensor({64, 64}, 5, DType::f32)}});
  std::string bytes = read_bytes(p);
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size() - 100));
  }
  REQUIRE_THROWS_WITH(load_safetensors(p), Catch::Contains(p) && Catch::Contains("tensor w") && Catch::Contains("truncated"));
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 20);
  }
  REQUIRE_THROWS_WITH(load_safetensors(p), Catch::Contains(p) && Catch::Contains("header length"));
}

TEST_CASE("a malformed safetensors header is refused", "[core][safetensors]") {
  std::string p = temp_path("bad.safetensors");
  auto write = [&](const std::string& header) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    uint64_t n = header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(16, '\0');
  };
  write("{not json");
  REQUIRE_THROWS_WITH(load_safetensors(p), Catch::Contains("malformed"));
  write(R"({"x":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})");
  REQUIRE_THROWS_WITH(load_safetensors(p), Catch::Contains("tensor x") && Catch::Contains("unsupported dtype"));
  write(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})");
  REQUIRE_THROWS_WITH(load_safetensors(p), Catch::Contains("tensor x") && Catch::Contains("needs 12"));
}

TEST_CASE("the atomic writer leaves no temporary file behind", "[core][safetensors]") {
  std::string p = temp_path("atomic.json");
  write_file_atomic(p, "{\"step\": 1}");
  REQUIRE(read_bytes(p) == "{\"step\": 1}");
  REQUIRE_FALSE(fs::exists(p + ".tmp"));
}
