// Canonical splits, chunked tokenization of large files, shard and manifest writing.
#include "data/tokenize.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "data/shard.h"

namespace hyb {

namespace {

void append_checked(const std::vector<int32_t>& ids, std::vector<uint16_t>& out) {
  for (int32_t id : ids) {
    HYB_ASSERT(id >= 0 && id <= 0xFFFF, "token id ", id, " does not fit a uint16 shard");
    out.push_back(uint16_t(id));
  }
}


nlohmann::json describe_source(const std::string& name, std::string_view bytes) {
  return {{"path", name}, {"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The document rule of append_documents, in two halves around a document's own tokens.
void begin_document(Tokenizer& tok, size_t index, std::vector<int32_t>& ids) {
  if (!tok.eot() && index > 0) tok.encode("\n\n", ids);
}
void end_document(Tokenizer& tok, std::vector<int32_t>& ids) {
  if (tok.eot()) ids.push_back(*tok.eot());
}

}  // namespace

void append_documents(Tokenizer& tok, const std::vector<std::string_view>& docs, std::vector<uint16_t>& out) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < docs.size(); ++i) {
    ids.clear();
    begin_document(tok, i, ids);
    tok.encode(docs[i], ids);
    end_document(tok, ids);
    append_checked(ids, out);
  }
}

std::vector<TokenSplit> preset_splits(const std::string& preset, Tokenizer& tok, nlohmann::json* source) {
  if (preset == "tinyshakespeare") {
    const std::string text = read_file(find_data_path("tinyshakespeare/input.txt"));
    if (source) *source = describe_source("data/tinyshakespeare/input.txt", text);
    std::vector<int32_t> ids = tok.encode(text);  // the whole file at once, no end-of-text
    std::vector<uint16_t> all;
    append_checked(ids, all);
    const size_t cut = all.size() * 9 / 10;  // floor(0.9 n)
    return {{"ts.train", {all.begin(), all.begin() + std::ptrdiff_t(cut)}}, {"ts.val", {all.begin() + std::ptrdiff_t(cut), all.end()}}};
  }
  if (preset == "brown") {
    const std::string text = read_file(find_data_path("brown/brown.txt"));
    if (source) *source = describe_source("data/brown/brown.txt", text);
    std::vector<std::string_view> samples;  // Python's text.split("\n\n")
    for (size_t start = 0;;) {
      const size_t sep = text.find("\n\n", start);
      samples.emplace_back(text.data() + start, (sep == std::string::npos ? text.size() : sep) - start);
      if (sep == std::string::npos) break;
      start = sep + 2;
    }
    HYB_CHECK(samples.size() == 500, "data/brown/brown.txt: expected 500 samples separated by blank lines, found ", samples.size());
    std::vector<std::string_view> part[3];  // i mod 10 in 0..7: train, 8: val, 9: test
    for (size_t i = 0; i < samples.size(); ++i) part[i % 10 < 8 ? 0 : i % 10 == 8 ? 1 : 2].push_back(samples[i]);
    std::vector<TokenSplit> out = {{"brown.train", {}}, {"brown.val", {}}, {"brown.test", {}}};
    for (int k = 0; k < 3; ++k) append_documents(tok, part[k], out[size_t(k)].tokens);
    return out;
  }
  throw Error(str_cat("tokenize: unknown preset \"", preset, "\" (expected tinyshakespeare or brown)"));
}

void tokenize_files(const std::vector<std::string>& paths, Tokenizer& tok, std::vector<uint16_t>& out, nlohmann::json* sources) {
  if (sources) *sources = nlohmann::json::array();
  for (size_t i = 0; i < paths.size(); ++i) {
    std::vector<int32_t> ids;
    begin_document(tok, i, ids);
    append_checked(ids, out);
    nlohmann::json source;
    tokenize_file(paths[i], tok, out, &source);
    ids.clear();
    end_document(tok, ids);
    append_checked(ids, out);
    if (sources) sources->push_back(source);
  }
}

void tokenize_file(const std::string& path, Tokenizer& tok, std::vector<uint16_t>& out, nlohmann::json* source, size_t chunk_bytes) {
  HYB_ASSERT(chunk_bytes > 0, "chunk_bytes must be > 0");
  std::ifstream in(path, std::ios::binary);
  HYB_CHECK(in, path, ": cannot open");
  in.seekg(0, std::ios::end);
  const int64_t file_bytes = int64_t(in.tellg());
  const double total_mb = double(file_bytes) / 1e6;
  in.seekg(0);
  const auto t0 = std::chrono::steady_clock::now();
  double last_log = 0;
  Sha256 hash;
  int64_t bytes = 0;
  std::string buf;
  std::vector<int32_t> ids;
  auto printable = [](char c) { return c > ' ' && c < 0x7F; };
  for (bool eof = false; !eof;) {
    const size_t old = buf.size();
    // One byte more than the file still holds (if that is less than a chunk), so a short read sees the end.
    const size_t want = std::min<size_t>(chunk_bytes, size_t(std::max<int64_t>(file_bytes - bytes, 0)) + 1);
    buf.resize(old + want);
    in.read(buf.data() + old, std::streamsize(want));
    buf.resize(old + size_t(in.gcount()));
    hash.update(buf.data() + old, buf.size() - old);
    bytes += int64_t(buf.size() - old);
    eof = in.gcount() == 0 || in.eof();
    size_t cut = buf.size();
    if (!eof) {  // the last "X\nY" of the buffer; none yet: read on. Cuts before `old` were ruled out already.
      const size_t lo = std::max<size_t>(2, old);
      for (cut = buf.size() - 1; cut >= lo && !(buf[cut - 1] == '\n' && printable(buf[cut - 2]) && printable(buf[cut])); --cut) {}
      if (cut < lo) continue;
    }
    ids.clear();
    tok.encode(std::string_view(buf).substr(0, cut), ids);
    append_checked(ids, out);
    buf.erase(0, cut);
    const double s = seconds_since(t0);
    if (s - last_log >= 2.0 && !eof) {
      last_log = s;
      spdlog::info("tokenize: {} {:.1f}/{:.1f} MB, {:.2f} MB/s, {} tokens", path, double(bytes) / 1e6, total_mb, double(bytes) / 1e6 / s, out.size());
    }
  }
  const double s = seconds_since(t0);
  spdlog::info("tokenize: {} {:.1f} MB in {:.2f} s, {:.2f} MB/s, {} tokens so far", path, double(bytes) / 1e6, s,
               double(bytes) / 1e6 / std::max(s, 1e-9), out.size());
  if (source) *source = {{"path", path}, {"bytes", bytes}, {"sha256", hash.hex_digest()}};
}

std::string tokens_sha256(const std::vector<uint16_t>& tokens) {
  Sha256 h;  // shards are little-endian and so is the host (data/shard.cpp): the bytes as they are
  h.update(tokens.data(), 2 * tokens.size());
  return h.hex_digest();
}

void write_token_splits(const std::string& dir, const std::vector<TokenSplit>& splits, nlohmann::json info) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  HYB_CHECK(!ec, dir, ": cannot create the output directory: ", ec.message());
  nlohmann::json shards = nlohmann::json::object();
  for (const TokenSplit& s : splits) {
    const std::string file = s.name + ".bin";
    write_shard(dir + "/" + file, s.tokens);
    shards[s.name] = {{"file", file}, {"tokens", s.tokens.size()}, {"sha256", tokens_sha256(s.tokens)}};
    spdlog::info("tokenize: wrote {}/{}: {} tokens", dir, file, s.tokens.size());
  }
  info["shards"] = shards;
  write_file_atomic(dir + "/manifest.json", info.dump(2) + "\n");
}

}  // namespace hyb
