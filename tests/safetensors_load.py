#!/usr/bin/env python3
"""safetensors_load.py - checks a ddpc safetensors export the way a PyTorch
user would load it. Run by tests/test_ckpt.c; no network, no installs.

    safetensors_load.py MODEL.safetensors EXPECTED.f32 784,256,10

EXPECTED.f32 holds the flat float32 parameters ddpc exported (model.h's
order: W0 [out, in], b0, W1, b1, ...).

Always (stdlib only): the 8-byte length, the JSON header, dtypes, shapes,
contiguous data_offsets, and the raw data against EXPECTED.
When torch imports (Debian's python3-torch, /usr/bin/python3): the file
loaded (safetensors.torch.load_file where installed, else load_state below),
then load_state_dict(strict=True) into a module whose `layers` is an
nn.ModuleList of nn.Linear, and the weights compared exactly. Exit status
0 when every check passed, 77 when torch cannot be imported (the caller
SKIPs).
"""
import json
import struct
import sys


def load_state(path, torch):
    """The tensors of a safetensors file as a state dict, and how it was read:
    safetensors.torch.load_file where that package is installed (Debian has
    none), else this reader of the format (an 8-byte little-endian header
    length, a JSON header of dtype/shape/data_offsets, then the data)."""
    try:
        from safetensors.torch import load_file
        return load_file(path), "safetensors.torch.load_file"
    except ImportError:
        pass
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = blob[8 + hlen:]
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
    state = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        x = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[t["dtype"]])
        state[name] = x.reshape(t["shape"])
    return state, "the safetensors format read by tests/safetensors_load.py"


def make_net(torch):
    """The export's documented module: `layers`, an nn.ModuleList of
    nn.Linear, ReLU between them."""
    class Net(torch.nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.layers = torch.nn.ModuleList(
                torch.nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i + 1 < len(self.layers):
                    x = torch.relu(x)
            return x
    return Net


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
    except ImportError as exc:  # only a missing package means "skip"
        print("safetensors_load: cannot import torch: %s" % exc)
        return 77

    Net = make_net(torch)
    state, how = load_state(path, torch)
    net = Net(sizes)
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
    print(f"ckpt: {how} + load_state_dict(strict=True) OK (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
