#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "autograd/gradcheck.h"
#include "layers/mlp/mlp.h"
#include "train/checkpoint.h"

using namespace hyb;
namespace fs = std::filesystem;

static std::string fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / "hybrid_tests" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

static CheckpointContents contents(int64_t step) {
  return {"{\"name\": \"t\"}\n", "abc123", step, {{"cursor", step * 10}}};
}

TEST_CASE("a checkpoint restores weights and optimizer state exactly", "[train][checkpoint]") {
  std::string root = fresh_dir("ckpt_roundtrip");
  SwigluMlp a(4, 8, 0.3, 0.1);
  a.initialize(1);
  std::vector<OptimParam> ps;
  for (auto& p : a.named_parameters()) {
    p.var.set_grad(random_tensor(p.var.shape(), 3, DType::f32));
    ps.push_back({p.name, p.var, 0.1});
  }
  AdamW opt(ps, {.lr = 0.01});
  opt.step(1.0);
  const AdamWState state = opt.state();
  std::string dir = save_checkpoint(root, contents(7), a, &state, 3);
  REQUIRE(fs::path(dir).filename() == "step_0000007");

  SwigluMlp b(4, 8, 0.3, 0.1);
  b.initialize(2);
  std::vector<OptimParam> pb;
  for (auto& p : b.named_parameters()) pb.push_back({p.name, p.var, 0.1});
  AdamW opt_b(pb, {.lr = 0.01});
  LoadedCheckpoint ck = load_checkpoint(dir);
  REQUIRE(ck.step == 7);
  REQUIRE(ck.trainer_state["cursor"] == 70);
  load_model_weights(b, dir + "/model.safetensors");
  const std::string opt_path = dir + "/optimizer.safetensors";
  opt_b.load_state(read_optimizer_state(opt_path), opt_path);
  REQUIRE(opt_b.steps() == 1);
  auto pa = a.named_parameters(), pbn = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) REQUIRE(pa[i].var.data().to_double_vector() == pbn[i].var.data().to_double_vector());
  auto sa = opt.state().tensors, sb = opt_b.state().tensors;
  for (size_t i = 0; i < sa.size(); ++i) REQUIRE(sa[i].second.to_double_vector() == sb[i].second.to_double_vector());
}

TEST_CASE("only the newest keep_last checkpoints remain and a leftover .tmp is ignored and removed", "[train][checkpoint]") {
  std::string root = fresh_dir("ckpt_keep");
  SwigluMlp m(2, 4, 0.3, 0.1);
  m.initialize(1);
  for (int64_t s : {1, 2, 3, 4}) save_checkpoint(root, contents(s), m, nullptr, 2);
  auto all = list_checkpoints(root);
  REQUIRE(all.size() == 2);
  REQUIRE(fs::path(all[0]).filename() == "step_0000003");
  // A save killed midway leaves a .tmp directory behind: never listed, removed by the next save.
  fs::create_directories(fs::path(root) / "step_0000005.tmp");
  REQUIRE(fs::path(*latest_checkpoint(root)).filename() == "step_0000004");
  save_checkpoint(root, contents(6), m, nullptr, 2);
  REQUIRE_FALSE(fs::exists(fs::path(root) / "step_0000005.tmp"));
}

TEST_CASE("a truncated or mismatched checkpoint is refused naming the file and tensor", "[train][checkpoint]") {
  std::string root = fresh_dir("ckpt_bad");
  SwigluMlp m(4, 8, 0.3, 0.1);
  m.initialize(1);
  std::string dir = save_checkpoint(root, contents(1), m, nullptr, 3);
  std::string w = dir + "/model.safetensors";
  SwigluMlp wider(4, 9, 0.3, 0.1);
  REQUIRE_THROWS_WITH(load_model_weights(wider, w),
                      Catch::Contains("gate_proj.weight is (8, 4), model expects (9, 4)"));
  auto size = fs::file_size(w);
  fs::resize_file(w, size - 16);
  REQUIRE_THROWS_WITH(load_model_weights(m, w), Catch::Contains(w) && Catch::Contains("truncated"));
  fs::remove(dir + "/trainer_state.json");
  REQUIRE_THROWS_WITH(load_checkpoint(dir), Catch::Contains("trainer_state.json is missing"));
}
