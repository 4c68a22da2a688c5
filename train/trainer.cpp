#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/rng.h"
#include "core/tensor_math.h"
#include "eval/param_probe.h"
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
      schedule_(opt_.schedule) {
  // A communicator of one rank still runs the data-parallel path (the GPU tests use that).
  if (opt_.comm) {
    sync_ = std::make_unique<GradSync>(params_, *opt_.comm, opt_.bucket_mb, opt_.zero1);
    // Every rank starts from rank 0's weights, whatever its initialisation did.
    opt_.comm->after_compute();
    for (const OptimParam& p : params_) {
      Tensor w = p.var.data();
      opt_.comm->broadcast(w, 0);
    }
    opt_.comm->before_compute();
  }
  if (sync_ && opt_.zero1) zero_ = std::make_unique<ZeroAdamW>(params_, *sync_, opt_.adam);
  else adamw_ = std::make_unique<AdamW>(params_, opt_.adam);
  metrics_path_ = (fs::path(opt_.out_dir) / "metrics.jsonl").string();
  if (!main_rank()) return;
  fs::create_directories(opt_.out_dir);
  write_file_atomic((fs::path(opt_.out_dir) / "config.json").string(), opt_.config_text);
}

void Trainer::resume_from(const std::string& dir) {
  LoadedCheckpoint ck = load_checkpoint(dir);
  HYB_CHECK(ck.config_sha256 == opt_.config_sha256, dir, ": config_sha256 ", ck.config_sha256,
            " differs from the run's ", opt_.config_sha256);
  load_model_weights(model_, dir + "/model.safetensors");
  const std::string opt_path = dir + "/optimizer.safetensors";
  const AdamWState state = read_optimizer_state(opt_path);
  if (zero_) zero_->load_state(state, opt_path);
  else adamw_->load_state(state, opt_path);
  data_.restore(ck.trainer_state.at("data_cursor"));
  step_ = ck.step;
  consecutive_skips_ = ck.trainer_state.value("consecutive_skips", int64_t(0));
  if (ck.trainer_state.contains("plateau")) {
    const auto& pl = ck.trainer_state["plateau"];
    schedule_.set_plateau_state({pl.at("m").get<double>(), pl.at("best").get<double>(), pl.at("bad").get<int64_t>(),
                                 pl.at("cool").get<int64_t>()});
  }
  if (main_rank()) spdlog::info("resumed from {} at step {}", dir, step_);
}

std::string Trainer::first_nonfinite_gradient() const {
  if (zero_) {
    // Each rank sees its slices; the smallest parameter index found anywhere wins.
    const int64_t n = int64_t(params_.size()), local = zero_->local_first_nonfinite();
    const double worst = opt_.comm->all_reduce_host(local < 0 ? 0.0 : double(n - local), ReduceOp::max, opt_.device);
    return worst > 0 ? params_[size_t(n - int64_t(worst))].name : "";
  }
  for (const OptimParam& p : params_)
    if (p.var.grad().defined() && !all_finite(p.var.grad())) return p.name;
  return "";
}

double Trainer::clip_gradients() {
  return zero_ ? zero_->clip_grad_norm(opt_.grad_clip) : clip_grad_norm(params_, opt_.grad_clip);
}

void Trainer::randomize_windows(bool draw) {
  RngStream rng(opt_.envelope.seed, str_cat("train.window_randomization.step", step_));
  for (Block* b : model_.backbone().blocks()) {
    const bool full = rng.uniform() < *opt_.window_p_full;
    b->mixer().set_full_window(draw && full);
  }
}

