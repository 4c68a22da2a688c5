// Train keys and derivations. device and precision resolve to what this machine runs, so they are
// part of the hash: a bf16 GPU run and an fp32 CPU run of one file are different runs.
#include "train/config/config_train.h"

#include "train/config/config_param_groups.h"
#include "train/config/config_schedule.h"

namespace hyb {

const KeyTable kOptimizerKeys{"optimizer", nullptr, {
    {.name = "type", .type = KeyType::enumeration, .default_value = "adamw", .values = {"adamw"}, .doc = "AdamW (PyTorch's)"},
    {.name = "lr", .type = KeyType::number, .required = true, .range = Range::above(0), .doc = "peak learning rate"},
    {.name = "betas", .type = KeyType::list, .default_value = Json::array({0.9, 0.95}), .range = Range::closed_open(0, 1),
     .elem = KeyType::number, .list_len = 2, .doc = "b1, b2"},
    {.name = "eps", .type = KeyType::number, .default_value = 1e-8, .range = Range::above(0), .doc = "added to the denominator of the update"},
    {.name = "weight_decay", .type = KeyType::number, .default_value = 0.1, .range = Range::at_least(0),
     .doc = "decay of the parameters in the decay set (two or more dims, unless the family's spec lists them)"},
    {.name = "param_groups", .type = KeyType::custom, .default_value = Json::array(), .check = check_param_groups,
     .type_doc = "list of {\"params\", \"weight_decay\", \"lr_mult\"}", .default_doc = "`[]`",
     .doc = "per-parameter rules; for each field the last matching entry that sets it decides"},
}};

const KeyTable kDataParallelKeys{"data_parallel", nullptr, {
    {.name = "bucket_mb", .type = KeyType::number, .default_value = 25.0, .range = Range::above(0),
     .doc = "size of a gradient all-reduce bucket, in MiB"},
    {.name = "zero1", .type = KeyType::boolean, .default_value = false,
     .doc = "shard the fp32 master weights and AdamW state across ranks (ZeRO-1)"},
}};

const KeyTable kWindowRandomizationKeys{"window_randomization", nullptr, {
    {.name = "p_full", .type = KeyType::number, .required = true, .range = Range::closed(0, 1),
     .doc = "probability of a full window (nha.md 8.1)"},
}};

const KeyTable kTrainKeys{"train", nullptr, {
    {.name = "device", .type = KeyType::enumeration, .default_value = "auto", .values = {"auto", "cpu", "cuda"},
     .doc = "\"auto\": cuda when a GPU is visible, else cpu; resolved to the one used"},
    {.name = "precision", .type = KeyType::enumeration, .default_value = "auto", .values = {"auto", "bf16", "fp32"},
     .doc = "\"auto\": bf16 on cuda, fp32 on cpu; resolved to the one used; bf16 on cpu is an error"},
    {.name = "seed", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .doc = "every random stream of the run"},
    {.name = "batch_size", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "sequences per optimizer step for the whole job; a multiple of grad_accum x ranks"},
    {.name = "grad_accum", .type = KeyType::integer, .default_value = 1, .range = Range::at_least(1),
     .doc = "micro-steps per optimizer step"},
    {.name = "steps", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: ceil(tokens / (batch_size seq_len))", .doc = "optimizer steps; give steps or tokens"},
    {.name = "tokens", .type = KeyType::integer, .null = Null::off, .range = Range::at_least(1),
     .doc = "token budget instead of steps"},
    {.name = "optimizer", .type = KeyType::object, .default_value = Json::object(), .table = &kOptimizerKeys,
     .default_doc = "`{}` (lr is required)", .doc = "AdamW and parameter groups"},
    {.name = "schedule", .type = KeyType::object, .default_value = Json{{"type", "warmup_cosine"}}, .table = &kScheduleKeys,
     .doc = "learning-rate schedule"},
    {.name = "grad_clip", .type = KeyType::number, .default_value = 1.0, .range = Range::at_least(0),
     .doc = "maximum global gradient norm; 0 turns clipping off"},
    {.name = "nonfinite", .type = KeyType::enumeration, .default_value = "stop", .values = {"stop", "skip"},
     .doc = "what a non-finite loss or gradient does"},
    {.name = "nonfinite_max_skips", .type = KeyType::integer, .default_value = 10, .range = Range::at_least(1),
     .doc = "with \"skip\": consecutive skipped steps after which the run stops"},
    {.name = "log_interval", .type = KeyType::integer, .default_value = 10, .range = Range::at_least(1),
     .doc = "steps between progress lines and metrics records"},
    {.name = "eval_interval", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .doc = "steps between validations; 0: only after the last step"},
    {.name = "checkpoint_interval", .type = KeyType::integer, .default_value = 0, .range = Range::at_least(0),
     .doc = "steps between checkpoints; 0: only after the last step"},
    {.name = "keep_last", .type = KeyType::integer, .default_value = 3, .range = Range::at_least(1),
     .doc = "checkpoints kept"},
    {.name = "out_dir", .type = KeyType::string, .null = Null::derived, .default_doc = "null: `runs/<name>`",
     .doc = "output directory"},
    {.name = "data_parallel", .type = KeyType::object, .default_value = Json::object(), .table = &kDataParallelKeys,
     .default_doc = "`{\"bucket_mb\":25.0,\"zero1\":false}`", .doc = "how gradients are reduced (not part of the hash)"},
    {.name = "window_randomization", .type = KeyType::object, .null = Null::off, .table = &kWindowRandomizationKeys,
     .doc = "NHA's randomized windows; needs an nha layer"},
}};

Json resolve_train_section(const Json& train, const TrainContext& ctx) {
  Json t = apply_key_table(kTrainKeys, train, "train");

  if (t["device"] == "auto") t["device"] = ctx.cuda_devices > 0 ? "cuda" : "cpu";
  else if (t["device"] == "cuda" && ctx.cuda_devices == 0)
    throw ConfigKeyError("train.device", cannot_be_used_problem("no CUDA device is visible (use \"auto\" or \"cpu\")"));
  const bool cpu = t["device"] == "cpu";
  if (t["precision"] == "auto") t["precision"] = cpu ? "fp32" : "bf16";
  else if (t["precision"] == "bf16" && cpu)
    throw ConfigKeyError("train.precision", cannot_be_used_problem("device is \"cpu\" (a CPU run computes in fp32)"));

  const int64_t batch = json_int(t["batch_size"]), accum = json_int(t["grad_accum"]);
  if (batch % (accum * ctx.world_size) != 0)
    throw ConfigKeyError("train.batch_size",
                         expected_problem(str_cat("a multiple of grad_accum x ranks (", accum, " x ", ctx.world_size, " = ",
                                                  accum * ctx.world_size, ")"),
                                          t["batch_size"]));

  const int64_t tokens_per_step = batch * ctx.seq_len;
  if (!t["tokens"].is_null()) {
    if (ctx.mqar) throw ConfigKeyError("train.tokens", cannot_be_used_problem("data task is \"mqar\" (give train.steps)"));
    const int64_t tokens = json_int(t["tokens"]);
    const int64_t want = (tokens + tokens_per_step - 1) / tokens_per_step;
    if (t["steps"].is_null()) t["steps"] = want;
    else if (json_int(t["steps"]) != want)
      throw ConfigKeyError("train.steps",
                           expected_problem(str_cat(want, " (train.tokens ", tokens, " at ", tokens_per_step, " tokens per step)"), t["steps"]) +
                               " (give one of train.steps and train.tokens, or set the other to null)");
  }
  if (t["steps"].is_null()) throw ConfigKeyError("train.steps", missing_key_problem("give train.steps or train.tokens"));
  derive_schedule(t["schedule"], json_int(t["steps"]), tokens_per_step, ctx.mqar);

  if (t["out_dir"].is_null()) t["out_dir"] = "runs/" + ctx.name;
  return t;
}

}  // namespace hyb
