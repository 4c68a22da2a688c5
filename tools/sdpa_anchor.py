"""Times torch.nn.functional.scaled_dot_product_attention forward and forward+backward (causal,
bf16, is_causal=True) at the attention.md 4.5 benchmark shapes, so our flash-attention kernels
(tools/flash_attention_dev.cu) can be compared with it in the same device call. CUDA events,
median of 25 runs after 5 warm-ups; each SDPA backend that runs is timed, then the default choice.
Usage: python3 tools/sdpa_anchor.py [--default-only]   (--default-only: the default choice alone)
"""

import contextlib
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, warmup=5, reps=25):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def time_shape(T, backend):
    B, H, D = 32768 // T, 16, 64
    # (B, T, H, D) storage viewed as (B, H, T, D), the layout our kernels read.
    q, k, v, do = (torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        o = fwd()
        torch.autograd.grad(o, (q, k, v), do)

    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        f = median_ms(fwd)
        fb = median_ms(fwd_bwd)
    flops = 4.0 * B * H * T * T * D / 2
    return f, fb, flops


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cudnn {torch.backends.cudnn.version()}")
    print(f"{'backend':<10} {'T':>6} {'fwd ms':>9} {'fwd+bwd ms':>11} {'fwd TF/s':>9} {'total TF/s':>11}")
    backends = [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if "--default-only" in sys.argv[1:]:
        backends = backends[:1]
    for name, backend in backends:
        for T in (1024, 2048, 4096, 8192, 16384):
            try:
                f, fb, flops = time_shape(T, backend)
            except RuntimeError as e:
                print(f"{name:<10} {T:>6} failed: {str(e).splitlines()[0][:80]}")
                break
            print(f"{name:<10} {T:>6} {f:>9.3f} {fb:>11.3f} {flops / f * 1e-9:>9.1f} {3.5 * flops / fb * 1e-9:>11.1f}")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