bool Trainer::train_step(double* loss_out, double* norm_out) {
  double loss_sum = 0;
  if (opt_.window_p_full) randomize_windows(true);
  const Tensor scale = Tensor::full({1}, 1.0 / double(opt_.grad_accum), opt_.compute == DType::f64 ? DType::f64 : DType::f32);
  for (int64_t micro = 0; micro < opt_.grad_accum; ++micro) {
    Tensor inputs, targets;
    data_.next(&inputs, &targets);
    // Dropout masks are keyed by the micro-step and the rank, so a resumed run draws the same ones.
    model_.set_rng_step(uint64_t((step_ * opt_.grad_accum + micro) * world() + rank()));
    Var loss = model_.loss(inputs.to(opt_.device), targets.to(opt_.device), opt_.compute);
    loss_sum += loss.data().item();
    // Only the last micro-step's backward reduces: the earlier ones accumulate locally.
    if (sync_ && micro == opt_.grad_accum - 1) sync_->arm();
    backward(loss, scale.to(loss.dtype()));
  }
  if (sync_) sync_->finish();
  if (opt_.window_p_full) randomize_windows(false);
  *loss_out = loss_sum / double(opt_.grad_accum);
  if (opt_.comm) *loss_out = opt_.comm->all_reduce_host(*loss_out, ReduceOp::mean, opt_.device);

  std::string bad;
  if (!std::isfinite(*loss_out)) {
    bad = str_cat("loss is ", std::isnan(*loss_out) ? "NaN" : "inf");
  } else if (const std::string name = first_nonfinite_gradient(); !name.empty()) {
    bad = "gradient of " + name + " is not finite";
  }
  if (!bad.empty()) {
    for (const OptimParam& p : params_) p.var.zero_grad();
    ++consecutive_skips_;
    const std::string msg = str_cat("step ", step_ + 1, ": ", bad);
    if (!opt_.skip_nonfinite || consecutive_skips_ >= opt_.nonfinite_max_skips)
      throw NonFiniteError(msg + (opt_.skip_nonfinite ? str_cat(" (", consecutive_skips_, " consecutive skipped steps)") : ""),
                           step_ + 1);
    if (main_rank()) {
      spdlog::warn("{}; step skipped", msg);
      RecordEnvelope env = opt_.envelope;
      env.step = step_ + 1;
      append_record(metrics_path_, Record("nonfinite", env).add("what", bad));
    }
    *norm_out = NAN;
    return false;
  }
  consecutive_skips_ = 0;
  *norm_out = clip_gradients();
  if (zero_) zero_->step(schedule_.factor(step_));
  else adamw_->step(schedule_.factor(step_));
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
    v = validate_(model_, rank(), world());
    model_.set_training(true);
  }
  if (opt_.comm) {
    const std::vector<double> sums = opt_.comm->all_reduce_host(
        {v.nll_sum, double(v.targets), double(v.correct), double(v.windows)}, ReduceOp::sum, opt_.device);
    v.nll_sum = sums[0];
    v.windows = int64_t(sums[3]);
    v.targets = int64_t(sums[1]);
    v.correct = int64_t(sums[2]);
    if (!v.task_sums.empty()) v.task_sums = opt_.comm->all_reduce_host(v.task_sums, ReduceOp::sum, opt_.device);
  }
  last_val_loss_ = v.loss();
  schedule_.on_validation(v.loss());
  if (!main_rank()) return;
  RecordEnvelope env = opt_.envelope;
  env.step = step_;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_probes(env);
  if (v.task_record) {
    append_record(metrics_path_, v.task_record(env, v.task_sums));
    spdlog::info("step {} | val_loss {:.4f} | validated in {}", step_, v.loss(), format_duration(secs));
    return;
  }
  append_record(metrics_path_, Record("ppl", env)
                                   .add("split", "val")
                                   .add("windows", v.windows)
                                   .add("targets", v.targets)
                                   .add("loss", v.loss())
                                   .add("ppl", std::exp(v.loss()))
                                   .add("token_acc", v.targets ? double(v.correct) / double(v.targets) : 0.0));
  spdlog::info("step {} | val_loss {:.4f} | val_ppl {:.2f} | {} windows in {}", step_, v.loss(), std::exp(v.loss()),
               v.windows, format_duration(secs));
}

void Trainer::log_probes(const RecordEnvelope& env) {
  const std::vector<PhaMixRow> mix = pha_mix_rows(model_);
  if (!mix.empty()) append_record(metrics_path_, pha_mix_record(mix, env));
  for (const Record& r : param_probe_records(model_, opt_.param_probes, env)) append_record(metrics_path_, r);
}

void Trainer::checkpoint() {
  const auto pl = schedule_.plateau_state();
  nlohmann::json state = {{"data_cursor", data_.cursor()},
                          {"consecutive_skips", consecutive_skips_},
                          {"plateau", {{"m", pl.m}, {"best", pl.best}, {"bad", pl.bad}, {"cool", pl.cool}}},
                          {"world_size", world()}};
  // Gathering the sharded state is collective: every rank takes part, rank 0 writes.
  const AdamWState optimizer = zero_ ? zero_->gather_state() : adamw_->state();
  if (!main_rank()) return;
  const std::string dir = save_checkpoint((fs::path(opt_.out_dir) / "ckpt").string(),
                                          {opt_.config_text, opt_.config_sha256, step_, state}, model_, &optimizer,
                                          opt_.keep_last);
  spdlog::info("step {} | checkpoint {}", step_, dir);
}

void Trainer::run() {
  const int64_t tokens_per_step = opt_.grad_accum * opt_.micro_batch * opt_.seq_len * world();
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
    if (main_rank() && (step_ % opt_.log_interval == 0 || step_ == opt_.steps)) {
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
