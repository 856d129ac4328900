#!/usr/bin/python3
"""torch_ddp.py - the PyTorch reference for ddpc's throughput goals.

Same workload as examples/fashion-mnist.yaml: MLP 784-256-10, ReLU,
cross-entropy, Adam lr 1e-3, batch 64 per rank, DistributedSampler, one BLAS
thread per rank unless --threads says otherwise, 3 epochs, evaluation on the
10,000 test images after each epoch.

    /usr/bin/python3 bench/torch_ddp.py --world 2            # DDP, gloo, 2 processes
    /usr/bin/python3 bench/torch_ddp.py --world 1            # 1 process
    /usr/bin/python3 bench/torch_ddp.py --world 1 --threads 2

    /usr/bin/python3 bench/torch_ddp.py --model gpt --text FILE --world 2 --limit 200
        issue 15's GPT: tests/nanogpt.py's GPT (vocab 256, block 128, 4 layers,
        4 heads, 128 wide, dropout 0, GPT-2's tanh GELU as ddpc computes it),
        bytes of FILE as tokens: [0, 0.95) trains in non-overlapping windows
        of 129 (DistributedSampler over window indices), [0.95, 1] tests
        (windows at stride 128, every target once: ddpc's test_loss); AdamW
        lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on 2-D weights only
        (nanoGPT's configure_optimizers), batch 16 per rank, one thread per
        rank, one epoch of at most --limit steps. Reports tokens_per_s.
        --no-shuffle: windows in order (rank r takes r, r + W, ...: ddpc's
        order with data.shuffle false).
    /usr/bin/python3 bench/torch_ddp.py --model gpt --write-init FILE
        writes the GPT's initial weights (torch.manual_seed(--seed), nanoGPT's
        init: the state a run above starts from) as safetensors with
        nanoGPT's names, for ddpc's model.init_from, and exits.

Prints one line per epoch and a summary line in ddpc's key=value form:
  done world=2 samples_per_s=… first_step_s=… test_accuracy=… allreduce_ms_median=…
  (gpt: done world=2 tokens_per_s=… first_step_s=… test_loss=…)
first_step_s counts from DDPC_BENCH_T0 (set by bench/measure.py before the
interpreter starts) or from the script's first line.
"""
import argparse
import gzip
import os
import statistics
import sys
import time

T_START = float(os.environ.get("DDPC_BENCH_T0", time.time()))

D = "/usr/share/datasets/fashion-mnist"


def load_idx(images, labels):
    import numpy as np
    with gzip.open(images) as f:
        x = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(labels) as f:
        y = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return x, y


def gpt_model(nanogpt, T):
    """nanoGPT's GPT of the issue, GELU in GPT-2's tanh form (as ddpc)."""
    import contextlib
    import io
    import torch
    cfg = nanogpt.GPTConfig(block_size=T, vocab_size=256, n_layer=4, n_head=4, n_embd=128,
                            dropout=0.0, bias=True)
    with contextlib.redirect_stdout(io.StringIO()):   # nanoGPT prints its size
        model = nanogpt.GPT(cfg)
    for block in model.transformer.h:
        block.mlp.gelu = torch.nn.GELU(approximate="tanh")
    return model


