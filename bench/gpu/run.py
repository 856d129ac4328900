#!/usr/bin/env python3
"""bench/gpu/run.py - ddpc vs PyTorch on one GPU: step time, throughput, ratio.

    sh bench/gpu/run.sh                    (on the GPU machine: tests/gpu/README.md)
    python3 bench/gpu/run.py --device cpu  (here: a smoke test of this script; not
                                            a GPU result, and it says so)

For each workload and precision: the same model, batch, optimizer and
precision in ddpc (a job built from bench/gpu/specs/<model>.yaml by
build/bin/ddpc, synthetic data, 1 device) and in PyTorch 2.x eager (random
batches copied from pinned host memory each step, as a DataLoader with
pin_memory does; fp32 with TF32 off, as ddpc's default; bf16 through
autocast over fp32 master weights, as ddpc's bf16). Workloads:
  mlp   784-256-10 ReLU, Adam, batch 64 (framework overhead dominates)
  cnn   2 conv + 2 linear on [1, 28, 28], Adam, batch 128 (needs a ddpc whose
        spec accepts model.type sequential; SKIP with ddpc's message otherwise)
  gpt   GPT-2 124M (12 x 768, 1024 tokens), AdamW, batch 8, bf16: PyTorch
        always; ddpc only if its spec accepts bench/gpu/specs/gpt.yaml
Prints one line per run and a table for bench/README.md: step ms, samples
(or tokens) per second, ddpc / PyTorch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))

WORK = {   # model: (batch, samples for ddpc, epochs, precisions)
    "mlp": (64, 60000, 3, ("fp32", "bf16")),
    "cnn": (128, 60000, 2, ("fp32", "bf16")),
    "gpt": (8, 0, 0, ("bf16",)),
}


def ddpc_run(ddpc, model, prec, batch, samples, epochs, device, tmp):
    """Builds and runs the job; returns (step_ms, samples_per_s, note) or
    (None, None, why) when this ddpc cannot run it."""
    spec = os.path.join(HERE, "specs", model + ".yaml")
    text = open(spec).read()
    text = (text.replace("@PRECISION@", prec).replace("@BATCH@", str(batch))
            .replace("@SAMPLES@", str(samples)).replace("@EPOCHS@", str(epochs))
            .replace("@ACCEL@", "gpu" if device == "cuda" else "cpu"))
    path = os.path.join(tmp, f"{model}-{prec}.yaml")
    with open(path, "w") as f:
        f.write(text)
    chk = subprocess.run([ddpc, "check", path], capture_output=True, text=True)
    if chk.returncode != 0:
        lines = (chk.stderr + chk.stdout).strip().splitlines()
        errs = [l.strip() for l in lines if "error" in l] or lines
        return None, None, "this ddpc does not accept %s: %s" % (
            os.path.relpath(spec, TOP), errs[0] if errs else "exit %d" % chk.returncode)
    job = os.path.join(tmp, f"job-{model}-{prec}")
    b = subprocess.run([ddpc, "build", path, "-o", job], capture_output=True, text=True)
    if b.returncode != 0:
        raise SystemExit("ddpc build %s failed:\n%s%s" % (path, b.stdout, b.stderr))
    env = dict(os.environ, DDPC_PROFILE="1")
    r = subprocess.run([job], capture_output=True, text=True, cwd=tmp, env=env)
    if r.returncode != 0:
        raise SystemExit("%s failed (exit %d):\n%s%s" % (job, r.returncode, r.stdout, r.stderr))
    done = [l for l in r.stdout.splitlines() if l.startswith("done ")]
    prof = [l for l in r.stdout.splitlines() if "profile:" in l]
    m = re.search(r"samples_per_s=([0-9.]+)", done[-1] if done else "")
    if not m:
        raise SystemExit("%s printed no samples_per_s:\n%s" % (job, r.stdout))
    sps = float(m.group(1))
    return 1000.0 * batch / sps, sps, prof[-1].strip() if prof else ""


def torch_model(model, torch, nn):
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if model == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    raise ValueError(model)


def gpt2(torch, nn, F):
    """GPT-2 124M as nanoGPT writes it (tied embeddings, pre-norm, GELU tanh)."""
    V, T, L, H, C = 50304, 1024, 12, 12, 768   # vocab padded to 64, as nanoGPT

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
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
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

    return GPT(), V, T


def torch_run(model, prec, batch, device, steps, warmup):
    """Returns (step_ms, samples_or_tokens_per_s)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # ddpc's default: highest
        torch.backends.cudnn.allow_tf32 = False
    if model == "gpt":
        m, V, T = gpt2(torch, nn, F)
        m = m.to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=6e-4, weight_decay=0.1)
        pin = device == "cuda"
        xs = [torch.randint(0, V, (batch, T + 1)) for _ in range(2)]
        per_step = batch * T
    else:
        m = torch_model(model, torch, nn).to(device)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        shape = (batch, 784) if model == "mlp" else (batch, 1, 28, 28)
        pin = device == "cuda"
        xs = [(torch.randn(shape), torch.randint(0, 10, (batch,))) for _ in range(2)]
        per_step = batch
    amp = prec == "bf16"
    if pin:   # as a DataLoader with pin_memory=True hands them over
        xs = [tuple(a.pin_memory() for a in x) if isinstance(x, tuple) else x.pin_memory()
              for x in xs]

    def step(i):
        if model == "gpt":
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
    ap.add_argument("--models", default="mlp,cnn,gpt")
    ap.add_argument("--quick", action="store_true", help="fewer steps (smoke test)")
    args = ap.parse_args()
    build = os.environ.get("DDPC_BUILD", os.path.join(TOP, "build"))
    ddpc = os.path.join(build, "bin", "ddpc")
    if not os.access(ddpc, os.X_OK):
        raise SystemExit("bench/gpu: %s is not built (make all)" % ddpc)
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
            batch, samples, epochs, precs = WORK[model]
            if args.quick:
                samples, epochs = min(samples, 4096), min(epochs, 1)
            unit = "tokens/s" if model == "gpt" else "samples/s"
            for prec in precs:
                if args.device == "cpu" and prec != "fp32":
                    continue                 # PyTorch's CPU bf16 is not what ddpc does
                if model == "gpt" and args.device == "cpu":
                    continue
                steps = 10 if model == "gpt" else (20 if args.quick else 300)
                warm = 3 if model == "gpt" else 20
                tms, tps = torch_run(model, prec, batch, args.device, steps, warm)
                print("torch %s %s batch %d: %.3f ms/step, %.0f %s" % (
                    model, prec, batch, tms, tps, unit), flush=True)
                if model == "gpt" and not samples:
                    dms, dps, note = ddpc_run(ddpc, model, prec, batch, 0, 0, args.device, tmp) \
                        if os.path.exists(os.path.join(HERE, "specs", "gpt.yaml")) else \
                        (None, None, "no bench/gpu/specs/gpt.yaml")
                else:
                    dms, dps, note = ddpc_run(ddpc, model, prec, batch, samples, epochs,
                                              args.device, tmp)
                if dms is None:
                    print("SKIP ddpc %s %s: %s" % (model, prec, note), flush=True)
                else:
                    print("ddpc  %s %s batch %d: %.3f ms/step, %.0f %s  (%s)" % (
                        model, prec, batch, dms, dps, unit, note), flush=True)
                rows.append((model, prec, batch, dms, dps, tms, tps, unit))
    print()
    print("| model | precision | batch | ddpc ms/step | ddpc rate | PyTorch ms/step | "
          "PyTorch rate | ddpc / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for model, prec, batch, dms, dps, tms, tps, unit in rows:
        d = "%.3f" % dms if dms else "-"
        r = "%.0f %s" % (dps, unit) if dps else "-"
        x = "%.2fx" % (dps / tps) if dps else "-"
        print("| %s | %s | %d | %s | %s | %.3f | %.0f %s | %s |" % (
            model, prec, batch, d, r, tms, tps, unit, x))
    print("\n(%s)" % where)


if __name__ == "__main__":
    sys.exit(main())
