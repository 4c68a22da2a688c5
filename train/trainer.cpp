#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/tensor_math.h"
#include "optim/clip.h"
#include "train/checkpoint.h"

namespace hyb {

namespace fs = std::filesystem;

std::string format_duration(double s) {
  char buf[32];
  const long t = long(std::lround(std::max(0.0, s)));
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t / 60) % 60);
  } else if (t >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lds", t);
  }
  return buf;
}

static std::vector<OptimParam> optimizer_params(const CausalLM& model, const ParamRule& rule) {
  std::vector<OptimParam> out;
  for (const NamedParameter& p : model.named_parameters()) {
    OptimParam o{p.name, p.var};
    rule(p, &o.weight_decay, &o.lr_mult);
    out.push_back(o);
  }
  return out;
}

Trainer::Trainer(CausalLM& model, BatchSource& data, ValidateFn validate, TrainerOptions options, const ParamRule& rule)
    : model_(model),
      data_(data),
      validate_(std::move(validate)),
      opt_(std::move(options)),
      params_(optimizer_params(model, rule)),
      adamw_(params_, opt_.adam),
      schedule_(opt_.schedule) {
  fs::create_directories(opt_.out_dir);
  metrics_path_ = (fs::path(opt_.out_dir) / "metrics.jsonl").string();
  write_file_atomic((fs::path(opt_.out_dir) / "config.json").string(), opt_.config_text);
}

void Trainer::resume_from(const std::string& dir) {
  LoadedCheckpoint ck = load_checkpoint(dir);
  HYB_CHECK(ck.config_sha256 == opt_.config_sha256, dir, ": config_sha256 ", ck.config_sha256,
            " differs from the run's ", opt_.config_sha256);
  load_model_weights(model_, dir + "/model.safetensors");
  load_optimizer_state(adamw_, dir + "/optimizer.safetensors");
  data_.restore(ck.trainer_state.at("data_cursor"));
  step_ = ck.step;
  consecutive_skips_ = ck.trainer_state.value("consecutive_skips", int64_t(0));
  if (ck.trainer_state.contains("plateau")) {
    const auto& pl = ck.trainer_state["plateau"];
    schedule_.set_plateau_state({pl.at("m").get<double>(), pl.at("best").get<double>(), pl.at("bad").get<int64_t>(),
                                 pl.at("cool").get<int64_t>()});
  }
  spdlog::info("resumed from {} at step {}", dir, step_);
}

bool Trainer::train_step(double* loss_out, double* norm_out) {
  double loss_sum = 0;
  const Tensor scale = Tensor::full({1}, 1.0 / double(opt_.grad_accum), opt_.compute == DType::f64 ? DType::f64 : DType::f32);
  for (int64_t micro = 0; micro < opt_.grad_accum; ++micro) {
    Tensor inputs, targets;
    data_.next(&inputs, &targets);
    // Dropout masks are keyed by the micro-step, so a resumed run draws the same ones.
    model_.set_rng_step(uint64_t(step_ * opt_.grad_accum + micro));
    Var loss = model_.loss(inputs.to(opt_.device), targets.to(opt_.device), opt_.compute);
    loss_sum += loss.data().item();
    backward(loss, scale.to(loss.dtype()));
  }
  *loss_out = loss_sum / double(opt_.grad_accum);

  std::string bad;
  if (!std::isfinite(*loss_out)) {
    bad = str_cat("loss is ", std::isnan(*loss_out) ? "NaN" : "inf");
  } else {
    for (const OptimParam& p : params_)
      if (p.var.grad().defined() && !all_finite(p.var.grad())) {
        bad = "gradient of " + p.name + " is not finite";
        break;
      }
  }
  if (!bad.empty()) {
    for (const OptimParam& p : params_) p.var.zero_grad();
    ++consecutive_skips_;
    const std::string msg = str_cat("step ", step_ + 1, ": ", bad);
    if (!opt_.skip_nonfinite || consecutive_skips_ >= opt_.nonfinite_max_skips)
      throw Error(msg + (opt_.skip_nonfinite ? str_cat(" (", consecutive_skips_, " consecutive skipped steps)") : ""));
    spdlog::warn("{}; step skipped", msg);
    RecordEnvelope env = opt_.envelope;
    env.step = step_ + 1;
    append_record(metrics_path_, Record("nonfinite", env).add("what", bad));
    *norm_out = NAN;
    return false;
  }
  consecutive_skips_ = 0;
  *norm_out = clip_grad_norm(params_, opt_.grad_clip);
  adamw_.step(schedule_.factor(step_));
  for (const OptimParam& p : params_) p.var.zero_grad();
  return true;
}

