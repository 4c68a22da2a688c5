// Where a tensor lives: "cpu" or "cuda:N". Ops dispatch on Device::kind with one branch each.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hyb {

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  static Device parse(std::string_view s);  // "cpu", "cuda", "cuda:1"
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  std::string str() const;
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::cpu || index == o.index); }
};

// Number of visible CUDA devices; 0 when built without CUDA or when no driver/GPU is present.
int cuda_device_count();

}  // namespace hyb
