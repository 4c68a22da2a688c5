// What `hybrid tokenize` computes: the canonical splits of eval.md 1.1 (presets tinyshakespeare and
// brown) and the shards of arbitrary input files, written as llm.c shards plus DIR/manifest.json
// (per shard: file, token count, sha256 of the tokens as little-endian uint16).
//   auto tok = make_tokenizer("gpt2");
//   auto splits = preset_splits("tinyshakespeare", *tok);   // {"ts.train", ...}, {"ts.val", ...}
//   write_token_splits("data/ts", splits, manifest_info);
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace hyb {

struct TokenSplit {
  std::string name;               // the shard name: DIR/<name>.bin, the manifest key
  std::vector<uint16_t> tokens;
};

// Documents in order: with an end-of-text id each document is followed by it (GPT-2); without
// one (bytes) consecutive documents are separated by the two bytes "\n\n" (eval.md 1.1).
void append_documents(Tokenizer& tok, const std::vector<std::string_view>& docs, std::vector<uint16_t>& out);

// eval.md 1.1: "tinyshakespeare" -> ts.train, ts.val; "brown" -> brown.train, brown.val, brown.test.
// Reads the corpus from find_data_path; `source` receives {"path", "bytes", "sha256"} of it.
std::vector<TokenSplit> preset_splits(const std::string& preset, Tokenizer& tok, nlohmann::json* source = nullptr);

// Tokenizes a file of any size in chunks cut where GPT-2's pre-tokeniser is certain to split
// ("X\nY" with X, Y printable ASCII), logging progress with MB/s. Gives exactly tok.encode(file).
void tokenize_file(const std::string& path, Tokenizer& tok, std::vector<uint16_t>& out, nlohmann::json* source = nullptr,
                   size_t chunk_bytes = size_t(32) << 20);
// Each file is one document (the rule of append_documents); `sources` gets one entry per file.
void tokenize_files(const std::vector<std::string>& paths, Tokenizer& tok, std::vector<uint16_t>& out,
                    nlohmann::json* sources = nullptr);

std::string tokens_sha256(const std::vector<uint16_t>& tokens);

// Writes DIR/<name>.bin for each split and DIR/manifest.json = info + {"shards": {name: {file,
// tokens, sha256}}}; creates DIR.
void write_token_splits(const std::string& dir, const std::vector<TokenSplit>& splits, nlohmann::json info);

}  // namespace hyb
