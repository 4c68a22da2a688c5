// safetensors files: the checkpoint and interop format (https://github.com/huggingface/safetensors).
// Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {str: str}}, then the raw little-endian data. Every field is validated on load;
// an error names the file and the tensor. Writes go to PATH.tmp, are flushed and renamed, so a
// crash never leaves a half-written file under the final name.
//   save_safetensors("w.safetensors", {{"model.norm.weight", w}}, {{"format", "hybrid"}});
//   SafetensorsFile f = load_safetensors("w.safetensors");
//   Tensor w2 = f.get("model.norm.weight");
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace hyb {

struct SafetensorsFile {
  std::string path;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in header order, cpu
  std::map<std::string, std::string> metadata;

  bool has(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // error names the file and the tensor
};

SafetensorsFile load_safetensors(const std::string& path);
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Writes bytes to path via path.tmp + fsync + rename (also used for JSON state files).
void write_file_atomic(const std::string& path, const std::string& bytes);
void fsync_directory(const std::string& dir);
// The whole file as bytes; an error names the file.
std::string read_file(const std::string& path);

}  // namespace hyb
