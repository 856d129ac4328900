#!/usr/bin/env python3
"""gpt_export.py - a ddpc GPT export in nanoGPT's GPT (tests/test_e2e.c).

    gpt_export.py MODEL.safetensors TEST.txt VOCAB BLOCK N_LAYER N_HEAD N_EMBD BIAS

Builds tests/nanogpt.py's GPT with that GPTConfig (dropout 0) and loads the
export with load_state_dict(strict=True). The only keys a ddpc export may
lack are the `attn.bias` buffers: the causal masks nanoGPT registers on
torch < 2.0 (no flash attention), which are not weights; they are taken from
the fresh module, and the load is strict about every other name, shape and
extra key. lm_head.weight must equal transformer.wte.weight (tied). The MLP's
GELU is the tanh form (GPT-2's, which ddpc computes; nanoGPT's model.py uses
erf). Then evaluates TEST.txt's bytes as ddpc does (windows of BLOCK at
stride BLOCK: inputs d[i*T : i*T+T], targets d[i*T+1 : i*T+T+1], i over
floor((n-1)/T)) and prints "test_loss=L tokens=N": the mean cross-entropy
over every target token, which must equal the job's test_loss.

    gpt_export.py MODEL.safetensors TEST.txt VOCAB BLOCK N_LAYER N_HEAD N_EMBD BIAS PRED.npy
        also checks ./job --predict TEST.txt -o PRED.npy (predict.h): one record per
        byte of TEST.txt, its window's context (windows of BLOCK at stride BLOCK, the
        last one shorter): token, next (torch's argmax), prob (within 2e-6) and
        logprob of the byte that follows (within 2e-5; NaN after the last); prints
        "predict: rows=N next_mismatches=K max_prob_diff=P max_logprob_diff=L".

Exit 77 when torch cannot be imported (the caller prints SKIP); 1 when the
file does not load strictly.
"""
import contextlib
import io
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as exc:
    print("gpt_export: cannot import torch: %s" % exc)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nanogpt  # noqa: E402
from torch_ref import read_safetensors  # noqa: E402


def main():
    path, test = sys.argv[1], sys.argv[2]
    V, T, L, H, C, bias = (int(v) for v in sys.argv[3:9])
    cfg = nanogpt.GPTConfig(block_size=T, vocab_size=V, n_layer=L, n_head=H, n_embd=C,
                            dropout=0.0, bias=bool(bias))
    with contextlib.redirect_stdout(io.StringIO()):   # nanoGPT prints its size
        gpt = nanogpt.GPT(cfg)
    for block in gpt.transformer.h:
        block.mlp.gelu = torch.nn.GELU(approximate="tanh")
    state = read_safetensors(path)
    if "lm_head.weight" not in state or not torch.equal(state["lm_head.weight"],
                                                        state["transformer.wte.weight"]):
        print("FAIL: lm_head.weight is missing or differs from transformer.wte.weight")
        sys.exit(1)
    masks = {name for name, _ in gpt.named_buffers() if name.endswith(".attn.bias")}
    missing = set(gpt.state_dict().keys()) - set(state.keys())
    if missing - masks:
        print("FAIL: the export lacks %s" % sorted(missing - masks))
        sys.exit(1)
    for name in missing:
        state[name] = gpt.state_dict()[name]
    gpt.load_state_dict(state, strict=True)   # raises on extra keys and shapes
    gpt.eval()

    with open(test, "rb") as f:
        d = torch.tensor(list(f.read()), dtype=torch.int64)
    n = (d.numel() - 1) // T
    total, count = 0.0, 0
    with torch.no_grad():
        for s in range(0, n, 64):
            idx = torch.arange(s, min(n, s + 64))
            x = torch.stack([d[i * T:i * T + T] for i in idx.tolist()])
            y = torch.stack([d[i * T + 1:i * T + T + 1] for i in idx.tolist()])
            logits, _ = gpt(x, y)
            loss = F.cross_entropy(logits.view(-1, V), y.view(-1), reduction="sum")
            total += float(loss.double())
            count += y.numel()
    print("strict load OK (%d keys, %d attn.bias masks from the module)" % (len(state),
                                                                          len(missing)))
    print("test_loss=%.9f tokens=%d" % (total / count, count))
    if len(sys.argv) > 9:
        return check_predictions(gpt, d, V, T, sys.argv[9])
    return 0


def check_predictions(gpt, d, V, T, pred_path):
    import numpy
    a = numpy.load(pred_path)
    if len(a) != d.numel():
        print("FAIL: %d prediction rows for %d tokens" % (len(a), d.numel()))
        return 1
    bad = 0
    dp = dl = 0.0
    with torch.no_grad():
        for s in range(0, d.numel(), T):
            x = d[s:s + T].unsqueeze(0)
            logits, _ = gpt(x, x)   # targets given: logits at every position
            lp = F.log_softmax(logits[0].double(), dim=-1)
            for t in range(x.shape[1]):
                row = a[s + t]
                nxt = int(lp[t].argmax())
                bad += int(row["token"]) != int(d[s + t]) or int(row["next"]) != nxt
                dp = max(dp, abs(float(row["prob"]) - float(lp[t, nxt].exp())))
                if s + t + 1 < d.numel():
                    dl = max(dl, abs(float(row["logprob"]) - float(lp[t, d[s + t + 1]])))
                elif not numpy.isnan(row["logprob"]):
                    bad += 1
    print("predict: rows=%d next_mismatches=%d max_prob_diff=%.3g max_logprob_diff=%.3g"
          % (len(a), bad, dp, dl))
    return 1 if bad or dp > 2e-6 or dl > 2e-5 else 0


if __name__ == "__main__":
    sys.exit(main())
