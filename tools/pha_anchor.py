"""PyTorch anchors for `hybrid bench ops --filter dss_fwd_bwd,pha_block_fwd_bwd`: the same math written
in PyTorch (specs/pha.md 2.2, 4.2-4.5, 6) at the same shapes, timed forward+backward eagerly and under
torch.compile, in the same device call. The DSS convolution is fp32: the kernel K from the fp64
Vandermonde basis, then rfft / irfft at n = the smallest 2^a 3^b 5^c 7^d >= 2T - 1. The block runs
under bf16 autocast with fp32 parameters and the DSS path in fp32, as ours does; attention is SDPA
(its default backend) on cosine logits with RoPE, the kv heads repeated for GQA. CUDA events, the
median of 10 runs after 5 warm-ups (sdpa_anchor.median_ms).
Usage: python3 tools/pha_anchor.py [--no-compile] [--block-only]
"""

import math
import sys

import torch
import torch.nn.functional as F

from sdpa_anchor import median_ms


def fft_length(T):
    n = 2 * T - 1
    while True:
        m = n
        for p in (2, 3, 5, 7):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def dss_basis(l_re, l_im, T):
    """[Re S; Im S] (2Ns, T) in fp32 from fp64 angles, and Bz (complex, Ns)."""
    lam = torch.complex(-torch.exp(l_re.double()), torch.exp(l_im.double()))
    bz = (torch.exp(lam) - 1) / lam
    s = torch.exp(lam[:, None] * torch.arange(T, device=l_re.device, dtype=torch.float64)[None, :])
    return torch.cat([s.real, s.imag]).float(), bz


def dss_conv(v, l_re, l_im, c_re, c_im, d):
    """y = K * v + D v per channel; v (B, T, Hs) fp32."""
    T = v.shape[1]
    basis, bz = dss_basis(l_re, l_im, T)
    cp = torch.complex(c_re, c_im) * bz.to(torch.complex64)
    K = torch.cat([cp.real, -cp.imag], dim=1) @ basis  # (Hs, T)
    n = fft_length(T)
    y = torch.fft.irfft(torch.fft.rfft(v.transpose(1, 2), n=n) * torch.fft.rfft(K, n=n), n=n)[..., :T]
    return y.transpose(1, 2) + d * v


def rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w.to(x.dtype)


def swiglu(x, wg, wu, wd):
    return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)


def rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class PhaBlock(torch.nn.Module):
    def __init__(self, d=768, hq=12, hkv=4, hd=64, F_=3072, hs=256, ns=512, aux=960, main=1920, L=10):
        super().__init__()
        P = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        self.hq, self.hkv, self.hd = hq, hkv, hd
        self.alpha = (2 * L) ** 0.25
        self.g_in, self.g_mlp = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
        self.g_out = torch.nn.Parameter(torch.ones(3, d))
        self.wq, self.wk, self.wv, self.wo = P(hq * hd, d), P(hkv * hd, d), P(hkv * hd, d), P(d, hq * hd)
        self.theta = torch.nn.Parameter(torch.full((hq,), math.log(10.0)))
        self.wu, self.wv2, self.wgate, self.wout, self.bout = P(F_, d), P(hs, d), P(F_, hs), P(d, F_), P(d)
        self.ln_w, self.ln_b = torch.nn.Parameter(torch.ones(hs)), torch.nn.Parameter(torch.zeros(hs))
        self.l_re, self.l_im = torch.nn.Parameter(torch.randn(ns)), torch.nn.Parameter(torch.randn(ns))
        self.c_re, self.c_im, self.dd = P(hs, ns), P(hs, ns), P(hs)
        self.aux = torch.nn.ParameterList([P(aux, d), P(aux, d), P(d, aux)])
        self.mlp = torch.nn.ParameterList([P(main, d), P(main, d), P(d, main)])
        self.p = torch.nn.Parameter(torch.zeros(3))

    def attn(self, x, cos, sin):
        B, T, _ = x.shape
        q = F.linear(x, self.wq).view(B, T, self.hq, self.hd).transpose(1, 2)
        k = F.linear(x, self.wk).view(B, T, self.hkv, self.hd).transpose(1, 2)
        v = F.linear(x, self.wv).view(B, T, self.hkv, self.hd).transpose(1, 2)
        q, k = rope(F.normalize(q, dim=-1), cos, sin), rope(F.normalize(k, dim=-1), cos, sin)
        tau = torch.exp(torch.clamp(self.theta, max=math.log(100.0))).view(1, -1, 1, 1).to(q.dtype)
        rep = self.hq // self.hkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q * tau, k, v, is_causal=True, scale=1.0)
        return F.linear(o.transpose(1, 2).reshape(B, T, -1), self.wo)

    def gss(self, x):
        u = F.gelu(F.linear(x, self.wu))
        b = F.gelu(F.linear(x, self.wv2))
        with torch.autocast("cuda", enabled=False):
            v = F.layer_norm(b.float(), (self.ln_w.shape[0],), self.ln_w, self.ln_b)
            y = dss_conv(v, self.l_re, self.l_im, self.c_re, self.c_im, self.dd)
        return F.linear(F.linear(y.to(x.dtype), self.wgate) * u, self.wout, self.bout)

    def forward(self, x, cos, sin):
        xh = rms_norm(x, self.g_in)
        z = [self.attn(xh, cos, sin), self.gss(xh), swiglu(xh, *self.aux)]
        s = F.softplus(self.p)
        w = s / s.sum()
        m = sum(w[k] * rms_norm(z[k], self.g_out[k]) for k in range(3))
        h = self.alpha * xh + m
        hh = rms_norm(h, self.g_mlp)
        return self.alpha * hh + swiglu(hh, *self.mlp)


def main():
    compile_too = "--no-compile" not in sys.argv
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    N, Hs, Ns = 24576, 256, 512
    for T in () if "--block-only" in sys.argv else (1024, 2048, 4096, 8192):
        B = N // T
        g = torch.Generator(device=dev).manual_seed(T)
        v = torch.randn(B, T, Hs, device=dev, generator=g, requires_grad=True)
        prm = [torch.randn(*s, device=dev, generator=g).requires_grad_() for s in ((Ns,), (Ns,), (Hs, Ns), (Hs, Ns), (Hs,))]
        dy = torch.randn(B, T, Hs, device=dev, generator=g)
        fns = [("eager", dss_conv)] + ([("compile", torch.compile(dss_conv))] if compile_too else [])
        for name, fn in fns:
            try:
                ms = median_ms(lambda: fn(v, *prm).backward(dy), reps=10)
                print(f"anchor dss_fwd_bwd B{B} T{T} Hs{Hs} Ns{Ns} {name}: {ms:.3f} ms")
            except Exception as e:  # an anchor that does not run is recorded, not fatal
                print(f"anchor dss_fwd_bwd B{B} T{T} {name}: failed: {type(e).__name__}: {str(e)[:200]}")
    for T in (1024, 2048, 4096, 8192):
        B = N // T
        block = PhaBlock().to(dev)
        pos = torch.arange(T, device=dev, dtype=torch.float32)
        inv = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, device=dev, dtype=torch.float32) / 64))
        ang = pos[:, None] * inv[None, :]
        cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        x = torch.randn(B, T, 768, device=dev, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(B, T, 768, device=dev, dtype=torch.bfloat16)

        def step(f):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = f(x, cos, sin)
            out.backward(dy)

        fns = [("eager", block)] + ([("compile", torch.compile(block))] if compile_too else [])
        for name, fn in fns:
            try:
                ms = median_ms(lambda: step(fn), reps=10)
                print(f"anchor pha_block_fwd_bwd B{B} T{T} d_model 768 {name}: {ms:.3f} ms")
            except Exception as e:  # an anchor that does not run is recorded, not fatal
                print(f"anchor pha_block_fwd_bwd B{B} T{T} {name}: failed: {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
