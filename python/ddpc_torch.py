#!/usr/bin/env python3
"""ddpc_torch - a ddpc export (`checkpoint.export`, safetensors) in PyTorch.

    python3 -m ddpc_torch MODEL.safetensors [--spec JOB.yaml] [--score]
                          [--activation relu|gelu|tanh|sigmoid] [--n-head H]

(`make install` puts this file in PREFIX/share/ddpc/python: run it with
PYTHONPATH=PREFIX/share/ddpc/python, or as python3 PATH/ddpc_torch.py.)

Loads the file into the torch module whose state_dict names it holds, with
load_state_dict(strict=True), and prints what it loaded. The three kinds of
export, and the module each becomes:

  mlp, linear  `layers`, an nn.ModuleList of nn.Linear (`layers.<l>.weight`
               [out, in], `layers.<l>.bias` [out] for the l-th linear layer;
               activations have no index), model.activation between them
               and none after the last. The sizes come from the file; the
               activation from the spec (default relu, or --activation).
  sequential   `layers`, an nn.Sequential of the spec's model.layers
               (`layers.<i>.weight`, `layers.<i>.running_mean`, ...; index =
               position in the list; a residual item is a module whose
               `body` is an nn.Sequential, output x + body(x)). Needs --spec
               (layer arguments are not in the file).
  gpt          nanoGPT's GPT (model.py) module tree: transformer.wte, .wpe,
               .h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
               mlp.c_proj}, .ln_f, and lm_head tied to wte; GELU in GPT-2's
               tanh form, as ddpc trains it. Sizes come from the file; n_head
               from the spec (--spec) or --n-head.

With --score (and --spec), evaluates the spec's data.test as the job does
and prints one line, `test_loss=L test_accuracy=A n=N` (a gpt's loss is the
mean cross-entropy per token over windows of block_size at stride
block_size; it has no accuracy; mse has none either). Test data formats:
idx and npy (8-bit inputs scaled to [0, 1], as ddpc reads them), text and
tokens (llm.c shards), with range. csv is not read here.

The spec must be the one the job was built from (a --set given to ddpc
build is not in the file: pass a spec that has it). Nothing in the spec or
the file is executed. Needs torch; --spec needs PyYAML. Exit status: 0, 1
when the file does not load or score, 2 on a usage error.

As a library: `ddpc_torch.load(path, spec=None, activation=None,
n_head=None)` returns (module, info), info a dict of what was loaded.
"""
import argparse
import ast
import glob
import gzip
import json
import math
import os
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:   # the caller says what to install
    torch = None
    _TORCH_ERROR = exc


class LoadError(Exception):
    """A file, spec or data set that does not load; the message says why."""


# ---------------------------------------------------------------- files

