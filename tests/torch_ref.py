#!/usr/bin/env python3
"""torch_ref.py - the PyTorch reference for ddpc's sequential models.

Builds, from a ddpc spec's `model.layers`, the torch.nn.Sequential that
ddpc's export names describe (held as attribute `layers`; a residual item is
a module whose `body` is an nn.Sequential and whose output is x + body(x)),
and checks ddpc against it. Run by tests/test_layers.c and tests/test_e2e.c
with Debian's python3-torch (/usr/bin/python3).

    torch_ref.py grads SPEC DATA.safetensors
        DATA holds the model's tensors under their export names (before the
        step), and x, labels, loss, grad.<param> (ddpc's gradients of the
        mean cross-entropy), after.<buffer> (batch-norm buffers after the
        forward) and mask.<module> (the dropout keep-masks ddpc drew, applied
        here in place of torch's own draws). Prints one line per tensor and
        exits 1 when the loss or a gradient differs by more than 1e-5
        relative (L2 norm of the difference over the norm of torch's).

The shipped loader (python/ddpc_torch.py, `python3 -m ddpc_torch`) loads
and scores exports; this file is the independent reference the layer
tests compare against.

Exit 77 when torch or yaml cannot be imported (the caller prints SKIP).
safetensors files are read here directly (8-byte header length, JSON
header, raw little-endian data): no safetensors package needed.
"""
import json
import struct
import sys

try:
    import torch
    import yaml
except ImportError as exc:
    print("torch_ref: cannot import torch/yaml: %s" % exc)
    sys.exit(77)

TOL = 1e-5


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n, = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        dt = {"F32": torch.float32, "I64": torch.int64}[t["dtype"]]
        data = torch.frombuffer(bytearray(blob[base + lo:base + hi]), dtype=dt)
        out[name] = data.reshape(t["shape"]).clone()
    return out


