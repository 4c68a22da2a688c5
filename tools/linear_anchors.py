"""Times the public Triton kernels our linear-attention and NHA kernels are compared with, forward and
forward+backward (bf16, B*T = 32768), in the same device call as our own benchmark, and checks FLA's
gated backward against a float32 recurrence (last). CUDA events, median of 25 runs after 0.5 s of
warm-up (tools/sdpa_anchor.py's timer); the forward is timed with gradients enabled, as in training.

The kernels are read from DIR (git-ignored, never committed):
  DIR/fla/          FLA's python package at the commit in DIR/FLA_COMMIT (simple_gla, gated_delta_rule, gsa)
  DIR/fla-v0.4.0/   FLA v0.4.0 (fla/ops, fla/utils.py): the release the official NHA kernel imports
  DIR/nha_fla/      the official NHA ops (JusenD/NHA, commits in DIR/NHA_COMMITS); chunk_nha is the
                    paper-era training kernel, called with its inputs pre-padded as the layer hands them over
Packages are registered bare, so fla/__init__.py (models, transformers) never runs.

Autotuning is capped to --max-configs configs per kernel (0: Triton's full search). The default, 4, needs
about 6 minutes on an H100 (two partial runs, 2026-11-23). A cap of 2 took 5 minutes but picked configs
that made the NHA and the K=128 gated-delta-rule fwd+bwd 2x and 6x slower: compare numbers taken at one cap.
Usage: python3 tools/linear_anchors.py [--anchors DIR] [--only name,...] [--T 1024,4096] [--max-configs N]
"""

import argparse
import importlib
import re
import sys
import time
import types
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.runtime.autotuner import Autotuner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdpa_anchor import median_ms  # noqa: E402

TOKENS = 32768


MAX_CONFIGS = [0]  # 0: Triton's full search


def cap_autotune():
    """Benchmark at most MAX_CONFIGS configs of each kernel's (already pruned) list, spread evenly from its
    middle; read at every tuning, so the gradient check can drop to one config (no benchmarking)."""
    prune = Autotuner.prune_configs

    def capped(self, *args, **kwargs):
        configs, n = prune(self, *args, **kwargs), MAX_CONFIGS[0]
        return configs if n <= 0 or len(configs) <= n else [configs[int((i + 0.5) * len(configs) / n)]
                                                             for i in range(n)]

    Autotuner.prune_configs = capped


def bare_package(name, path):
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
    parent, _, child = name.rpartition('.')
    if parent:
        setattr(sys.modules[parent], child, module)


_fla_tree = None


def use_fla(tree):
    """Makes `fla` the package under tree, dropping any other fla (and nha_fla) already imported."""
    global _fla_tree
    if _fla_tree == tree:
        return
    for name in [m for m in sys.modules if m.split('.')[0] in ('fla', 'nha_fla')]:
        del sys.modules[name]
    bare_package('fla', tree / 'fla')
    # fla.utils reads fla.__version__; it is the one thing of fla/__init__.py the ops need
    sys.modules['fla'].__version__ = re.search(r"__version__ = ['\"](.+?)['\"]",
                                               (tree / 'fla' / '__init__.py').read_text()).group(1)
    for sub in ('ops', 'modules'):
        if (tree / 'fla' / sub).is_dir():
            bare_package(f'fla.{sub}', tree / 'fla' / sub)
    _fla_tree = tree


def allow_gated_bwd_on_hopper():
    """FLA refuses the gated chunk_bwd_dqkwg on Hopper with Triton 3.4 to 3.7.0 (its issue #640: wrong
    gradients). Let it run so it can be timed; the gradient check below says whether it is wrong here."""
    chunk_o = sys.modules.get('fla.ops.common.chunk_o')
    if chunk_o is not None and getattr(chunk_o, 'TRITON_ABOVE_3_7_1', True) is False:
        chunk_o.TRITON_ABOVE_3_7_1 = True
        print("note: FLA's Hopper guard for the gated chunk_bwd_dqkwg (#640) bypassed")


def load(anchors, tree, module):
    use_fla(anchors / tree)
    if module.startswith('nha_fla'):
        for pkg in ('nha_fla', 'nha_fla.ops', 'nha_fla.ops.nha'):
            bare_package(pkg, anchors.joinpath(*pkg.split('.')))
    mod = importlib.import_module(module)
    allow_gated_bwd_on_hopper()
    return mod


def first_line(e):
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device='cuda', dtype=dtype)


