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

    torch_ref.py eval SPEC MODEL.safetensors INPUTS [LABELS]
        ./job --eval's numbers in PyTorch: the export loaded with strict=True
        in eval mode over a CSV (the label column data.test names), or an
        IDX or NPY file of inputs and one of labels, converted as ddpc reads
        them (uint8 times float32(1/255)). Prints
        "test_loss=L test_accuracy=A n=N" with 4 decimals, as ddpc prints them.

    torch_ref.py predict SPEC MODEL.safetensors INPUT PREDICTIONS
        ./job --predict's output (.npy records of class and prob, or .csv
        class,p0,...) against softmax(model(INPUT)) in PyTorch: the class ids
        must be torch's argmax and the probabilities within 2e-6. Prints
        "n=N class_mismatches=K max_prob_diff=D" and exits 1 on a mismatch.

The shipped loader (python/ddpc_torch.py, `python3 -m ddpc_torch`) loads
and scores exports; this file is the independent reference the layer
tests compare against.

Exit 77 when torch or yaml cannot be imported (the caller prints SKIP).
safetensors files are read here directly (8-byte header length, JSON
header, raw little-endian data): no safetensors package needed.
"""
import gzip
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


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        blob = f.read()
    magic, = struct.unpack(">I", blob[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, blob[4:4 + 4 * ndim])
    data = torch.frombuffer(bytearray(blob[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def read_array(path):
    """An IDX (.gz or not) or NPY file as a torch tensor of its stored dtype."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(6)
    if head == b"\x93NUMPY":
        import numpy
        return torch.from_numpy(numpy.load(path))
    return read_idx(path)


def as_inputs(t):
    """Floats as ddpc reads them: uint8 pixels times float32(1/255)."""
    if t.dtype == torch.uint8:
        scale = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(255.0, dtype=torch.float32)
        return t.to(torch.float32) * scale
    return t.to(torch.float32)


def read_csv_rows(path, label_column, n_inputs):
    """Rows of numbers (a first line that is not all numbers is a header);
    label_column None: every column is an input."""
    xs, ys = [], []
    with open(path) as f:
        first = True
        for line in f:
            line = line.strip()
            if not line:
                continue
            cells = line.split(",")
            try:
                vals = [float(c.strip().strip('"')) for c in cells]
            except ValueError:
                if first:
                    first = False
                    continue
                raise
            first = False
            if label_column is not None and len(vals) == n_inputs + 1:
                ys.append(int(vals[label_column]))
                del vals[label_column]
            xs.append(vals)
    x = torch.tensor(xs, dtype=torch.float64).to(torch.float32)
    return x, (torch.tensor(ys, dtype=torch.int64) if ys else None)


def load_net(spec_path, model_path):
    spec = yaml.safe_load(open(spec_path))
    shape = spec["model"]["input"]
    net = Net(spec, shape)
    net.load_state_dict(read_safetensors(model_path), strict=True)
    net.eval()
    n = 1
    for d in shape:
        n *= d
    return spec, net, n


def label_column(spec):
    data = spec.get("data", {})
    src = data.get("test") or data.get("train") or {}
    return src.get("label_column", 0) if src.get("format") == "csv" else None


def cmd_eval(spec_path, model_path, inputs, labels=None):
    spec, net, n_in = load_net(spec_path, model_path)
    if inputs.endswith(".csv"):
        x, y = read_csv_rows(inputs, label_column(spec), n_in)
    else:
        x = as_inputs(read_array(inputs)).reshape(-1, n_in)
        y = read_array(labels).to(torch.int64).reshape(-1)
    with torch.no_grad():
        logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits, y, reduction="none").double().mean()
        acc = (logits.argmax(dim=1) == y).to(torch.float64).mean().item()
    print("test_loss=%.4f test_accuracy=%.4f n=%d" % (loss.item(), acc, len(y)))
    return 0


def cmd_predict(spec_path, model_path, inputs, pred_path):
    spec, net, n_in = load_net(spec_path, model_path)
    if inputs.endswith(".csv"):
        x, _ = read_csv_rows(inputs, label_column(spec), n_in)
    else:
        x = as_inputs(read_array(inputs)).reshape(-1, n_in)
    with torch.no_grad():
        p = torch.softmax(net(x), dim=1)
    cls = p.argmax(dim=1)
    if pred_path.endswith(".npy"):
        import numpy
        a = numpy.load(pred_path)
        got_cls = torch.from_numpy(a["class"].astype("int64"))
        got_p = torch.from_numpy(a["prob"].astype("float32"))
    else:
        rows = [l.strip().split(",") for l in open(pred_path) if l.strip()][1:]
        got_cls = torch.tensor([int(r[0]) for r in rows])
        got_p = torch.tensor([[float(v) for v in r[1:]] for r in rows], dtype=torch.float32)
    if got_p.shape != p.shape:
        print("FAIL shapes: ddpc %s, torch %s" % (tuple(got_p.shape), tuple(p.shape)))
        return 1
    bad = int((got_cls != cls).sum().item())
    diff = (got_p.double() - p.double()).abs().max().item() if len(p) else 0.0
    print("n=%d class_mismatches=%d max_prob_diff=%.3g" % (len(p), bad, diff))
    return 1 if bad or diff > 2e-6 else 0


def main():
    torch.set_num_threads(1)
    if len(sys.argv) in (5, 6) and sys.argv[1] == "eval":
        return cmd_eval(*sys.argv[2:])
    if len(sys.argv) == 6 and sys.argv[1] == "predict":
        return cmd_predict(*sys.argv[2:])
    if len(sys.argv) == 4 and sys.argv[1] == "grads":
        return cmd_grads(sys.argv[2], sys.argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