def read_safetensors(path):
    """(tensors by name, metadata dict) of a safetensors file: an 8-byte
    little-endian header length, a JSON header of dtype/shape/data_offsets,
    then the data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise LoadError("%s: too short for safetensors" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise LoadError("%s: header length %d does not fit the file" % (path, n))
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except ValueError as exc:
        raise LoadError("%s: the header is not JSON: %s" % (path, exc))
    data = blob[8 + n:]
    dtypes = {"F32": torch.float32, "I64": torch.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t.get("dtype") not in dtypes:
            raise LoadError("%s: tensor %s is %s; a ddpc export holds F32 and I64" %
                            (path, name, t.get("dtype")))
        lo, hi = t["data_offsets"]
        if not 0 <= lo <= hi <= len(data):
            raise LoadError("%s: tensor %s's data_offsets are outside the file" % (path, name))
        x = torch.frombuffer(bytearray(data[lo:hi]), dtype=dtypes[t["dtype"]])
        out[name] = x.reshape(t["shape"]).clone()
    return out, header.get("__metadata__", {})


def read_spec(path):
    try:
        import yaml
    except ImportError as exc:
        raise LoadError("--spec needs PyYAML (python3-yaml): %s" % exc)
    with open(path) as f:
        spec = yaml.safe_load(f)
    if not isinstance(spec, dict):
        raise LoadError("%s: a spec is a mapping of keys" % path)
    return spec


# ---------------------------------------------------------------- modules

class LayerNorm(torch.nn.Module if torch else object):
    """nn.LayerNorm with an optional bias (torch < 2.1 has no bias=False):
    `weight`, and `bias` when bias."""

    def __init__(self, n, eps=1e-5, bias=True):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.bias = torch.nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class Residual(torch.nn.Module if torch else object):
    """A residual item: output x + body(x)."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class MLP(torch.nn.Module if torch else object):
    """An mlp or linear export: `layers`, nn.Linear each, act between."""

    def __init__(self, sizes, activation="relu"):
        super().__init__()
        acts = {"relu": torch.relu, "gelu": F.gelu, "tanh": torch.tanh,
                "sigmoid": torch.sigmoid}
        if activation not in acts:
            raise LoadError("activation %r: ddpc has relu, gelu, tanh, sigmoid" % activation)
        self.activation = activation
        self.act = acts[activation]
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1))

    def forward(self, x):
        x = x.reshape(x.shape[0], -1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = self.act(x)
        return x


def build_layers(items, shape, prefix="layers"):
    """nn.Modules of a spec's model.layers for one sample of shape `shape`
    (a list), and the output shape."""
    mods = []
    shape = list(shape)
    for pos, it in enumerate(items):
        if isinstance(it, str):
            name, args = it, {}
        elif isinstance(it, dict) and len(it) == 1:
            name, args = next(iter(it.items()))
        else:
            raise LoadError("%s.%d: not a layer (a name, or a mapping with one key)" %
                            (prefix, pos))
        args = args if isinstance(args, dict) else {}
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
            cls = torch.nn.BatchNorm1d if name == "batchnorm1d" else torch.nn.BatchNorm2d
            m = cls(shape[0], eps=args.get("eps", 1e-5), momentum=args.get("momentum", 0.1))
        elif name == "layernorm":
            m = LayerNorm(shape[-1], eps=args.get("eps", 1e-5), bias=args.get("bias", True))
        elif name == "dropout":
            m = torch.nn.Dropout(args.get("p", 0.5))
        elif name == "flatten":
            m = torch.nn.Flatten()
            shape = [math.prod(shape)]
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
            body, _ = build_layers(it[name], shape, here + ".body")
            m = Residual(torch.nn.Sequential(*body))
        else:
            raise LoadError("%s: unknown layer %r" % (here, name))
        mods.append(m)
    return mods, shape


class Sequential(torch.nn.Module if torch else object):
    """A sequential export: `layers`, an nn.Sequential; input one sample's
    shape."""

    def __init__(self, items, input_shape):
        super().__init__()
        mods, self.output_shape = build_layers(items, input_shape)
        self.layers = torch.nn.Sequential(*mods)
        self.input_shape = list(input_shape)

    def forward(self, x):
        return self.layers(x.reshape([x.shape[0]] + self.input_shape))


class SelfAttention(torch.nn.Module if torch else object):
    """Causal self-attention over [B, T, C]: c_attn to q | k | v, head h in
    columns h*hs..(h+1)*hs of each, softmax(q k^T / sqrt(hs)) v, c_proj."""

    def __init__(self, C, heads, bias):
        super().__init__()
        self.heads = heads
        self.c_attn = torch.nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = torch.nn.Linear(C, C, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(torch.nn.Module if torch else object):
    def __init__(self, C, heads, bias):
        super().__init__()
        self.ln_1 = LayerNorm(C, bias=bias)
        self.attn = SelfAttention(C, heads, bias)
        self.ln_2 = LayerNorm(C, bias=bias)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = torch.nn.Linear(C, 4 * C, bias=bias)
        self.mlp.c_proj = torch.nn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")
        return x + self.mlp.c_proj(h)


class GPT(torch.nn.Module if torch else object):
    """nanoGPT's GPT names and function (dropout 0, tanh GELU); forward
    takes token ids [B, T] and returns logits [B, T, V]."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, bias):
        super().__init__()
        if n_embd % n_head:
            raise LoadError("n_head %d does not divide n_embd %d" % (n_head, n_embd))
        self.block_size = block_size
        self.transformer = torch.nn.ModuleDict(dict(
            wte=torch.nn.Embedding(vocab_size, n_embd),
            wpe=torch.nn.Embedding(block_size, n_embd),
            h=torch.nn.ModuleList(Block(n_embd, n_head, bias) for _ in range(n_layer)),
            ln_f=LayerNorm(n_embd, bias=bias)))
        self.lm_head = torch.nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight   # tied, as ddpc trains it

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# ---------------------------------------------------------------- loading

def _model(spec):
    m = (spec or {}).get("model") or {}
    return m if isinstance(m, dict) else {}


def _input_shape(spec, spec_dir):
    """One sample's shape for a sequential model: model.input, else the
    data.train inputs' header (IDX [N, H, W] is [1, H, W])."""
    m = _model(spec)
    if m.get("input"):
        return [int(d) for d in m["input"]]
    tr = ((spec.get("data") or {}).get("train")) or {}
    fmt, inputs = tr.get("format"), tr.get("inputs")
    if fmt in ("idx", "npy") and inputs:
        dims = (read_idx_dims if fmt == "idx" else read_npy_dims)(_path(inputs, spec_dir))
        if fmt == "idx" and len(dims) == 3:
            return [1, dims[1], dims[2]]
        return list(dims[1:]) if len(dims) > 1 else [1]
    if fmt == "synthetic":
        return [int(tr.get("features", 0))]
    raise LoadError("the input shape is unknown: set model.input in the spec")


def _path(p, spec_dir):
    return p if os.path.isabs(p) else os.path.join(spec_dir, p)


def _mlp_sizes(state):
    """[in, hidden..., out] from layers.<l>.weight, when the file's names
    are exactly an mlp's; else None."""
    sizes, l = [], 0
    while "layers.%d.weight" % l in state:
        w = state["layers.%d.weight" % l]
        if w.dim() != 2 or (sizes and sizes[-1] != w.shape[1]):
            return None
        if not sizes:
            sizes.append(int(w.shape[1]))
        sizes.append(int(w.shape[0]))
        l += 1
    want = {"layers.%d.%s" % (i, k) for i in range(l) for k in ("weight", "bias")}
    return sizes if l and set(state) == want else None


def load(path, spec=None, activation=None, n_head=None, spec_dir="."):
    """(module in eval mode, info) for the export at path; spec a dict (the
    job's spec) or None. Raises LoadError saying why it does not load."""
    if torch is None:
        raise LoadError("cannot import torch: %s" % _TORCH_ERROR)
    state, meta = read_safetensors(path)
    m = _model(spec)
    kind = m.get("type") or ("gpt" if meta.get("ddpc_model") == "gpt" else None)
    info = {"file": path, "job": meta.get("ddpc_job", ""), "tensors": len(state)}
    if kind == "gpt":
        for name in ("transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"):
            if name not in state:
                raise LoadError("%s: not a gpt export: it has no %s" % (path, name))
        if not torch.equal(state["lm_head.weight"], state["transformer.wte.weight"]):
            raise LoadError("%s: lm_head.weight differs from transformer.wte.weight; ddpc's gpt "
                            "ties them" % path)
        V, C = state["transformer.wte.weight"].shape
        T = state["transformer.wpe.weight"].shape[0]
        L = 0
        while "transformer.h.%d.ln_1.weight" % L in state:
            L += 1
        H = n_head or m.get("n_head")
        if not H:
            raise LoadError("a gpt's n_head is not in the file: give --spec or --n-head")
        bias = "transformer.ln_f.bias" in state
        net = GPT(int(V), int(T), L, int(H), int(C), bias)
        info.update(kind="gpt", vocab_size=int(V), block_size=int(T), n_layer=L,
                    n_head=int(H), n_embd=int(C), bias=bias)
    elif kind == "sequential":
        shape = _input_shape(spec, spec_dir)
        net = Sequential(m.get("layers") or [], shape)
        info.update(kind="sequential", input=shape, output=net.output_shape)
    else:
        sizes = _mlp_sizes(state)
        if kind not in (None, "mlp", "linear") or sizes is None:
            raise LoadError("%s is not an mlp export (its names are not layers.<l>.weight/bias "
                            "of chained linear layers): give the job's --spec" % path)
        act = activation or m.get("activation") or "relu"
        net = MLP(sizes, act)
        info.update(kind=kind or "mlp", sizes=sizes, activation=act)
    net.load_state_dict(state, strict=True)   # every name, shape and extra key
    net.eval()
    info["parameters"] = sum(p.numel() for p in net.parameters())
    return net, info


# ---------------------------------------------------------------- data

_IDX_TYPES = {0x08: ("B", 1), 0x09: ("b", 1), 0x0B: (">h", 2), 0x0C: (">i", 4),
              0x0D: (">f", 4), 0x0E: (">d", 8)}


def _open(path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx_dims(path):
    with _open(path) as f:
        h = f.read(4)
        nd = h[3]
        return list(struct.unpack(">" + "I" * nd, f.read(4 * nd)))


def _as_float(raw, code, count, u8_scale):
    if code in ("B", "|u1", "u1"):
        x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.float32)
        return x / 255.0 if u8_scale else x
    import array
    fmt = code[-1]
    a = array.array({"b": "b", "h": "h", "i": "i", "f": "f", "d": "d", "q": "q",
                     "H": "H", "I": "I", "Q": "Q", "e": "f"}[fmt])
    if fmt == "e":   # float16
        vals = struct.unpack(("<" if code[0] != ">" else ">") + "e" * count, raw)
        return torch.tensor(vals, dtype=torch.float32)
    a.frombytes(raw)
    if code[0] == ">" and sys.byteorder == "little" or code[0] == "<" and sys.byteorder == "big":
        a.byteswap()
    return torch.tensor(a, dtype=torch.float64).to(torch.float32)


def read_idx(path, inputs):
    """An IDX file as float32 (inputs: 8-bit scaled to [0, 1]) and its dims."""
    with _open(path) as f:
        blob = f.read()
    t, nd = blob[2], blob[3]
    if t not in _IDX_TYPES:
        raise LoadError("%s: IDX type 0x%02x" % (path, t))
    dims = list(struct.unpack(">" + "I" * nd, blob[4:4 + 4 * nd]))
    code, size = _IDX_TYPES[t]
    count = math.prod(dims)
    raw = blob[4 + 4 * nd:4 + 4 * nd + size * count]
    return _as_float(raw, code, count, inputs).reshape(dims), dims


def _npy_header(f, path):
    if f.read(6) != b"\x93NUMPY":
        raise LoadError("%s: not an NPY file" % path)
    major = f.read(2)[0]
    (hl,) = struct.unpack("<H" if major == 1 else "<I", f.read(2 if major == 1 else 4))
    h = ast.literal_eval(f.read(hl).decode("latin1"))   # a dict literal, nothing else
    if h.get("fortran_order"):
        raise LoadError("%s: Fortran order; ddpc reads C order" % path)
    return h["descr"], list(h["shape"])


def read_npy_dims(path):
    with open(path, "rb") as f:
        return _npy_header(f, path)[1]


def read_npy(path, inputs):
    with open(path, "rb") as f:
        descr, shape = _npy_header(f, path)
        count = math.prod(shape)
        size = int(descr[2:])
        raw = f.read(count * size)
    if descr[1] == "b":   # bool: 0 or 1, not a pixel
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.float32) \
                    .reshape(shape), shape, descr
    code = descr[0] + {"u1": "B", "i1": "b", "i2": "h", "u2": "H", "i4": "i", "u4": "I",
                       "i8": "q", "u8": "Q", "f2": "e", "f4": "f", "f8": "d"}[descr[1:]]
    if descr[1:] == "u1":
        code = "B"
    return _as_float(raw, code, count, inputs).reshape(shape), shape, descr


def read_tokens(src, spec_dir):
    """A text or tokens source's stream over its range (tokens_range: floor
    of each fraction times the count), as int64."""
    pattern = _path(src["path"], spec_dir)
    files = sorted(glob.glob(pattern)) if any(c in src["path"] for c in "*?[") else [pattern]
    if not files:
        raise LoadError("no file matches %s" % pattern)
    parts = []
    for p in files:
        with open(p, "rb") as f:
            blob = f.read()
        if src.get("format") == "text":
            parts.append(torch.frombuffer(bytearray(blob), dtype=torch.uint8).to(torch.int64))
        else:
            magic, version, n = struct.unpack("<iii", blob[:12])
            if magic != 20240520 or version != 1:
                raise LoadError("%s: not a version 1 llm.c token shard" % p)
            parts.append(torch.frombuffer(bytearray(blob[1024:1024 + 2 * n]),
                                          dtype=torch.int16).to(torch.int64) & 0xFFFF)
    d = torch.cat(parts)
    lo, hi = src.get("range", [0.0, 1.0])
    n = d.numel()
    a = min(max(int(math.floor(lo * n)), 0), n)
    b = min(max(int(math.floor(hi * n)), a), n)
    return d[a:b]


# ---------------------------------------------------------------- scoring

def score(net, info, spec, spec_dir):
    """The job's test_loss and test_accuracy on the spec's data.test: a dict
    with test_loss, test_accuracy (None without one) and n."""
    data = (spec or {}).get("data") or {}
    te = data.get("test")
    if not isinstance(te, dict):
        raise LoadError("the spec has no data.test to score")
    fmt = te.get("format")
    if info["kind"] == "gpt":
        if fmt not in ("text", "tokens"):
            raise LoadError("a gpt scores a text or tokens data.test, not %s" % fmt)
        d = read_tokens(te, spec_dir)
        T, V = info["block_size"], info["vocab_size"]
        nw = (d.numel() - 1) // T if d.numel() > T else 0
        total, count = 0.0, 0
        with torch.no_grad():
            for s in range(0, nw, 64):
                idx = range(s, min(nw, s + 64))
                x = torch.stack([d[i * T:i * T + T] for i in idx])
                y = torch.stack([d[i * T + 1:i * T + T + 1] for i in idx])
                logits = net(x)
                total += float(F.cross_entropy(logits.reshape(-1, V), y.reshape(-1),
                                               reduction="sum").double())
                count += y.numel()
        if not count:
            raise LoadError("data.test holds no window of block_size + 1 tokens")
        return {"test_loss": total / count, "test_accuracy": None, "n": count}
    if fmt == "idx":
        x, _ = read_idx(_path(te["inputs"], spec_dir), True)
        y, _ = read_idx(_path(te["labels"], spec_dir), False)
    elif fmt == "npy":
        x, _, _ = read_npy(_path(te["inputs"], spec_dir), True)
        y, _, ydescr = read_npy(_path(te["labels"], spec_dir), False)
    else:
        raise LoadError("data.test format %s: this loader reads idx, npy, text and tokens" % fmt)
    n = x.shape[0]
    loss_kind = (spec or {}).get("loss", "cross_entropy")
    with torch.no_grad():
        out = torch.cat([net(x[s:s + 512]) for s in range(0, n, 512)])
        if loss_kind == "mse":
            t = y.reshape(n, -1)
            if fmt == "idx" or ydescr[1] != "f":   # class labels: one-hot targets
                t = F.one_hot(y.reshape(n).to(torch.int64), out.shape[1]).to(torch.float32)
            return {"test_loss": float(F.mse_loss(out, t)), "test_accuracy": None, "n": n}
        labels = y.reshape(n).to(torch.int64)
        loss = float(F.cross_entropy(out, labels).double())
        acc = float((out.argmax(dim=1) == labels).to(torch.float64).mean())
    return {"test_loss": loss, "test_accuracy": acc, "n": n}


# ---------------------------------------------------------------- command

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m ddpc_torch",
                                 description="Load a ddpc export into PyTorch (strict=True), "
                                 "print what was loaded, and score the spec's data.test.")
    ap.add_argument("model", help="the export (checkpoint.export), a safetensors file")
    ap.add_argument("--spec", help="the job's spec (YAML): the model's type, layers, "
                    "activation, n_head, loss and data.test")
    ap.add_argument("--score", action="store_true", help="evaluate the spec's data.test")
    ap.add_argument("--activation", help="an mlp's activation without --spec (default relu)")
    ap.add_argument("--n-head", type=int, help="a gpt's attention heads without --spec")
    a = ap.parse_args(argv)
    if a.score and not a.spec:
        ap.error("--score needs --spec (data.test is the spec's)")
    try:
        spec = read_spec(a.spec) if a.spec else None
        spec_dir = os.path.dirname(os.path.abspath(a.spec)) if a.spec else "."
        if torch is not None:
            torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
        net, info = load(a.model, spec, a.activation, a.n_head, spec_dir)
        what = {"mlp": "sizes %s, %s" % (info.get("sizes"), info.get("activation")),
                "linear": "sizes %s" % info.get("sizes"),
                "sequential": "input %s, output %s" % (info.get("input"), info.get("output")),
                "gpt": "vocab_size %s, block_size %s, n_layer %s, n_head %s, n_embd %s, bias %s"
                       % (info.get("vocab_size"), info.get("block_size"), info.get("n_layer"),
                          info.get("n_head"), info.get("n_embd"), info.get("bias"))}[info["kind"]]
        print("loaded %s%s: %s (%s), %d tensors, %d parameters, strict=True" %
              (a.model, " (job %s)" % info["job"] if info["job"] else "", info["kind"], what,
               info["tensors"], info["parameters"]))
        if a.score:
            r = score(net, info, spec, spec_dir)
            line = "test_loss=%.6f" % r["test_loss"]
            if r["test_accuracy"] is not None:
                line += " test_accuracy=%.6f" % r["test_accuracy"]
            print("%s n=%d" % (line, r["n"]))
    except (LoadError, OSError, KeyError, RuntimeError, ValueError) as exc:
        print("ddpc_torch: %s: %s" % (a.model, exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
