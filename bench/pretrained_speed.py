#!/usr/bin/env python3
"""An imported pretrained model's speed on the CPU: biaskit against HF transformers, interleaved.

usage: pretrained_speed.py --gguf MODEL.gguf --checkpoint CKPT.safetensors --text FILE [--lengths 1024,8192]
                           [--train-length 1024] [--threads 2] [--repeats 2] [--hf-python PY] [--biaskit PATH]
                           [--workdir DIR]

Both engines get the same token ids (the first L of FILE through the model's own tokenizer, no special
tokens) and the same threads (OMP_NUM_THREADS and [run] threads for biaskit; torch.set_num_threads for
transformers). Evaluation at each length L: one forward of batch 1 x L tokens (the loss over them), timed
without loading the model: biaskit eval's tokens/s (its --json) against transformers' forward with
attn_implementation="sdpa" in float32 under torch.no_grad(). Training at --train-length: the wall time of a
step (forward, backward, AdamW) of batch 1: biaskit train --init CKPT (its metrics.jsonl tokens/s, the
fastest step after the first) against transformers' forward + backward + torch.optim.AdamW.step() (the
fastest after a warm-up step). Each measurement runs --repeats times, the engines interleaved, keeping the
best; the script prints a Markdown table.

The transformers side runs in --hf-python (an interpreter with a current torch and transformers, gguf;
bench/run.sh's .venv-bench), this script's own interpreter needs nothing but the standard library.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_worker(a):
    """Runs under --hf-python: prints one JSON line per measurement."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(a.threads)
    d, name = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    with open(a.text, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    if a.mode == "ids":
        sys.path.insert(0, HERE)
        from pretrained_parity import write_shard
        write_shard(a.shard, ids)
        print(json.dumps({"ids": len(ids), "torch": torch.__version__, "transformers": transformers.__version__}))
        return
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, torch_dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.lm_head.weight = model.model.embed_tokens.weight  # tied (the GGUF has no output.weight)
    L = a.length
    x = torch.tensor(ids[:L + 1])[None]
    if a.mode == "eval":
        model.eval()
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model(x[:, :-1], labels=x[:, :-1])
            dt = time.perf_counter() - t0
        print(json.dumps({"seconds": dt, "tokens_per_second": L / dt, "loss": out.loss.item()}))
    else:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        best = None
        for step in range(a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            out = model(x[:, :-1], labels=x[:, :-1])
            out.loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            if step > 0:
                best = dt if best is None else min(best, dt)
        print(json.dumps({"seconds": best, "tokens_per_second": L / best}))


def run_json(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--lengths", default="1024,8192")
    ap.add_argument("--train-length", type=int, default=1024)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--hf-python", default=os.path.join(HERE, "..", ".venv-bench", "bin", "python"))
    ap.add_argument("--biaskit", default=os.path.join(HERE, "..", "build", "biaskit"))
    ap.add_argument("--workdir", default=None)
    # the worker's own arguments
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--shard", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        hf_worker(a)
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    work = os.path.abspath(a.workdir or tempfile.mkdtemp(prefix="bk_speed_"))
    shard = os.path.join(work, "ids.bin")
    base = [a.hf_python, os.path.abspath(__file__), "--worker", "--gguf", a.gguf, "--checkpoint", a.checkpoint,
            "--text", a.text, "--threads", str(a.threads)]
    info = run_json(base + ["--mode", "ids", "--shard", shard], env)
    lengths = [int(x) for x in a.lengths.split(",")]
    need = max(lengths + [2 * a.train_length]) + 1
    if info["ids"] < need:
        sys.exit(f"pretrained_speed: {a.text} has {info['ids']} tokens, fewer than {need}")
    print(f"speed: torch {info['torch']}, transformers {info['transformers']}; {a.threads} threads; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; best of {a.repeats}", flush=True)
    exp = os.path.join(work, "train.toml")
    text = subprocess.run([a.biaskit, "import", a.gguf, "--experiment"], check=True, capture_output=True,
                          text=True).stdout
    text = text.replace("[train]\n", f"[train]\nbatch = 1\nsteps = {a.train_steps}\nwarmup = 1\nlr = 1e-5\n"
                                     "eval_every = 0\neval_batches = 1\nlog_every = 1\n", 1)
    text = text.replace("[run]\n", f"[run]\nthreads = {a.threads}\n", 1)
    text += f'\n[data]\nformat = "shards"\npaths = ["{shard}"]\nval_fraction = 0.2\n'
    with open(exp, "w") as f:
        f.write(text)
    best = {}

    def keep(key, tps):
        best[key] = max(best.get(key, 0.0), tps)

    for r in range(a.repeats):
        for L in lengths:
            got = run_json(base + ["--mode", "eval", "--length", str(L)], env)
            keep(("hf", "eval", L), got["tokens_per_second"])
            js = os.path.join(work, f"eval_{L}.json")
            subprocess.run([a.biaskit, "eval", a.checkpoint, "--data", shard, "--set", 'data.format="shards"',
                            "--set", f"run.threads={a.threads}", "--lengths", str(L), "--tokens", str(L + 1),
                            "--json", js, "--no-verify"], check=True, capture_output=True, env=env)
            with open(js) as f:
                keep(("biaskit", "eval", L), json.load(f)["results"][0]["tokens_per_second"])
            print(f"  repeat {r + 1}: eval {L}: transformers {got['tokens_per_second']:.0f} tokens/s, "
                  f"biaskit {best[('biaskit', 'eval', L)]:.0f} (best so far)", flush=True)
        L = a.train_length
        got = run_json(base + ["--mode", "train", "--length", str(L), "--steps", str(a.train_steps)], env)
        keep(("hf", "train", L), got["tokens_per_second"])
        run = os.path.join(work, f"run_{r}")
        subprocess.run([a.biaskit, "train", exp, "--init", a.checkpoint, "--set", f"train.length={L}", "--out", run,
                        "--plain"], check=True, capture_output=True, env=env)
        steps = []
        with open(os.path.join(run, "metrics.jsonl")) as f:
            for line in f:
                m = json.loads(line)
                if "tokens_per_s" in m and m.get("step", 0) > 1:
                    steps.append(m["tokens_per_s"])
        keep(("biaskit", "train", L), max(steps))
        print(f"  repeat {r + 1}: train step {L}: transformers {got['tokens_per_second']:.0f} tokens/s, biaskit "
              f"{max(steps):.0f}", flush=True)
    print("\n| measurement | transformers (SDPA) tokens/s | biaskit tokens/s | biaskit / transformers |")
    print("|---|---:|---:|---:|")
    for kind, L in [("eval", L) for L in lengths] + [("train", a.train_length)]:
        h, b = best[("hf", kind, L)], best[("biaskit", kind, L)]
        label = f"evaluation, 1 x {L}" if kind == "eval" else f"training step, 1 x {L}"
        print(f"| {label} | {h:.0f} | {b:.0f} | {b / h:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