def slot_gates(*shape):
    """GSA/NHA layer gates: log-decay g = logsigmoid(x) / 8 per slot, write weight s = 1 - e^g."""
    g = F.logsigmoid(randn(*shape, dtype=torch.float)) / 8
    return (1 - g.exp()).bfloat16(), g.bfloat16()


def case_simple_gla(ops, T, H=16, K=64, V=64):
    B = TOKENS // T
    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
    g = F.logsigmoid(randn(B, T, H, dtype=torch.float))
    return [q, k, v, g], lambda: ops.chunk_simple_gla(q, k, v, g=g)[0]


def case_gated_delta_rule(ops, T, H=16, K=64, V=64):
    B = TOKENS // T
    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
    g = F.logsigmoid(randn(B, T, H, dtype=torch.float))
    beta = torch.sigmoid(randn(B, T, H))
    return [q, k, v, g, beta], lambda: ops.chunk_gated_delta_rule(
        q, k, v, g, beta, use_qk_l2norm_in_kernel=True)[0]


def case_gsa(ops, T, H=16, K=64, V=64, M=64):
    B = TOKENS // T
    q, k, v = randn(B, T, H, K), randn(B, T, H, K), randn(B, T, H, V)
    s, g = slot_gates(B, T, H, M)
    return [q, k, v, s, g], lambda: ops.chunk_gsa(q, k, v, s, g)[0]


def case_nha(ops, T, H=16, K=64, V=64, M=32, w=32):
    """k, v, s, g and the RoPE'd k front-padded with w zero rows (the token shift), as the layer does."""
    B = TOKENS // T
    pad = partial(F.pad, pad=(0, 0, 0, 0, w, 0))
    q, rq = randn(B, T, H, K), randn(B, T, H, K)
    k, v, rk = pad(randn(B, T, H, K)), pad(randn(B, T, H, V)), pad(randn(B, T, H, K))
    s, g = map(pad, slot_gates(B, T, H, M))
    return [q, k, v, rq, rk, s, g], lambda: ops.chunk_nha(q, k, v, rq, rk, None, w, s, g)[0]


HEAD, V040 = '.', 'fla-v0.4.0'  # FLA trees under DIR
ANCHORS = {  # name: (FLA tree, module, case); timed in this order
    'simple_gla': (HEAD, 'fla.ops.simple_gla.chunk', case_simple_gla),
    'gated_delta_rule': (HEAD, 'fla.ops.gated_delta_rule.chunk', case_gated_delta_rule),
    'gated_delta_rule_h6_k128_v256': (HEAD, 'fla.ops.gated_delta_rule.chunk',
                                      partial(case_gated_delta_rule, H=6, K=128, V=256)),
    'gsa_m64': (HEAD, 'fla.ops.gsa.chunk', case_gsa),
    'gsa_m64_fla040': (V040, 'fla.ops.gsa.chunk', case_gsa),
    'nha_m32_w32': (V040, 'nha_fla.ops.nha.chunk', case_nha),
}
DEFAULT = ['simple_gla', 'gated_delta_rule', 'gated_delta_rule_h6_k128_v256', 'gsa_m64', 'nha_m32_w32',
           'gradcheck']


def busy(fn, seconds=0.5):
    """Runs fn for a while: a compile in the first call leaves the GPU idle and its clocks low."""
    end = time.time() + seconds
    while time.time() < end:
        fn()
        torch.cuda.synchronize()


def time_anchor(name, ops, case, T):
    leaves, fwd = case(ops, T)
    for x in leaves:
        x.requires_grad_(True)
    do = torch.randn_like(fwd())

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, do)

    busy(fwd_bwd)
    f = median_ms(fwd)
    fb = median_ms(fwd_bwd)
    print(f"anchor {name} T={T} fwd+bwd {fb:.3f} ms fwd {f:.3f} ms", flush=True)


def recurrence(q, k, v, g, beta=None):
    """float32, one token at a time, S = K x V state: S = e^g S, then the delta rule
    S += k beta (v - S^T k)^T (or, with no beta, S += k v^T), then o = S^T q / sqrt(K)."""
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    out = []
    for t in range(q.shape[1]):
        S = S * g[:, t, :, None, None].exp()
        u = v[:, t]
        if beta is not None:
            u = beta[:, t, :, None] * (u - torch.einsum('bhk,bhkv->bhv', k[:, t], S))
        S = S + k[:, t, :, :, None] * u[:, :, None, :]
        out.append(torch.einsum('bhk,bhkv->bhv', q[:, t], S) * q.shape[-1] ** -0.5)
    return torch.stack(out, 1)


