// The byte tokenizer, the tokenizer factory, and where the repository's data files are found.
#include "data/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "data/gpt2_bpe.h"

#ifndef HYBRID_SOURCE_DIR
#define HYBRID_SOURCE_DIR "."
#endif

namespace hyb {

void ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(int32_t(uint8_t(c)));
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int32_t id : ids) {
    HYB_CHECK(id >= 0 && id < 256, "byte tokenizer: token id ", id, " is not in [0, 256)");
    out.push_back(char(uint8_t(id)));
  }
  return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& gpt2_dir) {
  if (name == "gpt2") return std::make_unique<Gpt2Bpe>(gpt2_dir.empty() ? find_data_path("gpt2") : gpt2_dir);
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  throw Error(str_cat("unknown tokenizer \"", name, "\" (expected \"gpt2\" or \"byte\")"));
}

std::string find_data_path(const std::string& rel) {
  namespace fs = std::filesystem;
  const fs::path local = fs::path("data") / rel, built = fs::path(HYBRID_SOURCE_DIR) / "data" / rel;
  if (fs::exists(local)) return local.string();
  if (fs::exists(built)) return built.string();
  throw Error(str_cat("data file ", rel, " not found: looked for ", local.string(), " and ", built.string()));
}

}  // namespace hyb
