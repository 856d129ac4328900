#!/usr/bin/env python3
"""gpt_ref.py - the PyTorch side of ddpc's GPT parity tests (tests/test_gpt.c).

The torch modules are tests/nanogpt.py's (nanoGPT's model.py, vendored), with
two substitutions that make the two programs compute the same function:
  * the MLP's GELU is the tanh form (nn.GELU(approximate='tanh')): ddpc's GPT
    is GPT-2's block (docs/DESIGN.md, Models), nanoGPT's model.py uses the erf form;
  * dropout modules apply the keep-mask ddpc drew (mask.<module>), so p > 0
    is compared exactly; without a mask p must be 0.

    gpt_ref.py op KIND DATA.safetensors
        KIND: embedding | layernorm | attention | gelu_tanh | xent_seq | tied_head.
        DATA holds cfg = [B, T, C, V, heads, p, bias], the inputs and ddpc's
        outputs and gradients (names below, per kind).
    gpt_ref.py model DATA.safetensors
        DATA holds cfg = [B, T, C, V, heads, p, bias, n_layer], the GPT's tensors
        under nanoGPT's names, x (ids) and y (targets) [B, T], ddpc's loss and
        grad.<name> for every parameter.

Each prints one line per compared tensor (relative L2 error) and OK or FAIL;
exit 1 when anything differs by more than 1e-5 relative, 77 (the caller
prints SKIP) when torch cannot be imported.
"""
import contextlib
import io
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    print("gpt_ref: cannot import torch: %s" % exc)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt  # noqa: E402
from torch_ref import read_safetensors, rel, MaskedDropout  # noqa: E402

TOL = 1e-5


class Checker:
    def __init__(self):
        self.bad = 0

    def tensor(self, what, ddpc, ref):
        r = rel(ddpc.reshape(ref.shape), ref)
        print("%-40s rel=%.3g" % (what, r))
        self.bad += not (r <= TOL)

    def scalar(self, what, ddpc, ref):
        r = abs(ddpc - ref) / max(abs(ref), 1e-30)
        print("%-40s ddpc=%.9g torch=%.9g rel=%.3g" % (what, ddpc, ref, r))
        self.bad += not (r <= TOL)

    def done(self):
        print("FAIL" if self.bad else "OK")
        return 1 if self.bad else 0


def config(cfg, n_layer=1):
    B, T, C, V, H = (int(v) for v in cfg[:5])
    return B, nanogpt.GPTConfig(block_size=T, vocab_size=V, n_layer=n_layer, n_head=H,
                                n_embd=C, dropout=float(cfg[5]), bias=bool(cfg[6]))


