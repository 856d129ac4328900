#!/usr/bin/env python3
"""export_accuracy.py - evaluates a ddpc safetensors export in PyTorch on an
IDX test set, the way a user would after training. Run by tests/test_faults.c
with /usr/bin/python3 (Debian's python3-torch).

    export_accuracy.py MODEL.safetensors IMAGES.idx LABELS.idx 16,32,3

Inputs are uint8 IDX scaled by 1/255 (as ddpc reads them); the model is an
nn.ModuleList `layers` of nn.Linear with ReLU between them (the export's
documented layout, safetensors_load.make_net), loaded with strict=True.
Prints "accuracy=A loss=L" (cross-entropy, mean). Exit 77 when torch cannot
be imported (the caller SKIPs).
"""
import struct
import sys

try:
    import torch
except ImportError as exc:
    print("export_accuracy: cannot import torch: %s" % exc)
    sys.exit(77)

from safetensors_load import load_state, make_net


def read_idx(path):
    with open(path, "rb") as f:
        blob = f.read()
    magic, = struct.unpack(">I", blob[:4])
    ndim = magic & 0xFF
    assert magic >> 8 == 0x08, "only uint8 IDX here"
    dims = struct.unpack(">" + "I" * ndim, blob[4:4 + 4 * ndim])
    data = torch.frombuffer(bytearray(blob[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def main():
    model, images, labels, layers = sys.argv[1:5]
    sizes = [int(s) for s in layers.split(",")]
    net = make_net(torch)(sizes)
    state, _ = load_state(model, torch)
    net.load_state_dict(state, strict=True)
    x = read_idx(images).reshape(-1, sizes[0]).to(torch.float32) / 255.0
    y = read_idx(labels).to(torch.int64)
    with torch.no_grad():
        logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(dim=1) == y).to(torch.float64).mean().item()
    print("accuracy=%.6f loss=%.6f n=%d" % (acc, loss, len(y)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
