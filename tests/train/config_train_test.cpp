#include <catch2/catch.hpp>

#include "config_test_util.h"
#include "train/config/config_param_groups.h"

using namespace hyb;
using namespace hyb::config_test;

namespace {

std::string with_train(const std::string& train, const std::string& data = R"({"train": "t.bin", "val": "v.bin", "seq_len": 64})") {
  return R"({"model": {"d_model": 64, "num_layers": 2, "block": {"mixer": {"type": "attention", "num_heads": 2}}}, "data": )" + data +
         R"(, "train": )" + train + "}";
}

std::vector<std::string> keys_of(const Json& j) {
  std::vector<std::string> k;
  for (const auto& [key, v] : j.items()) k.push_back(key);
  return k;
}

}  // namespace

TEST_CASE("each schedule type resolves to exactly its keys", "[config][schedule]") {
  auto schedule = [](const std::string& s) {
    return resolve_no_files(with_train(R"({"batch_size": 4, "steps": 100, "eval_interval": 10, "optimizer": {"lr": 0.1}, "schedule": )" + s + "}"))
        .resolved["train"]["schedule"];
  };
  const std::vector<std::string> all = {"type", "warmup_steps", "warmup_tokens", "warmup_fraction", "start_ratio"};
  auto plus = [&](std::vector<std::string> extra) {
    std::vector<std::string> k = all;
    k.insert(k.end(), extra.begin(), extra.end());
    return k;
  };
  REQUIRE(keys_of(schedule(R"({})")) == plus({"final_ratio"}));
  REQUIRE(keys_of(schedule(R"({"type": "constant"})")) == all);
  REQUIRE(keys_of(schedule(R"({"type": "warmup_stable_decay", "decay_steps": 20})")) ==
          plus({"final_ratio", "decay_steps", "decay_tokens", "decay_fraction", "decay_shape"}));
  REQUIRE(keys_of(schedule(R"({"type": "plateau"})")) == plus({"factor", "patience", "threshold", "threshold_mode", "cooldown", "min_ratio"}));
  REQUIRE(schedule(R"({"type": "plateau"})")["patience"] == 10);
  REQUIRE(schedule(R"({})")["warmup_steps"] == 0);
}

TEST_CASE("warm-up and decay lengths derive from tokens with ceil and from fractions with floor", "[config][schedule]") {
  auto resolved = [](const std::string& s, const std::vector<std::string>& sets = {}) {
    return resolve_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1}, "schedule": )" + s + "}"), sets);
  };
  // 256 tokens per step (4 x 64).
  REQUIRE(resolved(R"({"warmup_tokens": 2561})").train->schedule.warmup_steps == 11);
  REQUIRE(resolved(R"({"warmup_tokens": 2560})").train->schedule.warmup_steps == 10);
  REQUIRE(resolved(R"({"warmup_fraction": 0.079})").train->schedule.warmup_steps == 7);
  RunConfig wsd = resolved(R"({"type": "warmup_stable_decay", "warmup_steps": 5, "decay_fraction": 0.25, "decay_shape": "cosine"})");
  REQUIRE(wsd.train->schedule.decay_steps == 25);
  REQUIRE(wsd.resolved["train"]["schedule"]["decay_fraction"].get<double>() == 0.25);
  REQUIRE(wsd.train->schedule.decay_shape == "cosine");
  // Given twice, the two must agree; a resolved config carries both and still resolves.
  REQUIRE(resolved(R"({"warmup_tokens": 2560, "warmup_steps": 10})").train->schedule.warmup_steps == 10);
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1}, "schedule": {"warmup_tokens": 2560, "warmup_steps": 12}})")) ==
          "configs/x.json: train.schedule.warmup_steps: expected 10 (from warmup_tokens), got 12 "
          "(give one of warmup_steps and warmup_tokens, or set the other to null)");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1}, "schedule": {"warmup_steps": 100}})")) ==
          "configs/x.json: train.schedule.warmup_steps: expected an integer below train.steps (100), got 100");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1}, "schedule": {"type": "warmup_stable_decay"}})")) ==
          "configs/x.json: train.schedule.decay_steps: missing required key (give decay_steps, decay_tokens or decay_fraction)");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1},
                                        "schedule": {"type": "warmup_stable_decay", "warmup_steps": 20, "decay_steps": 90}})")) ==
          "configs/x.json: train.schedule.decay_steps: expected at most train.steps - warmup_steps (100 - 20 = 80): the decay starts after "
          "the warm-up, got 90");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 100, "optimizer": {"lr": 0.1}, "schedule": {"type": "constant", "decay_steps": 9}})")) ==
          "configs/x.json: train.schedule.decay_steps: cannot be used here: schedule type is \"constant\"");
}

