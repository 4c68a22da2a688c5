#include "core/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace hyb {

using json = nlohmann::json;

bool SafetensorsFile::has(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return true;
  return false;
}

const Tensor& SafetensorsFile::get(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw Error(str_cat(path, ": no tensor named ", name));
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HYB_CHECK(in, path, ": cannot open: ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  HYB_CHECK(file_size >= 8, path, ": not a safetensors file: ", file_size, " bytes, shorter than the 8-byte header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  HYB_CHECK(header_len <= file_size - 8, path, ": header length ", header_len, " exceeds the file (", file_size,
            " bytes): the file is truncated or not safetensors");
  HYB_CHECK(header_len <= (100u << 20), path, ": header length ", header_len, " is implausibly large");
  std::string header(header_len, '\0');
  in.read(header.data(), std::streamsize(header_len));
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    throw Error(str_cat(path, ": malformed safetensors header: ", e.what()));
  }
  HYB_CHECK(h.is_object(), path, ": malformed safetensors header: not a JSON object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;

  SafetensorsFile f;
  f.path = path;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      HYB_CHECK(v.is_object(), path, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        HYB_CHECK(m.value().is_string(), path, ": __metadata__.", m.key(), " must be a string");
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    HYB_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), path,
              ": tensor ", name, ": expected an object with dtype, shape and data_offsets");
    Entry e;
    e.name = name;
    HYB_CHECK(v["dtype"].is_string() && dtype_from_safetensors_name(v["dtype"].get<std::string>(), &e.dtype), path,
              ": tensor ", name, ": unsupported dtype ", v["dtype"].dump(), " (supported: F32, F64, BF16, I32, I64, U16)");
    HYB_CHECK(v["shape"].is_array(), path, ": tensor ", name, ": shape must be a list");
    for (const json& d : v["shape"]) {
      HYB_CHECK(d.is_number_unsigned(), path, ": tensor ", name, ": shape entries must be non-negative integers, got ",
                v["shape"].dump());
      e.shape.push_back(d.get<int64_t>());
    }
    const json& off = v["data_offsets"];
    HYB_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), path,
              ": tensor ", name, ": data_offsets must be [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    const uint64_t want = uint64_t(shape_numel(e.shape)) * dtype_size(e.dtype);
    HYB_CHECK(e.begin <= e.end && e.end - e.begin == want, path, ": tensor ", name, ": data_offsets [", e.begin, ", ",
              e.end, "] hold ", e.end - e.begin, " bytes but ", dtype_safetensors_name(e.dtype), " ",
              shape_str(e.shape), " needs ", want);
    HYB_CHECK(e.end <= data_size, path, ": tensor ", name, ": data [", e.begin, ", ", e.end, ") runs past the end of the file (",
              data_size, " data bytes): the file is truncated");
    entries.push_back(std::move(e));
  }
  // Header order is not data order; keep the data order so reads are sequential.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(std::streamoff(data_start + e.begin));
    in.read(static_cast<char*>(t.raw_data()), std::streamsize(e.end - e.begin));
    HYB_CHECK(in.good() || e.end == e.begin, path, ": tensor ", e.name, ": read failed (truncated file?)");
    f.tensors.emplace_back(e.name, std::move(t));
  }
  return f;
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

namespace {

struct AtomicFile {
  std::string path, tmp;
  FILE* f = nullptr;
  explicit AtomicFile(const std::string& p) : path(p), tmp(p + ".tmp") {
    f = std::fopen(tmp.c_str(), "wb");
    HYB_CHECK(f, tmp, ": cannot open for writing: ", std::strerror(errno));
  }
  void write(const void* data, size_t n) {
    if (n == 0) return;
    HYB_CHECK(std::fwrite(data, 1, n, f) == n, tmp, ": write failed: ", std::strerror(errno));
  }
  void commit() {
    HYB_CHECK(std::fflush(f) == 0 && ::fsync(fileno(f)) == 0, tmp, ": flush failed: ", std::strerror(errno));
    std::fclose(f);
    f = nullptr;
    HYB_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
    fsync_directory(std::filesystem::path(path).parent_path().string());
  }
  ~AtomicFile() {
    if (f) {
      std::fclose(f);
      std::remove(tmp.c_str());
    }
  }
};

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HYB_CHECK(in, path, ": cannot open: ", std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HYB_CHECK(name != "__metadata__", path, ": a tensor may not be named __metadata__");
    HYB_CHECK(!h.contains(name), path, ": tensor ", name, " given twice");
    h[name] = {{"dtype", dtype_safetensors_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  AtomicFile f(path);
  f.write(len_bytes, 8);
  f.write(header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    Tensor c = t.to(Device::cpu()).contiguous();
    f.write(c.raw_data(), c.nbytes());
  }
  f.commit();
}

}  // namespace hyb