class Residual(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class MaskedDropout(torch.nn.Module):
    """Dropout with ddpc's keep-mask: y = x * (mask * 1/(1-p))."""

    def __init__(self, mask, p):
        super().__init__()
        self.mask = mask
        self.scale = torch.tensor(1.0 / (1.0 - p), dtype=torch.float32)

    def forward(self, x):
        return x * (self.mask * self.scale)


def build(items, shape, masks=None, prefix="layers"):
    """nn.Modules for items, given one sample's input shape (a list)."""
    mods = []
    shape = list(shape)
    for pos, it in enumerate(items):
        name, args = (it, {}) if isinstance(it, str) else next(iter(it.items()))
        args = args or {}
        here = "%s.%d" % (prefix, pos)
        if name == "linear":
            m = torch.nn.Linear(shape[-1], args["out_features"], bias=args.get("bias", True))
            shape[-1] = args["out_features"]
        elif name == "conv2d":
            k, s, p = args["kernel_size"], args.get("stride", 1), args.get("padding", 0)
            m = torch.nn.Conv2d(shape[0], args["out_channels"], k, stride=s, padding=p,
                                bias=args.get("bias", True))
            shape = [args["out_channels"], (shape[1] + 2 * p - k) // s + 1,
                     (shape[2] + 2 * p - k) // s + 1]
        elif name in ("maxpool2d", "avgpool2d"):
            k = args["kernel_size"]
            s = args.get("stride") or k
            p = args.get("padding", 0)
            cls = torch.nn.MaxPool2d if name == "maxpool2d" else torch.nn.AvgPool2d
            m = cls(k, stride=s, padding=p)
            shape = [shape[0], (shape[1] + 2 * p - k) // s + 1, (shape[2] + 2 * p - k) // s + 1]
        elif name == "adaptiveavgpool2d":
            m = torch.nn.AdaptiveAvgPool2d(1)
            shape = [shape[0], 1, 1]
        elif name in ("batchnorm1d", "batchnorm2d"):
            prev = mods[-1] if mods else None
            if getattr(prev, "bias", None) is not None and (
                    isinstance(prev, torch.nn.Conv2d) or
                    (isinstance(prev, torch.nn.Linear) and len(shape) == 1)):
                ZERO_GRADS.add("%s.%d.bias" % (prefix, pos - 1))
            cls = torch.nn.BatchNorm1d if name == "batchnorm1d" else torch.nn.BatchNorm2d
            m = cls(shape[0], eps=args.get("eps", 1e-5), momentum=args.get("momentum", 0.1))
        elif name == "layernorm":
            m = torch.nn.LayerNorm(shape[-1], eps=args.get("eps", 1e-5))
        elif name == "dropout":
            p = args.get("p", 0.5)
            m = MaskedDropout(masks[here], p) if masks is not None and here in masks \
                else torch.nn.Dropout(p)
        elif name == "flatten":
            m = torch.nn.Flatten()
            n = 1
            for d in shape:
                n *= d
            shape = [n]
        elif name == "relu":
            m = torch.nn.ReLU()
        elif name == "leaky_relu":
            m = torch.nn.LeakyReLU(args.get("negative_slope", 0.01))
        elif name == "gelu":
            m = torch.nn.GELU(approximate=args.get("approximate", "none"))
        elif name == "silu":
            m = torch.nn.SiLU()
        elif name == "tanh":
            m = torch.nn.Tanh()
        elif name == "sigmoid":
            m = torch.nn.Sigmoid()
        elif name == "residual":
            body, _ = build(it[name], shape, masks, here + ".body")
            m = Residual(torch.nn.Sequential(*body))
        else:
            raise ValueError("unknown layer %r" % name)
        mods.append(m)
    return mods, shape


# Biases right before a batch norm over their output channels (conv2d then
# batchnorm2d, linear then batchnorm1d on [features]): their gradient is
# exactly zero in exact arithmetic (the norm subtracts the channel mean), so
# both programs hold rounding noise there. build() records them; they are
# checked to be noise, not compared.
ZERO_GRADS = set()


class Net(torch.nn.Module):
    def __init__(self, spec, input_shape, masks=None):
        super().__init__()
        mods, _ = build(spec["model"]["layers"], input_shape, masks)
        self.layers = torch.nn.Sequential(*mods)
        self.input_shape = list(input_shape)

    def forward(self, x):
        return self.layers(x.reshape([x.shape[0]] + self.input_shape))


def rel(a, b, floor=0.0):
    """||a - b|| / ||b||, b's norm taken as at least floor."""
    d = (a.double() - b.double()).norm().item()
    n = max(b.double().norm().item(), floor)
    return d / n if n > 0 else d


def cmd_grads(spec_path, data_path):
    spec = yaml.safe_load(open(spec_path))
    t = read_safetensors(data_path)
    shape = spec["model"]["input"]
    x = t["x"]
    masks = {k[5:]: v for k, v in t.items() if k.startswith("mask.")}
    net = Net(spec, shape, masks)
    state = {k: v for k, v in t.items()
             if not k.startswith(("x", "labels", "loss", "grad.", "after.", "mask."))}
    net.load_state_dict(state, strict=True)
    net.train()
    labels = t["labels"].to(torch.int64)
    loss = torch.nn.functional.cross_entropy(net(x), labels)
    loss.backward()
    bad = 0
    r = abs(loss.item() - t["loss"].item()) / max(abs(loss.item()), 1e-30)
    print("loss ddpc=%.9g torch=%.9g rel=%.3g" % (t["loss"].item(), loss.item(), r))
    bad += r > TOL
    total = sum(p.grad.double().norm().item() ** 2 for p in net.parameters()) ** 0.5
    zeros = ZERO_GRADS
    for name, p in net.named_parameters():
        g = t["grad." + name]
        if name in zeros:
            r = max(g.double().norm().item(), p.grad.double().norm().item()) / total
            print("grad %-28s zero in exact arithmetic: |ddpc|, |torch| <= %.3g of the "
                  "whole gradient" % (name, r))
            bad += r > TOL
            continue
        r = rel(g, p.grad)
        print("grad %-28s rel=%.3g" % (name, r))
        bad += r > TOL
    for name, b in net.named_buffers():
        if ("after." + name) not in t:
            continue
        r = rel(t["after." + name].to(b.dtype), b) if b.dtype != torch.int64 else \
            float(int(t["after." + name].item()) != int(b.item()))
        print("buffer %-26s rel=%.3g" % (name, r))
        bad += r > TOL
    print("FAIL" if bad else "OK")
    return 1 if bad else 0


def main():
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "grads":
        return cmd_grads(sys.argv[2], sys.argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
