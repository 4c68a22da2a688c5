#include "eval/mqar.h"

#include "autograd/tape.h"
#include "core/error.h"
#include "layers/loss/cross_entropy_op.h"

namespace hyb {

double MqarScore::recall_score() const {
  double sum = 0;
  for (const MqarSegmentScore& s : segments) sum += s.acc();
  return segments.empty() ? 0.0 : sum / double(segments.size());
}

bool MqarScore::saturated() const {
  for (const MqarSegmentScore& s : segments)
    if (s.acc() < 0.99) return false;
  return !segments.empty();
}

bool MqarScore::at_chance() const {
  for (const MqarSegmentScore& s : segments)
    if (s.acc() > 2.0 / double(s.n_kv)) return false;
  return !segments.empty();
}

double MqarScore::nll_sum() const {
  double sum = 0;
  for (const MqarSegmentScore& s : segments) sum += s.nll_sum;
  return sum;
}

int64_t MqarScore::labelled() const {
  int64_t n = 0;
  for (const MqarSegmentScore& s : segments) n += s.labelled;
  return n;
}

std::vector<double> MqarScore::sums() const {
  std::vector<double> v;
  for (const MqarSegmentScore& s : segments) v.insert(v.end(), {double(s.examples), double(s.labelled), s.acc_sum, s.nll_sum});
  return v;
}

void MqarScore::set_sums(const std::vector<double>& v) {
  HYB_ASSERT(v.size() == 4 * segments.size(), "MQAR sums of ", v.size(), " values for ", segments.size(), " segments");
  for (size_t i = 0; i < segments.size(); ++i) {
    segments[i].examples = int64_t(v[4 * i]);
    segments[i].labelled = int64_t(v[4 * i + 1]);
    segments[i].acc_sum = v[4 * i + 2];
    segments[i].nll_sum = v[4 * i + 3];
  }
}

void score_mqar_batch(const Tensor& logits, const Tensor& targets, int64_t vocab, MqarSegmentScore* s) {
  HYB_CHECK(targets.dim() == 2 && logits.dim() == 2 && logits.size(0) == targets.numel(), "score_mqar_batch: logits ",
            logits.shape(), " do not match labels ", targets.shape());
  const Tensor flat = targets.reshape({-1});
  CrossEntropyResult ce = cross_entropy_forward(logits, flat.to(logits.device()), vocab, kMqarIgnore);
  ce.count();  // throws on a label outside the vocabulary
  const std::vector<double> nll = ce.nll.to_double_vector(), am = ce.argmax.to_double_vector(), y = flat.to_double_vector();
  const int64_t rows = targets.size(0), T = targets.size(1);
  for (int64_t b = 0; b < rows; ++b) {
    int64_t queries = 0, correct = 0;
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      if (y[size_t(t)] == kMqarIgnore) continue;
      ++queries;
      correct += am[size_t(t)] == y[size_t(t)];
      s->nll_sum += nll[size_t(t)];
    }
    HYB_CHECK(queries > 0, "score_mqar_batch: example ", b, " has no labelled position");
    s->acc_sum += double(correct) / double(queries);
    s->labelled += queries;
    ++s->examples;
  }
}

MqarTestSet::MqarTestSet(const MqarConfig& c) {
  RngStream rng(uint64_t(c.test_seed), "mqar.test");
  for (const MqarSegment& seg : c.test_segments) {
    specs.push_back({.vocab = c.vocab, .seq_len = seg.seq_len, .n_kv = seg.n_kv, .power_a = c.power_a,
                     .random_fill = c.random_fill});
    batches.push_back(mqar_batch(specs.back(), rng, c.test_examples));
  }
}

MqarScore evaluate_mqar(CausalLM& model, const MqarTestSet& test, int64_t batch, Device device, DType compute, int rank,
                        int world) {
  HYB_CHECK(batch >= 1, "evaluate_mqar: batch must be >= 1, got ", batch);
  NoGradGuard no_grad;
  MqarScore score;
  for (size_t k = 0; k < test.specs.size(); ++k) {
    MqarSegmentScore s{test.specs[k].seq_len, test.specs[k].n_kv};
    const Batch& all = test.batches[k];
    const auto [first, last] = rank_share(all.inputs.size(0), rank, world);
    for (int64_t e = first; e < last; e += batch) {
      const int64_t n = std::min(batch, last - e);
      const Tensor inputs = all.inputs.narrow(0, e, n).contiguous(), labels = all.targets.narrow(0, e, n).contiguous();
      Var logits = model.logits(inputs.to(device), compute);
      score_mqar_batch(logits.data(), labels, model.config().real_vocab, &s);
    }
    score.segments.push_back(s);
  }
  return score;
}

namespace {

std::string flags_json(const MqarScore& s) {
  std::string out = "[";
  if (s.saturated()) out += "\"saturated\"";
  if (s.at_chance()) out += "\"at_chance\"";
  return out + "]";
}

}  // namespace

Record mqar_record(const MqarScore& s, const MqarConfig& c, const std::string& preset, const RecordEnvelope& env) {
  std::string segments = "[";
  for (size_t i = 0; i < s.segments.size(); ++i) {
    const MqarSegmentScore& g = s.segments[i];
    segments += str_cat(i ? "," : "", "{\"seq_len\":", g.seq_len, ",\"n_kv\":", g.n_kv, ",\"examples\":", g.examples,
                        ",\"acc\":", format_number(g.acc()), ",\"loss\":", format_number(g.loss()), "}");
  }
  Record r("mqar", env);
  if (preset.empty()) r.add_raw("preset", "null");
  else r.add("preset", preset);
  return r.add("V", c.vocab)
      .add("power_a", c.power_a)
      .add("random_fill", c.random_fill)
      .add("test_seed", c.test_seed)
      .add_raw("segments", segments + "]")
      .add("recall_score", s.recall_score())
      .add_raw("flags", flags_json(s));
}

std::string mqar_table(const MqarScore& s) {
  std::string out = "| T | N | examples | acc | loss |\n| --- | --- | --- | --- | --- |\n";
  for (const MqarSegmentScore& g : s.segments) {
    char row[160];
    std::snprintf(row, sizeof(row), "| %lld | %lld | %lld | %.1f%% | %.4f |\n", static_cast<long long>(g.seq_len),
                  static_cast<long long>(g.n_kv), static_cast<long long>(g.examples), 100 * g.acc(), g.loss());
    out += row;
  }
  char tail[80];
  std::snprintf(tail, sizeof(tail), "\nrecall score %.1f%%\n", 100 * s.recall_score());
  out += tail;
  if (s.saturated()) out += "flag: saturated (every segment at >= 99%)\n";
  if (s.at_chance()) out += "flag: at_chance (every segment at <= 2/N)\n";
  return out;
}

}  // namespace hyb
