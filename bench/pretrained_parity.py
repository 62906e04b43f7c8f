#!/usr/bin/env python3
"""The imported checkpoint of a GGUF model against HF transformers on the same token ids.

usage: pretrained_parity.py --gguf MODEL.gguf --checkpoint CKPT.safetensors --text FILE [--lengths 1024,4096]
                            [--biaskit PATH] [--tokens N] [--workdir DIR]

HF transformers loads the GGUF file (from_pretrained(dir, gguf_file=...), float32, dequantized by gguf-py) and
tokenizes FILE with the model's own tokenizer (no special tokens added). The ids are written as an llm.c
token shard; `biaskit eval CKPT --data SHARD --set data.format="shards" --lengths L` scores the same
non-overlapping chunks of L tokens. For each length the script prints both mean losses (every token of
every chunk scored, as biaskit eval does), their relative difference, and the top-1 agreement: the share
of positions where both engines' most likely next token is the same (biaskit eval --predictions against
transformers' argmax); it exits 1 when the difference is above --rel (default 1e-4) or the agreement below
--agree (default 0.999).

Needs torch, transformers (with gguf) and tokenizers; the checkpoint comes from `biaskit import MODEL.gguf`.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

SHARD_MAGIC = 20240520  # llm.c's token shard: 256 int32 of header (magic, version 1, count), then uint16 ids


def write_shard(path, ids):
    header = [0] * 256
    header[0], header[1], header[2] = SHARD_MAGIC, 1, len(ids)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(ids)}H", *ids))


def hf_losses(model, ids, length, torch):
    """Mean next-token loss over the non-overlapping chunks of `length` tokens (each chunk's first token
    predicted from nothing is not scored: as biaskit, a chunk of L + 1 ids gives L targets), and the most
    likely next token at every position of every chunk."""
    total, count, top1 = 0.0, 0, []
    step = length
    n_chunks = (len(ids) - 1) // step
    with torch.no_grad():
        for c in range(n_chunks):
            chunk = torch.tensor(ids[c * step: c * step + length + 1])[None]
            logits = model(chunk[:, :-1]).logits.float()
            loss = torch.nn.functional.cross_entropy(logits[0], chunk[0, 1:], reduction="sum")
            total += loss.item()
            count += length
            top1 += logits[0].argmax(dim=-1).tolist()
    return total / count, n_chunks, top1


def biaskit_top1(path):
    """The predicted column of `biaskit eval --predictions` (chunk by chunk, position by position)."""
    with open(path) as f:
        next(f)
        return [int(line.rsplit(",", 1)[1]) for line in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--lengths", default="1024")
    ap.add_argument("--biaskit", default=os.path.join(os.path.dirname(__file__), "..", "build", "biaskit"))
    ap.add_argument("--tokens", type=int, default=8 * 1024 + 1)
    ap.add_argument("--rel", type=float, default=1e-4)
    ap.add_argument("--agree", type=float, default=0.999, help="the least top-1 agreement (default 0.999)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    d, name = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32).eval()
    import gguf as gguf_py
    if not any(t.name == "output.weight" for t in gguf_py.GGUFReader(a.gguf).tensors):
        # a tied model (no output.weight): some transformers versions leave lm_head freshly initialised
        model.lm_head.weight = model.model.embed_tokens.weight
    with open(a.text, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"][: a.tokens]
    work = a.workdir or tempfile.mkdtemp(prefix="bk_parity_")
    shard = os.path.join(work, "ids.bin")
    write_shard(shard, ids)
    print(f"parity: transformers {transformers.__version__}, torch {torch.__version__}; {len(ids)} ids of "
          f"{a.text} ({os.path.basename(a.gguf)})")
    worst, worst_agree = 0.0, 1.0
    for length in (int(x) for x in a.lengths.split(",")):
        ref, chunks, hf_top1 = hf_losses(model, ids, length, torch)
        out = os.path.join(work, f"eval_{length}.json")
        pred = os.path.join(work, f"predictions_{length}.csv")
        subprocess.run([a.biaskit, "eval", a.checkpoint, "--data", shard, "--set", 'data.format="shards"',
                        "--lengths", str(length), "--tokens", str(len(ids)), "--json", out, "--predictions", pred,
                        "--no-verify"], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            row = json.load(f)["results"][0]
        bk_top1 = biaskit_top1(pred)
        same = sum(x == y for x, y in zip(hf_top1, bk_top1))
        agree = same / len(hf_top1) if len(bk_top1) == len(hf_top1) else 0.0
        worst_agree = min(worst_agree, agree)
        rel = abs(row["loss"] - ref) / abs(ref)
        worst = max(worst, rel)
        print(f"  length {length:6d}: {chunks} chunks; transformers loss {ref:.6f}, biaskit {row['loss']:.6f} "
              f"({row['chunks']} chunks); relative difference {rel:.2e}; top-1 agreement {same}/{len(hf_top1)} "
              f"= {100 * agree:.3f}%")
    print(f"parity: largest relative difference {worst:.2e} (limit {a.rel:g}); lowest top-1 agreement "
          f"{100 * worst_agree:.3f}% (limit {100 * a.agree:g}%)")
    return 0 if worst <= a.rel and worst_agree >= a.agree else 1


if __name__ == "__main__":
    sys.exit(main())
