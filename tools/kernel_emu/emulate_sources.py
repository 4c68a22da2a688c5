#!/usr/bin/env python3
"""Host sources for the kernel emulator (emu_cuda.h).

  emulate_sources.py cu SRC.cu OUT.cpp       a kernel file as host C++: launches become emu::launch,
                                             dynamic shared memory the block's emulated buffer
  emulate_sources.py flash SRC.cuh OUT.cuh   flash_attention_device.cuh with its inline-PTX helpers
                                             (cp.async, ldmatrix, mma.sync, ...) as warp-collective C++
"""
import re
import sys

# The register layouts are those of the PTX ISA for ldmatrix .x4 and mma.m16n8k16 .row.col (bf16):
# lane l = 4 g + t holds row g (and g + 8), columns 2t, 2t + 1 (and + 8).
FLASH_HELPERS = {
    'smem_u32': '''__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - emu::smem_base());
}''',
    'cp_async16': '''__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  if (valid) std::memcpy(emu::smem_base() + dst, src, 16);
  else std::memset(emu::smem_base() + dst, 0, 16);
}''',
    'cp_async4': '''__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  if (valid) std::memcpy(emu::smem_base() + dst, src, 4);
  else std::memset(emu::smem_base() + dst, 0, 4);
}''',
    'cp_async_commit': '__device__ __forceinline__ void cp_async_commit() {}',
    'cp_async_wait': '''template <int N>
__device__ __forceinline__ void cp_async_wait() {}''',
    'ldsm_x4': '''__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  const unsigned l = emu::lane();
  emu::xch(l)[0] = addr;  // lane 8 m + i: the address of row i of matrix m
  emu::syncwarp();
  for (int m = 0; m < 4; ++m) std::memcpy(&r[m], emu::smem_base() + emu::xch(8 * m + l / 4)[0] + 4 * (l % 4), 4);
  emu::syncwarp();
}''',
    'ldsm_x4_t': '''__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  const unsigned l = emu::lane();
  emu::xch(l)[0] = addr;
  emu::syncwarp();
  for (int m = 0; m < 4; ++m) {  // element (l / 4, 2 (l % 4) + q) of the transposed matrix m
    uint16_t h[2];
    for (int q = 0; q < 2; ++q) std::memcpy(&h[q], emu::smem_base() + emu::xch(8 * m + 2 * (l % 4) + q)[0] + 2 * (l / 4), 2);
    r[m] = uint32_t(h[0]) | (uint32_t(h[1]) << 16);
  }
  emu::syncwarp();
}''',
    'mma_16816': '''__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const unsigned l = emu::lane();
  uint32_t* x = emu::xch(l);
  for (int i = 0; i < 4; ++i) x[i] = a[i];
  x[4] = b0, x[5] = b1;
  emu::syncwarp();
  auto half = [](uint32_t w, int k) { return __uint_as_float(k % 2 ? w & 0xffff0000u : (w & 0xffffu) << 16); };
  auto A = [&](int row, int k) { return half(emu::xch(row % 8 * 4 + k % 8 / 2)[row / 8 + 2 * (k / 8)], k); };  // 16 x 16
  auto B = [&](int k, int n) { return half(emu::xch(n * 4 + k % 8 / 2)[4 + k / 8], k); };                   // 16 x 8
  float d[4];
  for (int e = 0; e < 4; ++e) {
    const int row = int(l / 4) + 8 * (e / 2), col = int(l % 4) * 2 + e % 2;
    float s = c[e];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    d[e] = s;
  }
  emu::syncwarp();
  for (int e = 0; e < 4; ++e) c[e] = d[e];
}''',
    'fast_exp2': '__device__ __forceinline__ float fast_exp2(float x) { return std::exp2(x); }',
    'red_add_v2': '''__device__ __forceinline__ void red_add_v2(float* dst, float a, float b) {
  dst[0] += a;
  dst[1] += b;
}''',
}


def replace_function(src, name, body):
    """Replaces the definition of function `name` (with its template line, if any) by `body`."""
    m = re.search(r'(template <int N>\n)?__device__ __forceinline__ [^\n(]*\b' + re.escape(name) + r'\(', src)
    if not m:
        sys.exit(f'emulate_sources: {name} not found')
    i, depth = src.index('{', m.end()), 0
    while True:
        depth += {'{': 1, '}': -1}.get(src[i], 0)
        if depth == 0:
            break
        i += 1
    return src[:m.start()] + body + src[i + 1:]


def emulate_flash(src):
    for name, body in FLASH_HELPERS.items():
        src = replace_function(src, name, body)
    return src.replace('#include <cuda_bf16.h>', '#include <cuda_bf16.h>\n\n#include "emu_cuda.h"', 1)


def emulate_kernels(src):
    src = '#include "emu_cuda.h"\n' + src
    src = src.replace('extern __shared__ __align__(16) unsigned char smem[];', 'unsigned char* smem = emu::smem_base();')
    src = re.sub(r'([\w:]+(?:<[^<>;]*>)?)<<<([^;]*?)>>>\(', r'emu::launch(\1, \2, ', src)
    if '<<<' in src:
        sys.exit('emulate_sources: a launch was not rewritten')
    # The CPU twin of chunk_to_tokens writes f32 or f64; the device one also writes bf16.
    if 'chunk_to_tokens(out.' in src:
        src = src.replace('chunk_to_tokens(out.', 'emu_chunk_to_tokens(out.')
        src = src.replace('namespace hyb {', '''namespace hyb {
inline void emu_chunk_to_tokens(Tensor& out, const ChunkBuffer& buf, int64_t hpg, const ChunkVec* rs, float alpha,
                                const ChunkDims& d) {
  Tensor t = Tensor::empty(out.shape(), DType::f32);
  chunk_to_tokens(t, buf, hpg, rs, alpha, d);
  out.copy_(t.to(out.dtype()));
}''', 1)
    return src


if __name__ == '__main__':
    if len(sys.argv) != 4 or sys.argv[1] not in ('cu', 'flash'):
        sys.exit(__doc__)
    text = open(sys.argv[2]).read()
    open(sys.argv[3], 'w').write(emulate_kernels(text) if sys.argv[1] == 'cu' else emulate_flash(text))