def write_init(args):
    """--write-init: the initial weights as safetensors (nanoGPT's names,
    lm_head.weight included, the attn.bias masks left out)."""
    import json
    import struct
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import nanogpt
    torch.manual_seed(args.seed)
    model = gpt_model(nanogpt, 128)
    header, blobs, off = {}, [], 0
    for k, v in model.state_dict().items():
        if k.endswith(".attn.bias"):
            continue
        b = v.detach().float().contiguous().numpy().tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(args.write_init, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def gpt_worker(rank, world, args, port):
    """The GPT run (see the file comment)."""
    import contextlib
    import io
    import math
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import nanogpt
    torch.set_num_threads(args.threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    T = 128
    with open(args.text, "rb") as f:
        d = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(torch.int64)
    n = d.numel()
    cut = math.floor(0.95 * n)            # ddpc's range [lo, hi]: floor(lo n) .. floor(hi n)
    tr, te = d[:cut], d[cut:]
    nw = tr.numel() // (T + 1)
    windows = tr[:nw * (T + 1)].view(nw, T + 1)
    ds = torch.utils.data.TensorDataset(windows)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=not args.no_shuffle, seed=args.seed)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, sampler=sampler)
    model = gpt_model(nanogpt, T)
    with contextlib.redirect_stdout(io.StringIO()):
        opt = model.configure_optimizers(0.1, args.lr, (0.9, 0.95), "cpu")
    raw = model
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    rates, first_step, steps = [], None, 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        ntok = 0
        for bi, (w,) in enumerate(loader):
            if args.limit and bi >= args.limit:
                break
            x, y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            ntok += x.numel()
            steps += 1
            if first_step is None:
                first_step = time.time() - T_START
        dt = time.perf_counter() - t0
        rates.append(ntok * world / dt)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} tokens_per_s={rates[-1]:.0f} "
                  f"epoch_s={dt:.2f}", flush=True)
    test_loss = float("nan")
    if rank == 0:
        raw.eval()
        m = (te.numel() - 1) // T
        total = 0.0
        with torch.no_grad():
            for s in range(0, m, 64):
                idx = range(s, min(m, s + 64))
                x = torch.stack([te[i * T:i * T + T] for i in idx])
                y = torch.stack([te[i * T + 1:i * T + T + 1] for i in idx])
                logits, _ = raw(x, y)
                total += F.cross_entropy(logits.view(-1, 256), y.reshape(-1),
                                         reduction="sum").double().item()
        test_loss = total / (m * T)
        print(f"done world={world} threads={args.threads} steps={steps} "
              f"tokens_per_s={statistics.median(rates):.0f} first_step_s={first_step:.3f} "
              f"test_loss={test_loss:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def worker(rank, world, args, port):
    if args.model == "gpt":
        return gpt_worker(rank, world, args, port)
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import numpy as np
    torch.set_num_threads(args.threads)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    xtr, ytr = load_idx(f"{D}/train-images-idx3-ubyte.gz", f"{D}/train-labels-idx1-ubyte.gz")
    xte, yte = load_idx(f"{D}/t10k-images-idx3-ubyte.gz", f"{D}/t10k-labels-idx1-ubyte.gz")
    xtr = torch.from_numpy(xtr.astype(np.float32) / 255.0)
    ytr = torch.from_numpy(ytr.astype(np.int64))
    xte = torch.from_numpy(xte.astype(np.float32) / 255.0)
    yte = torch.from_numpy(yte.astype(np.int64))
    ds = torch.utils.data.TensorDataset(xtr, ytr)
    sampler = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, sampler=sampler)
    if args.model == "cnn":   # the CNN without batch norm and dropout
        xtr = xtr.reshape(-1, 1, 28, 28)
        xte = xte.reshape(-1, 1, 28, 28)
        ds = torch.utils.data.TensorDataset(xtr, ytr)
        sampler = torch.utils.data.distributed.DistributedSampler(
            ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch, sampler=sampler)
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    rates, first_step, acc = [], None, 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        n = 0
        for bi, (xb, yb) in enumerate(loader):
            if args.limit and bi >= args.limit:
                break
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xb), yb)
            loss.backward()
            opt.step()
            n += xb.shape[0]
            if first_step is None:
                first_step = time.time() - T_START
        dt = time.perf_counter() - t0
        rates.append(n * world / dt)
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} samples_per_s={rates[-1]:.0f} "
                  f"test_accuracy={acc:.4f} epoch_s={dt:.2f}", flush=True)
    if rank == 0:
        print(f"done world={world} threads={args.threads} samples_per_s={statistics.median(rates):.0f} "
              f"first_step_s={first_step:.3f} test_accuracy={acc:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--model", choices=["mlp", "cnn", "gpt"], default="mlp")
    ap.add_argument("--text", help="gpt: the text file (bytes are tokens)")
    ap.add_argument("--lr", type=float, default=1e-3, help="gpt: AdamW's learning rate")
    ap.add_argument("--no-shuffle", action="store_true", help="gpt: windows in order")
    ap.add_argument("--write-init", help="gpt: write the initial weights here and exit")
    ap.add_argument("--limit", type=int, default=0, help="batches per epoch per rank (0: all)")
    args = ap.parse_args()
    if args.model == "gpt" and args.write_init:
        write_init(args)
        return
    if args.model == "gpt":
        if not args.text:
            ap.error("--model gpt needs --text FILE")
        if "--batch" not in sys.argv:
            args.batch = 16
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_ddp.py: PyTorch is not installed (apt-get install python3-torch); "
              "skipping the PyTorch reference", file=sys.stderr)
        sys.exit(77)
    if args.world == 1:
        worker(0, 1, args, args.port)
        return
    import torch.multiprocessing as mp
    mp.start_processes(worker, args=(args.world, args, args.port), nprocs=args.world,
                       start_method="fork")


if __name__ == "__main__":
    main()