TEST_CASE("steps and tokens are one quantity: given both they must agree", "[config][train]") {
  const std::string t = R"({"batch_size": 4, "tokens": 25601, "optimizer": {"lr": 0.1}})";
  RunConfig rc = resolve_no_files(with_train(t));
  REQUIRE(rc.train->steps == 101);
  // The error names the key the run uses (written in the file), the hint the way out.
  REQUIRE(error_no_files(rc.resolved.dump(), {"train.tokens=51200"}) ==
          "configs/x.json: train.steps: expected 200 (train.tokens 51200 at 256 tokens per step), got 101 "
          "(give one of train.steps and train.tokens, or set the other to null)");
  REQUIRE(resolve_no_files(rc.resolved.dump(), {"train.tokens=51200", "train.steps=null"}).train->steps == 200);
}

TEST_CASE("device and precision resolve for the machine and bf16 on cpu is an error", "[config][train]") {
  const std::string t = R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})";
  ResolveOptions gpu;
  gpu.cuda_devices = 2;
  gpu.check_files = false;
  RunConfig on_gpu = resolve(with_train(t), {}, "configs/x.json", gpu);
  REQUIRE(on_gpu.resolved["train"]["device"] == "cuda");
  REQUIRE(on_gpu.resolved["train"]["precision"] == "bf16");
  REQUIRE(on_gpu.train->compute == DType::bf16);
  RunConfig on_cpu = resolve_no_files(with_train(t));
  REQUIRE(on_cpu.resolved["train"]["device"] == "cpu");
  REQUIRE(on_cpu.resolved["train"]["precision"] == "fp32");
  REQUIRE(on_cpu.sha256 != on_gpu.sha256);
  REQUIRE(error_no_files(with_train(t), {"train.precision=bf16"}) ==
          "--set: train.precision: cannot be used here: device is \"cpu\" (a CPU run computes in fp32)");
  REQUIRE(error_no_files(with_train(t), {"train.device=cuda"}) ==
          "--set: train.device: cannot be used here: no CUDA device is visible (use \"auto\" or \"cpu\")");
  REQUIRE(resolve(with_train(t), {"train.device=cpu"}, "configs/x.json", gpu).train->device.is_cpu());
}

TEST_CASE("validation during training needs a validation split", "[config][train]") {
  const std::string no_val = R"({"train": "t.bin", "seq_len": 64})";
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "eval_interval": 5, "optimizer": {"lr": 0.1}})", no_val)) ==
          "configs/x.json: train.eval_interval: cannot be used here: there is no validation split (give data.val or data.val_fraction)");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}, "schedule": {"type": "plateau"}})")) ==
          "configs/x.json: train.eval_interval: expected an integer >= 1 with schedule type \"plateau\" (it steps on validations), got 0");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})"), {"eval.average={\"keep\": 5, \"average\": 3}"}) ==
          "--set: eval.average: cannot be used here: train.eval_interval is 0 (averaging keeps the best checkpoints of the validations)");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "eval_interval": 2, "optimizer": {"lr": 0.1}})"), {"eval.average={\"keep\": 2, \"average\": 3}"}) ==
          "--set: eval.average.average: expected at most keep (2), got 3");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "eval_interval": 2, "optimizer": {"lr": 0.1}})"), {"eval.average={\"keep\": 3, \"average\": 2}"}) ==
          "--set: eval.average: cannot be used here: checkpoint averaging (eval.md 2) is not implemented yet");
  RunConfig frac = resolve_no_files(with_train(R"({"batch_size": 4, "steps": 10, "eval_interval": 5, "optimizer": {"lr": 0.1}})",
                                               R"({"train": "t.bin", "val_fraction": 0.1, "seq_len": 64})"));
  REQUIRE(frac.data.val_fraction == 0.1);
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}, "window_randomization": {"p_full": 0.25}})")) ==
          "configs/x.json: train.window_randomization: cannot be used here: the model has no nha layer");
  // An object that an assignment created is the assignment's.
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})"), {"train.window_randomization.p_full=0.25"}) ==
          "--set: train.window_randomization: cannot be used here: the model has no nha layer");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})", R"({"train": "t.bin", "val": "v.bin", "val_fraction": 0.1})")) ==
          "configs/x.json: data.val_fraction: cannot be used here: data.val is given");
}

