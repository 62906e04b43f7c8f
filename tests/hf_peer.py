#!/usr/bin/env python3
"""biaskit import of HF transformers directories against transformers itself (tests/test_hf_peer.sh).

usage: hf_peer.py CKPT_DUMP BIASKIT [--keep DIR]

Offline: tiny random models are made from configs with transformers (LlamaForCausalLM, MistralForCausalLM,
GPT2LMHeadModel; seeded; every norm weight and bias perturbed so that a misplaced one shows), saved with
save_pretrained (safetensors: one file, sharded with a small max_shard_size, in bf16 or f16), imported with
`biaskit import DIR --out CKPT`, and run by ckpt_dump (tests/ckpt_dump.c: one forward and backward in float32
on the CPU) on random ids. The reference is the saved directory loaded by transformers in float64 (a stored
bf16 or f16 value widens exactly). Compared per model:
  - every imported value, bit for bit (after the reference's own float32 rounding of the stored values);
  - logits and loss;
  - every parameter's gradient, HF names mapped onto the checkpoint's (q|k|v rows concatenated, gate|up
    stacked, GPT-2's Conv1D weights transposed, wpe as the ape term's table);
  - `biaskit eval` on a token shard of the same ids: its mean loss against transformers'.
Then (check_export) `biaskit export CKPT --hf DIR` of each imported checkpoint, loaded by transformers: no missing
or unexpected tensor, every parameter equal to the original's, and the logits against the original model's, both
in float32 (the limit: LIMIT_LOGITS). And (check_tokenizer_export) a llama directory with a tokenizer.json
(tests/data/bpe_tokenizer.json) imported and exported: transformers' AutoTokenizer loads the export's tokenizer
and encodes a text, special tokens on by default, to exactly the ids `biaskit tokenize CKPT FILE --ids` gives
(no BOS or EOS added by either), and decodes them back to the text.
Differences are max |engine - reference| / max |reference| over a tensor (for the loss |d| / |loss|). The engine
computes in float32 (unit roundoff 6e-8), so each difference is float32 rounding carried through two layers, a
few ulp of the largest value; the limits, 5e-6 for the logits and the losses and 2e-5 for a gradient (a sum over
every token, back through every layer), leave a margin of about ten over that, while a mapping error (a wrong
rope scaling, a misplaced row) moves the logits by orders of magnitude more. The differences are printed (the
values measured are in docs/pretrained.md). Exits 77 when transformers cannot be imported.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except Exception as e:  # noqa: BLE001 - any failure to import means the peer is absent
    print(f"hf_peer: skipped: cannot import transformers / torch / safetensors ({e})")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from pretrained_parity import write_shard  # noqa: E402  (the one writer of llm.c token shards)
LIMIT_LOGITS, LIMIT_LOSS, LIMIT_GRAD = 5e-6, 5e-6, 2e-5
B, T = 2, 12


def perturb(model, seed):
    """Norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2): not the constants the init leaves."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                noise = 0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype)
                p.copy_(1.0 + noise if name.endswith("weight") else noise)


def make_llama(d, seed, arch="llama", dtype=None, shard=None, **kw):
    torch.manual_seed(seed)
    base = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=128, rope_theta=10000.0,
                rms_norm_eps=1e-6, tie_word_embeddings=False, initializer_range=0.1)
    base.update(kw)
    if arch == "mistral":
        base.pop("head_dim")
        cfg = transformers.MistralConfig(sliding_window=None, **base)
        model = transformers.MistralForCausalLM(cfg)
    elif arch == "qwen3":  # LLaMA blocks with QK-norm (q_norm, k_norm: perturbed as norm weights)
        cfg = transformers.Qwen3Config(use_sliding_window=False, attention_bias=False, **base)
        model = transformers.Qwen3ForCausalLM(cfg)
    else:
        cfg = transformers.LlamaConfig(**base)
        model = transformers.LlamaForCausalLM(cfg)
    save(model, d, seed, dtype, shard)


def make_gpt2(d, seed, dtype=None, shard=None):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=300, n_embd=64, n_layer=2, n_head=4, n_positions=64, initializer_range=0.1,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    save(transformers.GPT2LMHeadModel(cfg), d, seed, dtype, shard)


