#!/usr/bin/env python3
"""torch_optim_groups.py - torch.optim's Adam/AdamW with nanoGPT's two
parameter groups, for tests/test_optim.c.

    torch_optim_groups.py LR WD STEPS SHAPES IN.f32 OUT.f32
        SHAPES "3x2,3,3,2x3,2": the tensors, in order, of a flat parameter
        buffer. IN.f32: the buffer (float32, little-endian), then STEPS
        buffers of gradients. Runs STEPS steps (betas 0.9, 0.999, eps 1e-8)
        of AdamW and of Adam, each with weight decay on the tensors of 2+
        dimensions only (nanoGPT's configure_optimizers groups) and on all
        (one group), and writes the four parameter buffers after them to
        OUT.f32 in that order: adamw weights, adamw all, adam weights, adam
        all. (One process for all four: importing torch takes seconds.)

Exit 77 when torch cannot be imported (the caller prints SKIP).
"""
import struct
import sys

try:
    import torch
except ImportError as exc:
    print("torch_optim_groups: cannot import torch: %s" % exc)
    sys.exit(77)


def run(kind, mode, lr, wd, steps, shapes, flat, n):
    params, at = [], 0
    for s in shapes:
        k = torch.Size(s).numel()
        params.append(flat[at:at + k].clone().reshape(s).requires_grad_(True))
        at += k
    if mode == "weights":
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": wd}]
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    opt = cls(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    for t in range(steps):
        at = n * (t + 1)
        for p in params:
            k = p.numel()
            p.grad = flat[at:at + k].clone().reshape(p.shape)
            at += k
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in params])


def main():
    lr, wd, steps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    shapes = [[int(d) for d in s.split("x")] for s in sys.argv[4].split(",")]
    with open(sys.argv[5], "rb") as f:
        raw = f.read()
    flat = torch.tensor(struct.unpack("<%df" % (len(raw) // 4), raw), dtype=torch.float32)
    n = sum(torch.Size(s).numel() for s in shapes)
    if flat.numel() != n * (steps + 1):
        sys.exit("torch_optim_groups: %d floats, want %d" % (flat.numel(), n * (steps + 1)))
    out = torch.cat([run(kind, mode, lr, wd, steps, shapes, flat, n)
                     for kind in ("adamw", "adam") for mode in ("weights", "all")])
    with open(sys.argv[6], "wb") as f:
        f.write(struct.pack("<%df" % out.numel(), *out.tolist()))


if __name__ == "__main__":
    main()
