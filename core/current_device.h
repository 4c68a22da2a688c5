// Makes `d` the calling thread's current CUDA device: kernels launch on the current device, not on
// their tensors', so a run on cuda:N calls this once before it touches the device; nothing for cpu.
// Defined in core/cuda/cuda_device.cu, and in core/device.cpp for builds without CUDA.
#pragma once
#include "core/device.h"

namespace hyb {

void make_current(Device d);

}  // namespace hyb