TEST_CASE("an MQAR preset expands into its keys and hashes as the keys written out", "[config][mqar]") {
  const std::string t = R"({"batch_size": 4, "steps": 10, "eval_interval": 5, "optimizer": {"lr": 0.1}})";
  RunConfig preset = resolve(with_train(t, R"({"task": "mqar", "mqar": {"preset": "recall-64"}})"));
  const Json& m = preset.resolved["data"]["mqar"];
  REQUIRE(m["preset"].is_null());
  REQUIRE(m["segments"].size() == 3);
  REQUIRE(m["segments"][2] == Json{{"seq_len", 64}, {"n_kv", 16}, {"train_examples", nullptr}});
  REQUIRE(m["test_segments"][0] == Json{{"seq_len", 64}, {"n_kv", 4}});
  REQUIRE(preset.resolved["data"]["seq_len"] == 64);
  REQUIRE(preset.model.vocab_size == 8192);
  REQUIRE(keys_of(preset.resolved["data"]) == std::vector<std::string>{"task", "seq_len", "mqar"});
  RunConfig written = resolve(with_train(t, R"({"task": "mqar", "mqar": {"segments": [{"seq_len": 64, "n_kv": 4}, {"seq_len": 64, "n_kv": 8},
                                                                                  {"seq_len": 64, "n_kv": 16}]}})"));
  REQUIRE(written.sha256 == preset.sha256);
  RunConfig mix = resolve(with_train(t, R"({"task": "mqar", "mqar": {"preset": "zoology-mix", "power_a": 0.5}})"));
  REQUIRE(mix.data.mqar->power_a == 0.5);
  REQUIRE(mix.data.mqar->segments[0].train_examples == 100000);
  REQUIRE(mix.data.mqar->test_segments.size() == 7);
  REQUIRE(mix.data.seq_len == 256);
  RunConfig fig2 = resolve(with_train(t, R"({"task": "mqar", "mqar": {"preset": "zoology-fig2-T128"}})"));
  REQUIRE(fig2.data.mqar->train_examples == 100000);
  REQUIRE(fig2.data.mqar->test_examples == 3000);
  REQUIRE_FALSE(fig2.data.mqar->random_fill);
  REQUIRE(resolve(preset.resolved.dump(), {}, "x.json").resolved.dump(2) == preset.resolved.dump(2));

  REQUIRE(error_of(with_train(R"({"batch_size": 4, "tokens": 1000, "optimizer": {"lr": 0.1}})", R"({"task": "mqar", "mqar": {"preset": "recall-64"}})")) ==
          "configs/x.json: train.tokens: cannot be used here: data task is \"mqar\" (give train.steps)");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar", "tokenizer": "gpt2", "mqar": {"preset": "recall-64"}})")) ==
          "configs/x.json: data.tokenizer: cannot be used here: data task is \"mqar\"");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar"})")) ==
          "configs/x.json: data.mqar.segments: missing required key (give data.mqar.segments or data.mqar.preset)");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar", "mqar": {"segments": [{"seq_len": 64, "n_kv": 17}]}})")) ==
          "configs/x.json: data.mqar.segments[0].n_kv: expected at most seq_len / 4 (16), got 17");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar", "mqar": {"vocab": 63, "segments": [{"seq_len": 64, "n_kv": 4}]}})")) ==
          "configs/x.json: data.mqar.vocab: expected an even integer >= 4, got 63");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar", "mqar": {"vocab": 64, "segments": [{"seq_len": 64, "n_kv": 4}]}})")) ==
          "configs/x.json: data.mqar.segments[0].seq_len: expected an integer below vocab (64), got 64");
  REQUIRE(error_of(with_train(t, R"({"task": "mqar", "mqar": {"preset": "recall-65"}})")).rfind(
              "configs/x.json: data.mqar.preset: expected a preset (\"zoology-fig2-T64\", ", 0) == 0);
  REQUIRE(error_of(R"({"model": {"d_model": 64, "vocab_size": 50304, "num_layers": 1, "block": {"mixer": {"type": "attention", "num_heads": 2}}},
                       "data": {"task": "mqar", "mqar": {"preset": "recall-64"}}})") ==
          "configs/x.json: model.vocab_size: expected null or 8192 (data.mqar.vocab), got 50304");
}

TEST_CASE("the vocabulary defaults to the tokenizer's padded size and may not be smaller", "[config][model]") {
  const std::string t = R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})";
  REQUIRE(resolve_no_files(with_train(t, R"({"train": "t.bin", "tokenizer": "byte"})")).model.vocab_size == 256);
  REQUIRE(resolve_no_files(with_train(t, R"({"train": "t.bin", "tokenizer": "byte"})")).data.seq_len == 1024);
  REQUIRE(error_no_files(with_train(t, R"({"train": "t.bin"})"), {"model.vocab_size=50000"}) ==
          "--set: model.vocab_size: expected an integer >= 50257 (the vocabulary of the gpt2 tokenizer), got 50000");
}

