#!/usr/bin/env python3
"""safetensors_load.py - checks a ddpc safetensors export the way a PyTorch
user would load it. Run by tests/test_ckpt.c; no network, no installs.

    safetensors_load.py MODEL.safetensors EXPECTED.f32 784,256,10

EXPECTED.f32 holds the flat float32 parameters ddpc exported (model.h's
order: W0 [out, in], b0, W1, b1, ...).

Always (stdlib only): the 8-byte length, the JSON header, dtypes, shapes,
contiguous data_offsets, and the raw data against EXPECTED.
When safetensors and torch import: safetensors.torch.load_file, then
load_state_dict(strict=True) into a module whose `layers` is an
nn.ModuleList of nn.Linear, and the weights compared exactly. Otherwise it
prints "SKIP safetensors load: python package not installed" and passes.
Exit status 0 when every check that ran passed.
"""
import json
import struct
import sys


def main():
    path, expected_path, layers_csv = sys.argv[1:4]
    sizes = [int(x) for x in layers_csv.split(",")]
    with open(path, "rb") as f:
        blob = f.read()
    with open(expected_path, "rb") as f:
        expected = f.read()

    (hlen,) = struct.unpack("<Q", blob[:8])
    assert hlen % 8 == 0, f"header length {hlen} is not a multiple of 8"
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = blob[8 + hlen:]
    assert data == expected, "data section differs from the exported parameters"

    meta = header.pop("__metadata__")
    assert meta["format"] == "pt", meta
    assert all(isinstance(v, str) for v in meta.values()), meta

    off = 0
    names = []
    for l in range(len(sizes) - 1):
        fan_in, fan_out = sizes[l], sizes[l + 1]
        for kind, shape in (("weight", [fan_out, fan_in]), ("bias", [fan_out])):
            name = f"layers.{l}.{kind}"
            t = header[name]
            n = 4
            for d in shape:
                n *= d
            assert t["dtype"] == "F32", (name, t)
            assert t["shape"] == shape, (name, t["shape"], shape)
            assert t["data_offsets"] == [off, off + n], (name, t["data_offsets"], off)
            off += n
            names.append(name)
    assert sorted(header) == sorted(names), (sorted(header), names)
    assert off == len(data), (off, len(data))
    print(f"ckpt: safetensors header OK as JSON: {len(names)} tensors, {off} bytes")

    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("SKIP safetensors load: python package not installed")
        return 0

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.Linear(sizes[l], sizes[l + 1]) for l in range(len(sizes) - 1))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i + 1 < len(self.layers):
                    x = torch.relu(x)
            return x

    state = load_file(path)
    net = Net()
    net.load_state_dict(state, strict=True)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    want = torch.frombuffer(bytearray(expected), dtype=torch.float32)
    assert flat.dtype == torch.float32
    assert torch.equal(flat, want), "loaded parameters differ"
    # One forward pass, so the layout is usable, not just loadable:
    # Linear computes x @ W.T + b with W [out, in].
    x = torch.ones(2, sizes[0])
    y = net(x)
    assert tuple(y.shape) == (2, sizes[-1]), y.shape
    w0 = state["layers.0.weight"]
    b0 = state["layers.0.bias"]
    assert torch.allclose(net.layers[0](x), x @ w0.T + b0)
    print(f"ckpt: safetensors.torch.load_file + load_state_dict(strict=True) OK "
          f"(torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
