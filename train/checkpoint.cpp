#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/fault.h"
#include "core/sha256.h"

namespace hyb {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%07lld", static_cast<long long>(step));
  return buf;
}

static std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  HYB_CHECK(in, p.string(), ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos &&
        fs::exists(e.path() / "trainer_state.json"))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());  // zero-padded step numbers sort in step order
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string save_checkpoint(const std::string& root, const CheckpointContents& c, const Module& model,
                            const AdamWState* optimizer, int keep_last) {
  HYB_CHECK(keep_last >= 1, "save_checkpoint: keep_last must be >= 1, got ", keep_last);
  fs::create_directories(root);
  // Leftovers of an interrupted save are never complete: remove them.
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().extension() == ".tmp") fs::remove_all(e.path());
  const fs::path final_dir = fs::path(root) / checkpoint_name(c.step);
  const fs::path tmp = fs::path(root) / (checkpoint_name(c.step) + ".tmp");
  fs::create_directories(tmp);

  write_file_atomic((tmp / "config.json").string(), c.config_text);
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const auto& p : model.named_parameters()) weights.emplace_back(p.name, p.var.data());
  save_safetensors((tmp / "model.safetensors").string(), weights,
                   {{"format", "hybrid"}, {"config_sha256", c.config_sha256}, {"step", std::to_string(c.step)}});
  if (optimizer) {
    save_safetensors((tmp / "optimizer.safetensors").string(), optimizer->tensors,
                     {{"format", "hybrid"}, {"config_sha256", c.config_sha256}, {"adam_t", std::to_string(optimizer->t)}});
  }
  fault_point("checkpoint.partial");
  json state = c.trainer_state;
  state["step"] = c.step;
  state["config_sha256"] = c.config_sha256;
  // trainer_state.json last: its presence marks the files above as complete.
  write_file_atomic((tmp / "trainer_state.json").string(), state.dump(2) + "\n");
  fsync_directory(tmp.string());
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_directory(root);

  auto all = list_checkpoints(root);
  for (size_t i = 0; i + size_t(keep_last) < all.size(); ++i) fs::remove_all(all[i]);
  fault_point("checkpoint.written");
  return final_dir.string();
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  LoadedCheckpoint ck;
  ck.dir = dir;
  const fs::path d(dir);
  HYB_CHECK(fs::is_directory(d), dir, ": not a checkpoint directory");
  HYB_CHECK(fs::exists(d / "trainer_state.json"), dir, ": trainer_state.json is missing (an incomplete checkpoint?)");
  try {
    ck.trainer_state = json::parse(read_text(d / "trainer_state.json"));
  } catch (const json::exception& e) {
    throw Error(str_cat((d / "trainer_state.json").string(), ": invalid JSON: ", e.what()));
  }
  HYB_CHECK(ck.trainer_state.contains("config_sha256") && ck.trainer_state.contains("step"),
            (d / "trainer_state.json").string(), ": missing config_sha256 or step");
  ck.config_sha256 = ck.trainer_state["config_sha256"].get<std::string>();
  ck.step = ck.trainer_state["step"].get<int64_t>();
  ck.config_text = read_text(d / "config.json");
  return ck;
}

void load_model_weights(const Module& model, const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  auto params = model.named_parameters();
  for (const auto& p : params) {
    HYB_CHECK(f.has(p.name), path, ": ", p.name, " is missing (the model expects ", shape_str(p.var.shape()), ")");
    const Tensor& t = f.get(p.name);
    HYB_CHECK(t.shape() == p.var.shape(), path, ": ", p.name, " is ", shape_str(t.shape()), ", model expects ",
              shape_str(p.var.shape()));
    p.var.data().copy_(t);
  }
  for (const auto& [name, t] : f.tensors) {
    bool known = std::any_of(params.begin(), params.end(), [&](const NamedParameter& p) { return p.name == name; });
    HYB_CHECK(known, path, ": ", name, " ", shape_str(t.shape()), " is not a parameter of this model");
  }
}

AdamWState read_optimizer_state(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  HYB_CHECK(f.metadata.count("adam_t"), path, ": metadata adam_t is missing");
  return {std::move(f.tensors), std::stoll(f.metadata.at("adam_t"))};
}

}  // namespace hyb