void Trainer::validate_and_log() {
  if (!validate_) return;
  const auto t0 = std::chrono::steady_clock::now();
  ValidationResult v;
  {
    NoGradGuard no_grad;
    model_.set_training(false);
    v = validate_(model_);
    model_.set_training(true);
  }
  last_val_loss_ = v.loss;
  schedule_.on_validation(v.loss);
  RecordEnvelope env = opt_.envelope;
  env.step = step_;
  append_record(metrics_path_, Record("ppl", env)
                                   .add("split", "val")
                                   .add("windows", v.windows)
                                   .add("targets", v.targets)
                                   .add("loss", v.loss)
                                   .add("ppl", std::exp(v.loss))
                                   .add("token_acc", v.token_acc));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("step {} | val_loss {:.4f} | val_ppl {:.2f} | {} windows in {}", step_, v.loss, std::exp(v.loss),
               v.windows, format_duration(secs));
}

void Trainer::checkpoint() {
  const auto pl = schedule_.plateau_state();
  nlohmann::json state = {{"data_cursor", data_.cursor()},
                          {"consecutive_skips", consecutive_skips_},
                          {"plateau", {{"m", pl.m}, {"best", pl.best}, {"bad", pl.bad}, {"cool", pl.cool}}}};
  const std::string dir = save_checkpoint((fs::path(opt_.out_dir) / "ckpt").string(),
                                          {opt_.config_text, opt_.config_sha256, step_, state}, model_, &adamw_,
                                          opt_.keep_last);
  spdlog::info("step {} | checkpoint {}", step_, dir);
}

void Trainer::run() {
  const int64_t tokens_per_step = opt_.grad_accum * opt_.micro_batch * opt_.seq_len;
  auto window_start = std::chrono::steady_clock::now();
  const auto run_start = window_start;
  const int64_t first_step = step_;
  int64_t window_steps = 0;
  double window_loss = 0;
  int64_t window_counted = 0;
  model_.set_training(true);
  while (step_ < opt_.steps) {
    double loss = 0, norm = 0;
    const double lr = opt_.adam.lr * schedule_.factor(step_);
    const bool applied = train_step(&loss, &norm);
    ++step_;
    ++window_steps;
    if (applied) {
      window_loss += loss;
      ++window_counted;
    }
    last_loss_ = loss;
    if (step_ % opt_.log_interval == 0 || step_ == opt_.steps) {
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - window_start).count();
      const double tps = double(window_steps * tokens_per_step) / std::max(dt, 1e-9);
      const double elapsed = std::chrono::duration<double>(now - run_start).count();
      const double eta = elapsed / double(step_ - first_step) * double(opt_.steps - step_);
      const double mean_loss = window_counted ? window_loss / double(window_counted) : NAN;
      spdlog::info("step {}/{} | loss {:.4f} | lr {:.3e} | grad_norm {:.3f} | {:.0f} tok/s | ETA {}", step_, opt_.steps,
                   mean_loss, lr, norm, tps, format_duration(eta));
      RecordEnvelope env = opt_.envelope;
      env.step = step_;
      append_record(metrics_path_, Record("train", env)
                                       .add("loss", mean_loss)
                                       .add("lr", lr)
                                       .add("grad_norm", norm)
                                       .add("tokens_per_s", tps)
                                       .add("tokens", step_ * tokens_per_step));
      window_start = now;
      window_steps = window_counted = 0;
      window_loss = 0;
    }
    const bool last = step_ == opt_.steps;
    if ((opt_.eval_interval > 0 && step_ % opt_.eval_interval == 0) || last) validate_and_log();
    if ((opt_.checkpoint_interval > 0 && step_ % opt_.checkpoint_interval == 0) || last) checkpoint();
  }
}

}  // namespace hyb