def rel_errors(fla, reference, inputs, dtype):
    """max|a - b| / max|b| of the output and of each input gradient. The reference gets every input in
    float32; FLA gets them in dtype except the log-decay g (input 3), which FLA's layers keep float32."""
    ref_in = [x.clone().requires_grad_(True) for x in inputs]
    fla_in = [(x.clone() if i == 3 else x.to(dtype)).requires_grad_(True) for i, x in enumerate(inputs)]
    do = randn(*inputs[2].shape, dtype=dtype)
    out, ref = fla(*fla_in), reference(*ref_in)
    grads = zip(torch.autograd.grad(out, fla_in, do), torch.autograd.grad(ref, ref_in, do.float()))
    pairs = [(out, ref), *grads]
    return [((a.float() - b).abs().max() / b.abs().max()).item() for a, b in pairs]


def gradcheck(anchors):
    """FLA's gated backward (bf16) against the float32 recurrence at B=1, T=128, H=2, K=V=32 and K=V=64
    (issue #640 reports the Hopper miscompile at a 64-wide key block, so a 32-wide check alone could miss
    it; its reporter found it independent of the autotune config, so one config per kernel is compiled)."""
    MAX_CONFIGS[0] = 1
    gdn = load(anchors, HEAD, 'fla.ops.gated_delta_rule.chunk').chunk_gated_delta_rule
    gla = load(anchors, HEAD, 'fla.ops.simple_gla.chunk').chunk_simple_gla
    dtype = torch.bfloat16
    for K, V in ((32, 32), (64, 64)):
        torch.manual_seed(0)
        # inputs rounded to bf16 first, so both sides see the same values
        q, k, v = (randn(1, 128, 2, d).float() for d in (K, K, V))
        g = F.logsigmoid(randn(1, 128, 2, dtype=torch.float))
        beta = torch.sigmoid(randn(1, 128, 2)).float()
        cases = [
            ('gated_delta_rule', 'o dq dk dv dg dbeta', [q, k, v, g, beta],
             lambda q, k, v, g, b: gdn(q, k, v, g, b, use_qk_l2norm_in_kernel=True)[0],
             lambda q, k, v, g, b: recurrence(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v, g, b)),
            ('simple_gla', 'o dq dk dv dg', [q, k, v, g],
             lambda q, k, v, g: gla(q, k, v, g=g)[0], recurrence),
        ]
        for name, labels, inputs, fla, reference in cases:
            what = f"gradcheck {name} K={K} V={V} bf16"
            try:
                errs = rel_errors(fla, reference, inputs, dtype)
                print(f"{what} max rel err " + ' '.join(f"{n} {e:.1e}" for n, e in zip(labels.split(), errs)),
                      flush=True)
            except Exception as e:
                print(f"{what} FAILED: {first_line(e)}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--anchors', type=Path, default=Path(__file__).resolve().parent.parent / '.anchors')
    p.add_argument('--only', default=','.join(DEFAULT), help='comma list of: gradcheck,' + ','.join(ANCHORS))
    p.add_argument('--T', default='1024,2048,4096,8192,16384')
    p.add_argument('--max-configs', type=int, default=4)
    args = p.parse_args()
    Ts = [int(t) for t in args.T.split(',')]
    only = args.only.split(',')
    MAX_CONFIGS[0] = args.max_configs
    cap_autotune()

    read = lambda f: (args.anchors / f).read_text().splitlines()[0] if (args.anchors / f).exists() else '?'
    cap = f"capped at {args.max_configs} configs" if args.max_configs > 0 else "full"
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}; "
          f"FLA {read('FLA_COMMIT')[:12]}; NHA {read('NHA_COMMITS')}; autotune {cap}", flush=True)
    start = time.time()
    for name, (tree, module, case) in ANCHORS.items():
        if name not in only:
            continue
        began = time.time()
        try:
            ops = load(args.anchors, tree, module)
        except Exception as e:  # ImportError above all: the device's site-packages are not ours
            print(f"{name}: not run ({first_line(e)})", flush=True)
            continue
        for T in Ts:
            try:
                time_anchor(name, ops, case, T)
            except Exception as e:
                print(f"anchor {name} T={T} FAILED: {first_line(e)}", flush=True)
            torch.cuda.empty_cache()
        print(f"{name}: {time.time() - began:.0f} s with compiling and autotuning", flush=True)
    if 'gradcheck' in only:
        began = time.time()
        try:
            gradcheck(args.anchors)
        except Exception as e:
            print(f"gradcheck FAILED: {first_line(e)}")
        print(f"gradcheck: {time.time() - began:.0f} s", flush=True)
    print(f"total {time.time() - start:.0f} s")


if __name__ == '__main__':
    main()
