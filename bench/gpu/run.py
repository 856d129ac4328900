#!/usr/bin/env python3
"""bench/gpu/run.py - ddpc vs PyTorch on one GPU: step time, throughput, ratio.

    sh bench/gpu/run.sh                    (on the GPU machine: tests/gpu/README.md)
    /usr/bin/python3 bench/gpu/run.py --device cpu --quick
                                           (here: a smoke test of this script; not a
                                            GPU result, and it says so)

For each workload and precision: the same model, batch, optimizer and
precision in ddpc (a job built from bench/gpu/specs/<model>.yaml by
build/bin/ddpc, 1 device) and in PyTorch 2.x eager (batches copied from
pinned host memory each step, as a DataLoader with pin_memory does; fp32
with TF32 off, as ddpc's default matmul_precision: highest; bf16 through
autocast over fp32 master weights, as ddpc's bf16). Workloads:
  mlp   the example's MLP 784-256-10 ReLU, Adam, batch 64 (framework overhead
        dominates; the goal is ddpc >= 5x PyTorch)
  cnn   issue 14's CNN (examples/fashion-mnist-cnn.yaml without batchnorm2d
        and dropout), Adam, batch 64
  gpt   issue 15's GPT (vocab 256, block 128, 4 layers x 4 heads x 128),
        AdamW, batch 16
  gpt2  GPT-2 124M (vocab 50304, block 1024, 12 x 12 x 768), AdamW, batch 8,
        bf16, a few steps (the goal: ddpc at least as fast per step)
The GPTs' bf16 runs are repeated with DDPC_FUSED_ATTN=0, ddpc's attention
unfused, to show what the fused kernels gain.
ddpc's step time is the difference of two runs of N1 and N2 steps divided by
N2 - N1, so start-up (context, cuBLAS, the first step) is not in it; PyTorch's
is N2 - N1 steps timed after warm-up steps. Data: synthetic samples (mlp,
cnn), a random llm.c token shard this script writes (gpt, gpt2).
Prints one line per run and a table for bench/README.md.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

# model: batch, (N1, N2) steps, precisions, GPT shape (V, T, layers, heads, C) or None
WORK = {
    "mlp": (64, (100, 600), ("fp32", "bf16"), None),
    "cnn": (64, (50, 300), ("fp32", "bf16"), None),
    "gpt": (16, (50, 300), ("fp32", "bf16"), (256, 128, 4, 4, 128)),
    "gpt2": (8, (5, 25), ("bf16",), (50304, 1024, 12, 12, 768)),
}
QUICK = {"mlp": (10, 40), "cnn": (5, 20), "gpt": (5, 20), "gpt2": (2, 5)}


def write_shard(path, n_tokens, vocab, seed):
    """An llm.c token shard (header: magic 20240520, version 1, count) of
    uniform random tokens below vocab."""
    import random
    rng = random.Random(seed)
    header = struct.pack("<256i", 20240520, 1, n_tokens, *([0] * 253))
    with open(path, "wb") as f:
        f.write(header)
        f.write(struct.pack("<%dH" % n_tokens, *(rng.randrange(vocab) for _ in range(n_tokens))))


def ddpc_once(ddpc, model, prec, batch, steps, device, tmp, env_extra=None):
    """Builds and runs the job for `steps` optimizer steps (env_extra: more
    environment for the job); returns the seconds of training it reports
    (steps x per-step items / its rate) and its profile line, or raises
    SystemExit with what went wrong."""
    spec = os.path.join(HERE, "specs", model + ".yaml")
    text = open(spec).read()
    shape = WORK[model][3]
    data = ""
    if shape:
        V, T = shape[0], shape[1]
        data = os.path.join(tmp, "%s-tokens.bin" % model)
        if not os.path.exists(data):
            write_shard(data, (T + 1) * batch * (steps + 2), V, 7)
        n = os.path.getsize(data)
        if (n - 1024) // 2 < (T + 1) * batch * steps:
            write_shard(data, (T + 1) * batch * (steps + 2), V, 7)
    samples = batch * steps
    text = (text.replace("@PRECISION@", prec).replace("@BATCH@", str(batch))
            .replace("@SAMPLES@", str(samples)).replace("@STEPS@", str(steps))
            .replace("@DATA@", data).replace("@ACCEL@", "gpu" if device == "cuda" else "cpu"))
    path = os.path.join(tmp, "%s-%s-%d.yaml" % (model, prec, steps))
    with open(path, "w") as f:
        f.write(text)
    job = os.path.join(tmp, "job-%s-%s-%d" % (model, prec, steps))
    b = subprocess.run([ddpc, "build", path, "-o", job], capture_output=True, text=True)
    if b.returncode != 0:
        raise SystemExit("ddpc build %s failed:\n%s%s" % (path, b.stdout, b.stderr))
    env = dict(os.environ, DDPC_PROFILE="1", **(env_extra or {}))
    r = subprocess.run([job], capture_output=True, text=True, cwd=tmp, env=env)
    if r.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s%s" % (job, r.returncode, r.stdout, r.stderr))
    done = [l for l in r.stdout.splitlines() if l.startswith("done ")]
    prof = [l.strip() for l in r.stdout.splitlines() if "profile:" in l]
    m = re.search(r"(samples|tokens)_per_s=([0-9.]+)", done[-1] if done else "")
    st = re.search(r"steps=([0-9]+)", done[-1] if done else "")
    if not m or not st:
        raise SystemExit("%s printed no steps or rate:\n%s" % (job, r.stdout))
    ran = int(st.group(1))
    if ran != steps:
        raise SystemExit("%s ran %d steps, not %d:\n%s" % (job, ran, steps, r.stdout))
    per_step = batch * (shape[1] if shape else 1)
    return ran * per_step / float(m.group(2)), prof[-1] if prof else ""


def ddpc_run(ddpc, model, prec, batch, n1, n2, device, tmp, env_extra=None):
    """(step_ms, items_per_s, profile) from runs of n1 and n2 steps."""
    t1, _ = ddpc_once(ddpc, model, prec, batch, n1, device, tmp, env_extra)
    t2, prof = ddpc_once(ddpc, model, prec, batch, n2, device, tmp, env_extra)
    shape = WORK[model][3]
    per_step = batch * (shape[1] if shape else 1)
    dt = (t2 - t1) / (n2 - n1)
    if dt <= 0:
        raise SystemExit("ddpc %s %s: %d steps took %.3f s, %d took %.3f s: no steady state "
                         "to measure; raise the step counts" % (model, prec, n1, t1, n2, t2))
    return 1000.0 * dt, per_step / dt, prof


def gpt_model(torch, nn, F, V, T, L, H, C):
    """nanoGPT's GPT (tied embeddings, pre-norm, GELU tanh, biases, no dropout)."""
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def attend(q, k, v):
        if sdpa is not None:                  # PyTorch 2.x: flash attention
            return sdpa(q, k, v, is_causal=True)
        T_ = q.shape[2]                       # PyTorch 1.x (the CPU smoke test)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (q.shape[-1] ** 0.5))
        mask = torch.ones(T_, T_, dtype=torch.bool, device=q.device).tril()
        return att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T_, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T_, H, C // H).transpose(1, 2) for t in (q, k, v))
            y = attend(q, k, v)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T_, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)
            self.head = nn.Linear(C, V, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.blocks:
                x = b(x)
            return self.head(self.lnf(x))

    return GPT()


def torch_run(model, prec, batch, device, steps, warmup):
    """(step_ms, items_per_s)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # ddpc's default: highest
        torch.backends.cudnn.allow_tf32 = False
    shape = WORK[model][3]
    pin = device == "cuda"
    if shape:
        V, T = shape[0], shape[1]
        m = gpt_model(torch, nn, F, *shape).to(device)
        lr = 6e-4 if model == "gpt2" else 1e-3
        opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
        xs = [torch.randint(0, V, (batch, T + 1)) for _ in range(2)]
        per_step = batch * T
    else:
        if model == "mlp":
            m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        else:
            m = nn.Sequential(
                nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        m = m.to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        size = (batch, 784) if model == "mlp" else (batch, 1, 28, 28)
        xs = [(torch.randn(size), torch.randint(0, 10, (batch,))) for _ in range(2)]
        per_step = batch
    amp = prec == "bf16"
    if pin:   # as a DataLoader with pin_memory=True hands them over
        xs = [tuple(a.pin_memory() for a in x) if isinstance(x, tuple) else x.pin_memory()
              for x in xs]

    def step(i):
        if shape:
            t = xs[i % 2].to(device, non_blocking=True)
            x, y = t[:, :-1], t[:, 1:]
        else:
            x, y = (a.to(device, non_blocking=True) for a in xs[i % 2])
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            out = m(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(warmup):
        step(i)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    if device == "cuda":
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    return 1000.0 * dt, per_step / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--models", default="mlp,cnn,gpt,gpt2")
    ap.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    args = ap.parse_args()
    build = os.environ.get("DDPC_BUILD", os.path.join(TOP, "build"))
    ddpc = os.path.join(build, "bin", "ddpc")
    if not os.access(ddpc, os.X_OK):
        raise SystemExit("bench/gpu: %s is not built (make all)" % ddpc)
    for model in args.models.split(","):
        if model not in WORK:
            raise SystemExit("bench/gpu: unknown model %r (one of %s)" % (model, ", ".join(WORK)))
    import torch
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench/gpu: PyTorch sees no GPU (torch %s)" % torch.__version__)
        where = "%s, torch %s, CUDA %s" % (torch.cuda.get_device_name(0), torch.__version__,
                                           torch.version.cuda)
    else:
        where = "CPU SMOKE TEST (torch %s): not a GPU result" % torch.__version__
    print("bench/gpu: %s" % where, flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddpc-bench-gpu-") as tmp:
        for model in args.models.split(","):
            batch, (n1, n2), precs, shape = WORK[model]
            if args.quick:
                n1, n2 = QUICK[model]
            unit = "tokens/s" if shape else "samples/s"
            for prec in precs:
                if args.device == "cpu" and (prec != "fp32" or model == "gpt2"):
                    continue                 # PyTorch's CPU bf16 is not what ddpc does
                tms, tps = torch_run(model, prec, batch, args.device, n2 - n1,
                                     3 if model == "gpt2" else 20)
                print("torch %s %s batch %d: %.3f ms/step, %.0f %s" % (
                    model, prec, batch, tms, tps, unit), flush=True)
                dms, dps, prof = ddpc_run(ddpc, model, prec, batch, n1, n2, args.device, tmp)
                print("ddpc  %s %s batch %d: %.3f ms/step, %.0f %s  (%s)" % (
                    model, prec, batch, dms, dps, unit, prof), flush=True)
                rows.append((model, prec, batch, dms, dps, tms, tps, unit))
                if prec == "bf16" and shape and shape[4] // shape[3] in (32, 64):
                    # the same job with its attention unfused (env.h
                    # DDPC_FUSED_ATTN=0): what the fused kernels gain
                    dms, dps, prof = ddpc_run(ddpc, model, prec, batch, n1, n2, args.device,
                                              tmp, {"DDPC_FUSED_ATTN": "0"})
                    print("ddpc  %s %s unfused attention batch %d: %.3f ms/step, %.0f %s  (%s)"
                          % (model, prec, batch, dms, dps, unit, prof), flush=True)
                    rows.append((model, prec + ", attention unfused", batch, dms, dps, tms,
                                 tps, unit))
    print()
    print("| model | precision | batch | ddpc ms/step | ddpc rate | PyTorch ms/step | "
          "PyTorch rate | ddpc / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for model, prec, batch, dms, dps, tms, tps, unit in rows:
        print("| %s | %s | %d | %.3f | %.0f %s | %.3f | %.0f %s | %.2fx |" % (
            model, prec, batch, dms, dps, unit, tms, tps, unit, dps / tps))
    print("\n(%s)" % where)


if __name__ == "__main__":
    sys.exit(main())