def save(model, d, seed, dtype, shard):
    perturb(model, seed + 1000)
    if dtype is not None:
        model = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(d, safe_serialization=True, **kw)


def gpt2_layout(model, which):
    """As llama_layout for GPT-2: the Conv1D weights, stored (in, out), transposed."""
    pick = (lambda p: p.detach()) if which == "param" else (lambda p: p.grad)
    tr = model.transformer
    out = {"model.wte": pick(tr.wte.weight)}
    for key, attr, tr_ in [("ln1w", "ln_1.weight", 0), ("ln1b", "ln_1.bias", 0), ("qkvw", "attn.c_attn.weight", 1),
                           ("qkvb", "attn.c_attn.bias", 0), ("attprojw", "attn.c_proj.weight", 1),
                           ("attprojb", "attn.c_proj.bias", 0), ("ln2w", "ln_2.weight", 0), ("ln2b", "ln_2.bias", 0),
                           ("fcw", "mlp.c_fc.weight", 1), ("fcb", "mlp.c_fc.bias", 0),
                           ("fcprojw", "mlp.c_proj.weight", 1), ("fcprojb", "mlp.c_proj.bias", 0)]:
        rows = [pick(h.get_parameter(attr)) for h in tr.h]
        out["model." + key] = torch.stack([v.t() if tr_ else v for v in rows])
    out["model.lnfw"] = pick(tr.ln_f.weight)
    out["model.lnfb"] = pick(tr.ln_f.bias)
    out["term.ape.theta"] = pick(tr.wpe.weight).reshape(-1)
    return out


def llama_layout(model, which):
    """The reference's parameters (which = "param") or gradients as the checkpoint names them."""
    get = (lambda p: p.detach()) if which == "param" else (lambda p: p.grad)
    m = model.model
    ls = m.layers
    out = {"model.wte": get(m.embed_tokens.weight),
           "model.rms1w": torch.stack([get(l.input_layernorm.weight) for l in ls]),
           "model.qkvw": torch.stack([torch.cat([get(l.self_attn.q_proj.weight), get(l.self_attn.k_proj.weight),
                                                 get(l.self_attn.v_proj.weight)]) for l in ls]),
           "model.attprojw": torch.stack([get(l.self_attn.o_proj.weight) for l in ls]),
           "model.rms2w": torch.stack([get(l.post_attention_layernorm.weight) for l in ls]),
           "model.fcw": torch.stack([torch.cat([get(l.mlp.gate_proj.weight), get(l.mlp.up_proj.weight)]) for l in ls]),
           "model.fcprojw": torch.stack([get(l.mlp.down_proj.weight) for l in ls]),
           "model.rmsfw": get(m.norm.weight)}
    if not model.config.tie_word_embeddings:
        out["model.lmhead"] = get(model.lm_head.weight)
    if hasattr(ls[0].self_attn, "q_norm"):  # Qwen3's QK-norm
        out["model.qnormw"] = torch.stack([get(l.self_attn.q_norm.weight) for l in ls])
        out["model.knormw"] = torch.stack([get(l.self_attn.k_norm.weight) for l in ls])
    return out