def quiet(fn, *args):
    """nanoGPT's constructors print (slow-attention warning, parameter count)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def leaf(t):
    return t.clone().requires_grad_(True)


def op_embedding(t, ck, cfg):
    B, c = config(cfg)
    gpt = quiet(nanogpt.GPT, c)
    gpt.transformer.wte.weight.data.copy_(t["wte"])
    gpt.transformer.wpe.weight.data.copy_(t["wpe"])
    idx = t["x"].to(torch.int64)
    pos = torch.arange(0, c.block_size, dtype=torch.long)
    y = gpt.transformer.wte(idx) + gpt.transformer.wpe(pos)   # nanoGPT's forward lines
    y.backward(t["dy"])
    ck.tensor("y", t["y"], y.detach())
    ck.tensor("grad wte", t["dwte"], gpt.transformer.wte.weight.grad)
    ck.tensor("grad wpe", t["dwpe"], gpt.transformer.wpe.weight.grad)


def op_layernorm(t, ck, cfg):
    _, c = config(cfg)
    ln = nanogpt.LayerNorm(c.n_embd, bias=c.bias)
    ln.weight.data.copy_(t["w"])
    if c.bias:
        ln.bias.data.copy_(t["b"])
    x = leaf(t["x"])
    y = ln(x)
    y.backward(t["dy"])
    ck.tensor("y", t["y"], y.detach())
    ck.tensor("dx", t["dx"], x.grad)
    ck.tensor("dw", t["dw"], ln.weight.grad)
    if c.bias:
        ck.tensor("db", t["db"], ln.bias.grad)


def op_attention(t, ck, cfg):
    _, c = config(cfg)
    attn = quiet(nanogpt.CausalSelfAttention, c)
    for name in ("c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"):
        attn.get_parameter(name).data.copy_(t[name])
    if c.dropout > 0:
        attn.attn_dropout = MaskedDropout(t["mask.attn"], c.dropout)
    attn.resid_dropout = torch.nn.Identity()   # the attention core only
    x = leaf(t["x"])
    y = attn(x)
    y.backward(t["dy"])
    ck.tensor("y", t["y"], y.detach())
    ck.tensor("dx", t["dx"], x.grad)
    for name, p in attn.named_parameters():
        ck.tensor("grad " + name, t["grad." + name], p.grad)


def op_gelu_tanh(t, ck, cfg):
    x = leaf(t["x"])
    y = torch.nn.GELU(approximate="tanh")(x)
    y.backward(t["dy"])
    ck.tensor("y", t["y"], y.detach())
    ck.tensor("dx", t["dx"], x.grad)


def op_xent_seq(t, ck, cfg):
    B, c = config(cfg)
    logits = leaf(t["logits"])     # [B, T, V], the model's layout
    targets = t["targets"].to(torch.int64)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
    loss.backward()
    ck.scalar("loss", t["loss"].item(), loss.item())
    ck.tensor("dlogits", t["dlogits"], logits.grad)


def op_tied_head(t, ck, cfg):
    """tok + pos embedding straight into the tied lm_head: the one weight
    gets the head's dW and the embedding's scatter."""
    B, c = config(cfg)
    gpt = quiet(nanogpt.GPT, c)
    gpt.transformer.wte.weight.data.copy_(t["wte"])
    gpt.transformer.wpe.weight.data.copy_(t["wpe"])
    assert gpt.lm_head.weight is gpt.transformer.wte.weight
    idx = t["x"].to(torch.int64)
    pos = torch.arange(0, c.block_size, dtype=torch.long)
    h = gpt.transformer.wte(idx) + gpt.transformer.wpe(pos)
    logits = gpt.lm_head(h)
    targets = t["targets"].to(torch.int64)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
    loss.backward()
    ck.scalar("loss", t["loss"].item(), loss.item())
    ck.tensor("grad wte (= lm_head)", t["dwte"], gpt.transformer.wte.weight.grad)
    ck.tensor("grad wpe", t["dwpe"], gpt.transformer.wpe.weight.grad)


def gpt_for_parity(t, cfg):
    """nanoGPT's GPT holding ddpc's weights and masks (see the file comment)."""
    _, c = config(cfg, int(cfg[7]))
    gpt = quiet(nanogpt.GPT, c)
    for block in gpt.transformer.h:
        block.mlp.gelu = torch.nn.GELU(approximate="tanh")
    if c.dropout > 0:
        for name, mod in list(gpt.named_modules()):
            if isinstance(mod, torch.nn.Dropout):
                parent = gpt.get_submodule(name.rsplit(".", 1)[0]) if "." in name else gpt
                setattr(parent, name.rsplit(".", 1)[-1], MaskedDropout(t["mask." + name], c.dropout))
    state = {k: v for k, v in t.items() if not k.startswith(("x", "y", "cfg", "loss", "grad.", "mask."))}
    for name, buf in gpt.named_buffers():   # attn.bias: the causal mask, not a weight
        state[name] = buf
    state["lm_head.weight"] = state["transformer.wte.weight"]
    gpt.load_state_dict(state, strict=True)
    return gpt


def cmd_model(t, ck):
    cfg = t["cfg"].tolist()
    gpt = gpt_for_parity(t, cfg)
    gpt.train()
    _, loss = gpt(t["x"].to(torch.int64), t["y"].to(torch.int64))
    loss.backward()
    ck.scalar("loss", t["loss"].item(), loss.item())
    for name, p in gpt.named_parameters():
        ck.tensor("grad " + name, t["grad." + name], p.grad)


OPS = {"embedding": op_embedding, "layernorm": op_layernorm, "attention": op_attention,
       "gelu_tanh": op_gelu_tanh, "xent_seq": op_xent_seq, "tied_head": op_tied_head}


def main():
    torch.set_num_threads(1)
    ck = Checker()
    if len(sys.argv) == 4 and sys.argv[1] == "op" and sys.argv[2] in OPS:
        t = read_safetensors(sys.argv[3])
        OPS[sys.argv[2]](t, ck, t["cfg"].tolist())
        return ck.done()
    if len(sys.argv) == 3 and sys.argv[1] == "model":
        cmd_model(read_safetensors(sys.argv[2]), ck)
        return ck.done()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
