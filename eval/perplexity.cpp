#include "eval/perplexity.h"

#include "autograd/tape.h"
#include "layers/loss/cross_entropy_op.h"

namespace hyb {

PplResult evaluate_ppl(CausalLM& model, const EvalWindows& windows, int64_t batch, Device device, DType compute) {
  HYB_CHECK(batch >= 1, "evaluate_ppl: batch must be >= 1, got ", batch);
  NoGradGuard no_grad;
  PplResult r;
  const int64_t vocab = model.config().real_vocab;
  for (int64_t first = 0; first < windows.count(); first += batch) {
    const int64_t n = std::min(batch, windows.count() - first);
    Batch b = windows.batch(first, n);
    Var logits = model.logits(b.inputs.to(device), compute);
    Tensor targets = b.targets.reshape({-1});
    CrossEntropyResult ce = cross_entropy_forward(logits.data(), targets.to(device), vocab, -1);
    for (double v : ce.nll.to_double_vector()) r.nll_sum += v;
    r.targets += ce.count;
    std::vector<double> am = ce.argmax.to_double_vector(), tv = targets.to_double_vector();
    for (size_t i = 0; i < am.size(); ++i) r.correct += am[i] == tv[i];
    r.windows += n;
  }
  return r;
}

}  // namespace hyb