def rel(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def check_case(name, d, gpt2, dump_bin, biaskit, work, seed):
    ckpt = os.path.join(work, name + ".ckpt.safetensors")
    r = subprocess.run([biaskit, "import", d, "--out", ckpt], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: biaskit import failed:\n{r.stdout}{r.stderr}")
        return False
    model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float64,
                                                              attn_implementation="eager").eval()
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T + 1), generator=g)
    ids_path = os.path.join(work, name + ".ids")
    with open(ids_path, "wb") as f:
        f.write(struct.pack(f"<{ids.numel()}i", *ids.reshape(-1).tolist()))
    out = os.path.join(work, name + ".dump.safetensors")
    r = subprocess.run([dump_bin, ckpt, ids_path, str(B), str(T), out], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: ckpt_dump failed:\n{r.stdout}{r.stderr}")
        return False
    dump = load_file(out)

    logits = model(ids[:, :T]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    layout = gpt2_layout if gpt2 else llama_layout
    params, grads = layout(model, "param"), layout(model, "grad")
    ok = True
    names = {k[len("grad."):] for k in dump if k.startswith("grad.")}
    if names != set(grads):
        print(f"{name}: the checkpoint's tensors {sorted(names)} are not the reference's {sorted(grads)}")
        return False
    placed = max(rel(dump["param." + k].reshape(v.shape), v.float()) for k, v in params.items())
    if placed != 0.0:
        print(f"{name}: imported values differ from the saved ones (max relative {placed:.3g})")
        ok = False
    d_logits = rel(dump["logits"], logits.detach())
    d_loss = abs(dump["loss"].double().item() - loss.item()) / abs(loss.item())
    worst, worst_name = 0.0, ""
    for k, v in grads.items():
        e = rel(dump["grad." + k].reshape(v.shape), v)
        if e > worst:
            worst, worst_name = e, k
    # biaskit eval on a shard of 3 chunks of T tokens: the same mean loss
    stream = torch.randint(0, V, (3 * T + 1,), generator=g).tolist()
    shard = os.path.join(work, name + ".shard.bin")
    write_shard(shard, stream)
    js = os.path.join(work, name + ".eval.json")
    r = subprocess.run([biaskit, "eval", ckpt, "--data", shard, "--set", 'data.format="shards"', "--lengths", str(T),
                        "--tokens", str(len(stream)), "--json", js], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: biaskit eval failed:\n{r.stdout}{r.stderr}")
        return False
    with open(js) as f:
        ev = json.load(f)["results"][0]
    with torch.no_grad():
        chunks = torch.tensor(stream[: 3 * T]).reshape(3, T)
        targets = torch.tensor(stream[1: 3 * T + 1]).reshape(3, T)
        ref_eval = torch.nn.functional.cross_entropy(model(chunks).logits.reshape(-1, V), targets.reshape(-1)).item()
    d_eval = abs(ev["loss"] - ref_eval) / abs(ref_eval)
    print(f"{name}: values placed exactly; logits {d_logits:.2e}, loss {d_loss:.2e} ({loss.item():.6f}), "
          f"gradients {worst:.2e} (worst {worst_name}, {len(grads)} tensors), eval loss {d_eval:.2e} "
          f"({ev['chunks']} chunks)")
    for what, value, limit in [("logits", d_logits, LIMIT_LOGITS), ("loss", d_loss, LIMIT_LOSS),
                               ("gradients", worst, LIMIT_GRAD), ("eval loss", d_eval, LIMIT_LOSS)]:
        if not value <= limit:
            print(f"{name}: {what}: {value:.3g} above the limit {limit:g}")
            ok = False
    return ok


def check_export(name, d, biaskit, work, seed):
    """biaskit export of the imported checkpoint: the directory transformers loads (no missing or unexpected
    tensor), every parameter equal to the original's in float32, and its logits against the original model's,
    both in float32 (a stored bf16 or f16 value widens exactly; max |difference| / max |reference|)."""
    ckpt = os.path.join(work, name + ".ckpt.safetensors")
    out = os.path.join(work, name + ".export")
    r = subprocess.run([biaskit, "export", ckpt, "--hf", out], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: biaskit export failed:\n{r.stdout}{r.stderr}")
        return False
    ref = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    exp, info = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager",
                                                                  output_loading_info=True)
    exp = exp.eval()
    ok = True
    if info["missing_keys"] or info["unexpected_keys"] or exp.dtype != torch.float32:
        print(f"{name}: the export loads with missing {info['missing_keys']}, unexpected {info['unexpected_keys']}, "
              f"dtype {exp.dtype}")
        ok = False
    ref_sd, exp_sd = ref.state_dict(), exp.state_dict()
    differ = [k for k, v in ref_sd.items() if k in exp_sd and not torch.equal(exp_sd[k], v)]
    if differ:
        print(f"{name}: exported tensors differ from the original: {differ[:4]}")
        ok = False
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, ref.config.vocab_size, (B, T), generator=g)
    with torch.no_grad():
        d_logits = rel(exp(ids).logits, ref(ids).logits)
    print(f"{name}: export: {type(exp).__name__} loads, {len(exp_sd)} tensors equal; logits against the original "
          f"in float32 {d_logits:.2e}")
    if not d_logits <= LIMIT_LOGITS:
        print(f"{name}: export logits: {d_logits:.3g} above the limit {LIMIT_LOGITS:g}")
        ok = False
    return ok


def check_tokenizer_export(biaskit, work):
    here = os.path.dirname(os.path.abspath(__file__))
    d, ckpt, out = (os.path.join(work, "tok" + x) for x in ("", ".ckpt.safetensors", ".export"))
    make_llama(d, 8, vocab_size=758)  # the tokenizer's ids 0 .. 757
    shutil.copy(os.path.join(here, "data", "bpe_tokenizer.json"), os.path.join(d, "tokenizer.json"))
    text_path = os.path.join(work, "tok.txt")
    with open(os.path.join(here, "..", "README.md"), encoding="utf-8") as f:
        text = f.read()[:20000] + "\n  naïve café 日本語 🙂\t\t end"
    with open(text_path, "w", encoding="utf-8") as f:
        f.write(text)
    for cmd in ([biaskit, "import", d, "--out", ckpt], [biaskit, "export", ckpt, "--hf", out]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"tokenizer export: {' '.join(cmd[1:2])} failed:\n{r.stdout}{r.stderr}")
            return False
    r = subprocess.run([biaskit, "tokenize", ckpt, text_path, "--ids"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"tokenizer export: biaskit tokenize failed:\n{r.stdout}{r.stderr}")
        return False
    ours = [int(x) for x in r.stdout.split()]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    theirs = tok(text).input_ids
    back = tok.decode(theirs)
    print(f"tokenizer export: {type(tok).__name__} loads; {len(theirs)} ids of {len(text)} characters, "
          f"{'the same' if ours == theirs else 'DIFFERENT'} ids as biaskit tokenize; decodes "
          f"{'to the text' if back == text else 'to another text'}")
    return ours == theirs and back == text


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    dump_bin, biaskit = sys.argv[1], sys.argv[2]
    keep = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--keep" else None
    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    work = keep or tempfile.mkdtemp(prefix="bk_hf_peer_")
    os.makedirs(work, exist_ok=True)
    print(f"hf_peer: transformers {transformers.__version__}, torch {torch.__version__}; {B} x {T} tokens")
    cases = [
        # name, gpt2, maker
        ("llama_gqa_untied", False, lambda d: make_llama(d, 1)),
        ("llama_tied_wide_heads_sharded", False,
         lambda d: make_llama(d, 2, head_dim=24, num_key_value_heads=1, tie_word_embeddings=True, shard="40KB")),
        ("llama_bf16_linear", False,
         lambda d: make_llama(d, 3, dtype=torch.bfloat16, rope_scaling={"type": "linear", "factor": 2.0})),
        ("llama_yarn", False,
         lambda d: make_llama(d, 4, max_position_embeddings=32, rope_theta=500.0,
                              rope_scaling={"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.2,
                                            "beta_fast": 16.0, "beta_slow": 1.0})),
        ("mistral_f16", False, lambda d: make_llama(d, 5, arch="mistral", dtype=torch.float16)),
        ("qwen3_qk_norm_yarn", False,
         lambda d: make_llama(d, 9, arch="qwen3", num_key_value_heads=1, tie_word_embeddings=True,
                              rope_scaling={"rope_type": "yarn", "factor": 2.0})),
        ("gpt2", True, lambda d: make_gpt2(d, 6)),
        ("gpt2_f16_sharded", True, lambda d: make_gpt2(d, 7, dtype=torch.float16, shard="30KB")),
    ]
    if not hasattr(transformers, "Qwen3ForCausalLM"):
        print(f"hf_peer: the qwen3 case is left out: transformers {transformers.__version__} has no Qwen3ForCausalLM "
              f"(4.51 and later have it)")
        cases = [c for c in cases if not c[0].startswith("qwen3")]
    ok = True
    try:
        for i, (name, gpt2, make) in enumerate(cases):
            d = os.path.join(work, name)
            make(d)
            if name.endswith("sharded") and not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                print(f"{name}: save_pretrained did not shard")
                ok = False
            ok = check_case(name, d, gpt2, dump_bin, biaskit, work, 100 + i) and ok
            ok = check_export(name, d, biaskit, work, 200 + i) and ok
        ok = check_tokenizer_export(biaskit, work) and ok
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print("hf_peer: " + ("all agree" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
