#!/usr/bin/env python3
"""An imported pretrained model evaluated beyond its context with rotary scalings set at evaluation time.

usage: pretrained_long.py --gguf MODEL.gguf --checkpoint CKPT.safetensors --text FILE [FILE...]
                          [--lengths 4096,8192,16384] [--variants none,pi:2,ntk:2,yarn:2,yarn:0]
                          [--tokens N] [--biaskit PATH] [--workdir DIR] [--markdown]

The text files are joined (in the order given) and tokenized with the model's own tokenizer (HF tokenizers
through transformers, from the GGUF file; no special tokens added); the first N ids are written as an llm.c
token shard. For every variant, `biaskit eval CKPT --data SHARD --set data.format="shards" --lengths ...`
runs in a process of its own with the rope term's scaling set by --set (`none`: plain RoPE; `pi:2`,
`ntk:2`, `yarn:2`: that scaling with factor 2; `yarn:0`: YaRN with factor 0, dynamic: s = max(1, T / the
model's context)) or a training-free extension of plain RoPE (`self-extend:W:G`: Self-Extend with
neighbour window W and group G; `rerope:W`: ReRoPE, `rerope:W:K` leaky ReRoPE; `string:S:W`: STRING with
shift S and local window W). The script prints, for each variant and length, the mean loss over the non-overlapping
chunks, the tokens/s of the forwards and the process's peak resident memory (both from eval's --json).

Needs transformers (with gguf) and tokenizers for the tokenizer only; the checkpoint comes from `biaskit
import MODEL.gguf` (scripts/models.py smollm2).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pretrained_parity import write_shard  # noqa: E402  (the one writer of llm.c shards here)


def variant_sets(v):
    """The --set assignments of a variant: none; SCALING:FACTOR (pi, ntk, yarn; factor 0 dynamic); or a
    training-free extension on plain RoPE: self-extend:W:G, rerope:W (leaky: rerope:W:K), string:S:W."""
    if v == "none":
        return ['term.0.scaling="none"']
    kind, *args = v.split(":")
    if kind == "self-extend":
        w, g = args
        return ['term.0.scaling="none"', 'term.0.extend="self-extend"', f"term.0.window={w}", f"term.0.group={g}"]
    if kind == "rerope":
        sets = ['term.0.scaling="none"', 'term.0.extend="rerope"', f"term.0.window={args[0]}"]
        return sets + ([f"term.0.leaky={args[1]}"] if len(args) > 1 else [])
    if kind == "string":
        shift, w = args
        return ['term.0.scaling="none"', 'term.0.extend="string"', f"term.0.shift={shift}", f"term.0.window={w}"]
    (factor,) = args
    return [f'term.0.scaling="{kind}"', f"term.0.factor={factor}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--text", nargs="+", required=True)
    ap.add_argument("--lengths", default="4096,8192,16384")
    ap.add_argument("--variants", default="none,pi:2,ntk:2,yarn:2,yarn:0")
    ap.add_argument("--tokens", type=int, default=2 * 16384 + 1)
    ap.add_argument("--biaskit", default=os.path.join(os.path.dirname(__file__), "..", "build", "biaskit"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    a = ap.parse_args()
    from transformers import AutoTokenizer

    d, name = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    text = ""
    for path in a.text:
        with open(path, encoding="utf-8") as f:
            text += f.read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) < a.tokens:
        sys.exit(f"pretrained_long: the text has {len(ids)} tokens, fewer than --tokens {a.tokens}")
    ids = ids[: a.tokens]
    work = a.workdir or tempfile.mkdtemp(prefix="bk_long_")
    shard = os.path.join(work, "ids.bin")
    write_shard(shard, ids)
    print(f"long: {len(ids)} ids of {len(a.text)} file(s), {len(text.encode())} bytes; lengths {a.lengths}")
    rows = []
    for v in a.variants.split(","):
        out = os.path.join(work, f"eval_{v.replace(':', '_')}.json")
        cmd = [a.biaskit, "eval", a.checkpoint, "--data", shard, "--set", 'data.format="shards"', "--lengths",
               a.lengths, "--tokens", str(len(ids)), "--json", out, "--no-verify"]
        for s in variant_sets(v):
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            got = json.load(f)
        for r in got["results"]:
            rows.append((v, r["length"], r["chunks"], r["loss"], r["tokens_per_second"], got["peak_rss_bytes"]))
            print(f"  {v:8s} length {r['length']:6d}: {r['chunks']} chunks, loss {r['loss']:.4f}, "
                  f"{r['tokens_per_second']:.0f} tokens/s; peak {got['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    if a.markdown:
        lengths = sorted({r[1] for r in rows})
        print("\n| variant | " + " | ".join(f"loss at {L}" for L in lengths) + " | peak memory |")
        print("|---|" + "---|" * len(lengths) + "---|")
        for v in a.variants.split(","):
            mine = {r[1]: r for r in rows if r[0] == v}
            peak = max(r[5] for r in mine.values())
            print(f"| {v} | " + " | ".join(f"{mine[L][3]:.4f}" for L in lengths) + f" | {peak / 2**20:.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
