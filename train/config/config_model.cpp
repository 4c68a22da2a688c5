// The model's own keys. vocab_size defaults to the tokenizer's vocabulary padded to a multiple of
// 64 (50304 for GPT-2, attention.md 7); the rows above the tokenizer's are padding.
#include "train/config/config_model.h"

#include "train/model_from_config.h"

namespace hyb {

namespace {

Json as_written(const Json& v, const std::string&) { return v; }

constexpr const char* kStructuralKeys[] = {"num_layers", "block", "blocks", "layout", "layers", "overrides"};

}  // namespace

const KeyTable kModelKeys{"model", nullptr, {
    {.name = "d_model", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "width of the residual stream"},
    {.name = "vocab_size", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: 50304 with the `gpt2` tokenizer, 256 with `byte`, `data.mqar.vocab` for MQAR",
     .doc = "rows of the embedding; at least the tokenizer's vocabulary (50257 for GPT-2), the rows above it are padding"},
    {.name = "max_seq_len", .type = KeyType::integer, .null = Null::derived, .range = Range::at_least(1),
     .default_doc = "null: `data.seq_len`", .doc = "the length the model is built for (RoPE tables, full-attention decode caches)"},
    {.name = "norm_eps", .type = KeyType::number, .default_value = 1e-5, .range = Range::above(0),
     .doc = "eps of every block RMSNorm and of the final RMSNorm"},
    {.name = "tie_embeddings", .type = KeyType::boolean, .default_value = true,
     .doc = "the LM head is the embedding matrix; false adds `lm_head.weight`"},
    {.name = "embed_scale", .type = KeyType::enumeration, .default_value = "none", .values = {"none", "sqrt_d_model"},
     .doc = "multiply the embedding output by sqrt(d_model)"},
    {.name = "embed_dropout", .type = KeyType::number, .default_value = 0.0, .range = Range::closed_open(0, 1),
     .doc = "dropout on the embedding output"},
    {.name = "init", .type = KeyType::enumeration, .default_value = "family", .values = {"family", "gpt2"},
     .doc = "initialization rule (config.md 3.8)"},
    {.name = "init_std", .type = KeyType::number, .default_value = 0.02, .range = Range::above(0),
     .doc = "std of the N(0, std^2) initializations"},
    {.name = "num_layers", .type = KeyType::integer, .range = Range::at_least(1),
     .default_doc = "required in the uniform form", .doc = "number of blocks; the resolved config holds the length of `layers`"},
    {.name = "block", .type = KeyType::custom, .check = as_written, .type_doc = "block object",
     .doc = "the default block (uniform form), or the base every named block is merged over (layout form)"},
    {.name = "blocks", .type = KeyType::custom, .check = as_written, .type_doc = "object: code -> block object",
     .doc = "named blocks (layout form; head_split reads `T` and `M`)"},
    {.name = "layout", .type = KeyType::custom, .check = as_written, .type_doc = "layout object",
     .doc = "which named block each layer is"},
    {.name = "layers", .type = KeyType::custom, .check = as_written, .type_doc = "list of block objects",
     .doc = "the explicit per-layer list; the resolved config is written in this form"},
    {.name = "overrides", .type = KeyType::custom, .check = as_written, .type_doc = "list of override entries",
     .default_doc = "`[]`", .doc = "per-layer changes, applied in order after the list is formed"},
}};

const KeyTable kBlockKeys{"block", nullptr, {
    {.name = "mixer", .type = KeyType::custom, .required = true, .check = as_written, .type_doc = "typed object",
     .doc = "the token mixer: `type` is a layer family (below), its other keys are that family's"},
    {.name = "mlp", .type = KeyType::custom, .check = as_written, .type_doc = "mlp object",
     .default_doc = "`{\"type\":\"swiglu\"}`", .doc = "the feed-forward sublayer"},
}};

const KeyTable kLayoutKeys{"layout", nullptr, {
    {.name = "pattern", .type = KeyType::custom, .check = as_written, .type_doc = "codes",
     .default_doc = "one of `pattern`, `repeat`, `generate`", .doc = "one code per layer"},
    {.name = "repeat", .type = KeyType::custom, .check = as_written, .type_doc = "codes",
     .doc = "the codes repeated until there are `n_layers` layers"},
    {.name = "n_layers", .type = KeyType::integer, .range = Range::at_least(1), .default_doc = "required with `repeat`",
     .doc = "a multiple of the number of codes of `repeat`"},
    {.name = "generate", .type = KeyType::custom, .check = as_written, .type_doc = "generator object",
     .doc = "`n_special` layers of one code placed among `n_layers` of another (intra_hybrid.md 2.1, 2.2)"},
}};

const KeyTable kGenerateKeys{"generator", "placement", {
    {.name = "n_layers", .type = KeyType::integer, .required = true, .range = Range::at_least(1),
     .doc = "number of layers L"},
    {.name = "base", .type = KeyType::string, .required = true, .type_doc = "a block code",
     .doc = "the code of every layer not placed"},
    {.name = "special", .type = KeyType::string, .required = true, .type_doc = "a block code",
     .doc = "the code of the placed layers"},
    {.name = "n_special", .type = KeyType::integer, .range = Range::at_least(1), .default_doc = "required except with `every`",
     .doc = "number of placed layers n, at most `n_layers`; `every` derives it, and a given value must agree"},
    {.name = "placement", .type = KeyType::enumeration, .required = true,
     .values = {"middle", "scatter", "front", "end", "position", "cluster", "sandwich", "every"},
     .doc = "middle (= scatter): layers floor((k - 1/2) L / n), k = 1..n; front / end: middle with the first at 0 / the last "
            "at L - 1; position: the one layer `position`; cluster: n consecutive layers, centred; sandwich: the first, the "
            "last and n - 2 spread between; every: layers P - 1, 2P - 1, ... and L - 1"},
    {.name = "position", .type = KeyType::integer, .required = true, .range = Range::at_least(0), .only_for = {"position"},
     .doc = "the placed layer's index q, below `n_layers`; `n_special` must be 1"},
    {.name = "period", .type = KeyType::integer, .required = true, .range = Range::at_least(1), .only_for = {"every"},
     .doc = "P"},
}};

const KeyTable kOverrideKeys{"override", nullptr, {
    {.name = "layers", .type = KeyType::custom, .required = true, .check = as_written,
     .type_doc = "selector string or list of indices", .doc = "the layers changed: `\"6::8\"`, `\"3,11\"`, `\"-1\"`, `\"*\"`, `[3, 11]`"},
    {.name = "mixer", .type = KeyType::custom, .check = as_written, .type_doc = "partial mixer",
     .doc = "merged into the selected layers' mixers"},
    {.name = "mlp", .type = KeyType::custom, .check = as_written, .type_doc = "partial mlp",
     .doc = "merged into the selected layers' mlps"},
}};

Json resolve_model_keys(const Json& model, const Json& data) {
  Json scalars = model;
  for (const char* k : kStructuralKeys) scalars.erase(k);
  Json m = apply_key_table(kModelKeys, scalars, "model");
  for (const char* k : kStructuralKeys) m.erase(k);

  const bool mqar = data["task"] == "mqar";
  if (mqar) {
    const Json& vocab = data["mqar"]["vocab"];
    if (m["vocab_size"].is_null()) m["vocab_size"] = vocab;
    else if (m["vocab_size"] != vocab)
      throw ConfigKeyError("model.vocab_size", expected_problem(str_cat("null or ", vocab.dump(), " (data.mqar.vocab)"), m["vocab_size"]));
  } else {
    const std::string tokenizer = data["tokenizer"].get<std::string>();
    const int64_t vocab = tokenizer_vocab(tokenizer);
    if (m["vocab_size"].is_null()) m["vocab_size"] = (vocab + 63) / 64 * 64;
    if (json_int(m["vocab_size"]) < vocab)
      throw ConfigKeyError("model.vocab_size",
                           expected_problem(str_cat("an integer >= ", vocab, " (the vocabulary of the ", tokenizer, " tokenizer)"),
                                            m["vocab_size"]));
  }
  if (m["max_seq_len"].is_null()) m["max_seq_len"] = data["seq_len"];
  return m;
}

}  // namespace hyb
