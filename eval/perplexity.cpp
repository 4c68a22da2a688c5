#include "eval/perplexity.h"

#include <cmath>

#include "autograd/tape.h"
#include "layers/loss/cross_entropy_op.h"

namespace hyb {

PplResult evaluate_ppl(CausalLM& model, const EvalWindows& windows, int64_t batch, Device device, DType compute,
                       int64_t first, int64_t count) {
  HYB_CHECK(batch >= 1, "evaluate_ppl: batch must be >= 1, got ", batch);
  const int64_t end = count < 0 ? windows.count() : first + count;
  HYB_CHECK(first >= 0 && first <= end && end <= windows.count(), "evaluate_ppl: windows [", first, ", ", end,
            ") outside the ", windows.count(), " validation windows");
  NoGradGuard no_grad;
  PplResult r;
  const int64_t vocab = model.config().real_vocab;
  for (int64_t w = first; w < end; w += batch) {
    const int64_t n = std::min(batch, end - w);
    Batch b = windows.batch(w, n);
    Var logits = model.logits(b.inputs.to(device), compute);
    Tensor targets = b.targets.reshape({-1});
    CrossEntropyResult ce = cross_entropy_forward(logits.data(), targets.to(device), vocab, -1);
    for (double v : ce.nll.to_double_vector()) r.nll_sum += v;
    r.targets += ce.count();
    std::vector<double> am = ce.argmax.to_double_vector(), tv = targets.to_double_vector();
    for (size_t i = 0; i < am.size(); ++i) r.correct += am[i] == tv[i];
    r.windows += n;
  }
  return r;
}

Record ppl_record(const RecordEnvelope& env, const std::string& split, int64_t T, const PplResult& r,
                  std::optional<double> bits_per_byte) {
  Record rec("ppl", env);
  rec.add("split", split)
      .add("T", T)
      .add("stride", T)
      .add("windows", r.windows)
      .add("targets", r.targets)
      .add("loss", r.loss())
      .add("ppl", std::exp(r.loss()));
  if (bits_per_byte) rec.add("bits_per_byte", *bits_per_byte);
  return rec.add("token_acc", r.token_acc());
}

}  // namespace hyb