TEST_CASE("parameter groups set weight decay and lr multipliers by glob, the last match deciding", "[config][param_groups]") {
  RunConfig rc = resolve_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "weight_decay": 0.05,
      "param_groups": [{"params": "*.mixer.*", "lr_mult": 0.5}, {"params": ["*.q_proj.weight", "model.norm.?eight"], "weight_decay": 0.2},
                       {"params": "model.layers.1.*", "lr_mult": 2}]}})"));
  // The decay flags are the modules' default decay set (a family may leave a matrix out: the gss kernel).
  const std::vector<NamedParameter> params = {{"model.embeddings.weight", Var(), true},
                                              {"model.layers.0.mixer.q_proj.weight", Var(), true},
                                              {"model.layers.0.mixer.q_norm.weight", Var(), false},
                                              {"model.layers.1.mixer.q_proj.weight", Var(), true},
                                              {"model.layers.1.mixer.gss.dss.kernel", Var(), false},
                                              {"model.norm.weight", Var(), false}};
  auto s = resolve_param_settings(rc.train->optimizer.weight_decay, rc.train->optimizer.param_groups, params);
  REQUIRE(s[0].weight_decay == 0.05);
  REQUIRE(s[0].lr_mult == 1);
  REQUIRE(s[1].weight_decay == 0.2);
  REQUIRE(s[1].lr_mult == 0.5);
  REQUIRE(s[2].weight_decay == 0);  // one dimension: not in the decay set
  REQUIRE(s[2].lr_mult == 0.5);
  REQUIRE(s[3].weight_decay == 0.2);
  REQUIRE(s[3].lr_mult == 2);
  REQUIRE(s[4].weight_decay == 0);  // listed by its family without decay
  REQUIRE(s[5].weight_decay == 0.2);

  RunConfig unmatched = resolve_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1,
      "param_groups": [{"params": ["*.weight", "model.layers.*.gss.dss.*"], "weight_decay": 0.0}]}})"));
  REQUIRE_THROWS_WITH(resolve_param_settings(0.1, unmatched.train->optimizer.param_groups, {{"model.norm.weight", Var(), false}}),
                      "configs/x.json: train.optimizer.param_groups[0].params[1]: expected a glob that matches a parameter, "
                      "got \"model.layers.*.gss.dss.*\" (no parameter matches)");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "param_groups": [{"params": "model/x"}]}})")) ==
          "configs/x.json: train.optimizer.param_groups[0].params: expected a glob of parameter names (letters, digits, _, ., * and ?), got \"model/x\"");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "param_groups": [{"params": "*"}]}})")) ==
          "configs/x.json: train.optimizer.param_groups[0]: expected \"weight_decay\" or \"lr_mult\" besides \"params\", got {\"params\":\"*\"}");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "param_groups": [{"params": "*", "lr_mult": 0}]}})")) ==
          "configs/x.json: train.optimizer.param_groups[0].lr_mult: expected a number > 0 or null, got 0");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "betas": [0.9, 1.0]}})")) ==
          "configs/x.json: train.optimizer.betas[1]: expected a number in [0, 1), got 1.0");
  REQUIRE(error_no_files(with_train(R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1, "betas": [0.9]}})")) ==
          "configs/x.json: train.optimizer.betas: expected a list of 2 numbers in [0, 1), got [0.9]");
}

TEST_CASE("integers accept exact integral numbers within 2^53 and nothing else", "[config][values]") {
  const std::string t = R"({"batch_size": 4, "steps": 10, "optimizer": {"lr": 0.1}})";
  REQUIRE(resolve_no_files(with_train(t), {"train.seed=4.096e3"}).resolved["train"]["seed"] == 4096);
  REQUIRE(resolve_no_files(with_train(t), {"train.seed=9007199254740992"}).train->seed == 9007199254740992ULL);
  REQUIRE(error_no_files(with_train(t), {"train.seed=9007199254740993"}) == "--set: train.seed: expected an integer >= 0, got 9007199254740993");
  REQUIRE(error_no_files(with_train(t), {"train.seed=1e300"}) == "--set: train.seed: expected an integer >= 0, got 1e+300");
  REQUIRE(error_no_files(with_train(t), {"train.seed=true"}) == "--set: train.seed: expected an integer >= 0, got true");
  REQUIRE(error_no_files(with_train(t), {"train.grad_clip=null"}) == "--set: train.grad_clip: expected a number >= 0, got null");
  // A number key stores a double whatever was written.
  RunConfig rc = resolve_no_files(with_train(t), {"train.grad_clip=2"});
  REQUIRE(rc.resolved["train"]["grad_clip"].is_number_float());
  REQUIRE(rc.resolved["train"]["grad_clip"].dump() == "2.0");
}
