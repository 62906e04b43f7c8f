"""biaskit tokenize against HF tokenizers (run by tests/test_bpe_peer.sh).

Trains, offline with tokenizers' BpeTrainer, one byte-level BPE tokenizer of each pre-tokenizer form biaskit
supports (GPT-2's ByteLevel with and without the prefix space, SmolLM2's Digits + ByteLevel, Llama 3's Split +
ByteLevel without regex and ignore_merges, and a Sequence of every Split behaviour), with special and added
tokens, on text from the repository. Each then encodes a different slice of the repository's sources and docs
plus generated Unicode, emoji and whitespace-heavy text, with HF (add_special_tokens=False) and with
`biaskit tokenize --ids`: the ids must be identical, `--decode` must give HF's decode (and the text itself
where the pre-tokenizer adds nothing), and `--dump-json`'s tokenizer.json loaded into HF must encode alike.
The GGUF forms (tokenizer.ggml.pre gpt2, smollm, llama3) are written with gguf-py, when it imports, and
must encode alike too.

usage: bpe_peer.py <biaskit binary> <source dir>
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

BIASKIT, SRC = sys.argv[1], sys.argv[2]
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
# BK_BPE_PEER_SCALE (default 1) shrinks the text: the sanitizer build sets it (tests/CMakeLists.txt), where
# the instrumented tokenizer is some twenty times slower
SCALE = float(os.environ.get("BK_BPE_PEER_SCALE", "1"))
SLICE = int(1_100_000 * SCALE)      # repository bytes per tokenizer
GENERATED = int(220_000 * SCALE)    # generated characters per tokenizer


def repo_text():
    parts = []
    for top in ("core", "docs", "plugins", "sdk", "tests", "scripts", "bench", "fuzz", "examples"):
        for root, dirs, files in os.walk(os.path.join(SRC, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cu", ".cpp", ".md", ".py", ".sh", ".toml", ".txt")):
                    try:
                        with open(os.path.join(root, f), encoding="utf-8") as fh:
                            parts.append(fh.read())
                    except (UnicodeDecodeError, OSError):
                        pass
    parts.append(open(os.path.join(SRC, "README.md"), encoding="utf-8").read())
    return "".join(parts)


WORDS = [
    "naïve", "café", "Ünïcödé", "façade", "smørrebrød", "Ærø", "straße", "ΣΊΣΥΦΟΣ", "λόγος", "Москва", "привет",
    "مرحبا", "שלום", "नमस्ते", "हिन्दी", "日本語", "東京都", "中文文本", "한국어", "텍스트", "ภาษาไทย", "ქართული",
    "Ελληνικά", "ǅungla", "ﬁnance", "ſtraße", "K", "e\u0301", "a\u0308\u0304", "Z\u0351\u0332", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "don't", "I'M", "we'll", "They'Ve", "she'D", "it's", "YOU'RE", "o'clock", "’tis", "rock'n'roll", "'S",
    "1234567", "3.14159", "1,000,000", "٠١٢٣٤", "१२३", "１２３", "Ⅻ", "½", "²³", "0x7fff", "1e-9",
    "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "✨", "🏳️‍🌈", "🤖", "𓀀", "∑", "→", "≠", "™", "©",
    "<|endoftext|>", "<|im_start|>", "<|begin_of_text|>", "<tool>", "<|end", "endoftext|>", "<<|im_start|>>",
    "int", "main(void)", "{", "}", "->", "&&", "||", "!=", "#include", "/*", "*/", "\\n", "\"quoted\"", "“curly”",
]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t\n", "\u00a0", "\u3000", "\u2009", "\u2028",
          "\u2029", "\u0085", "\u180e", "\u200b", "\u000b", "\u000c", "    ", " " * 17, "\n" * 5, "\x00", "\x1b"]


def generated(rng, n):
    out, size = [], 0
    while size < n:
        r = rng.random()
        if r < 0.55:
            w = rng.choice(WORDS)
        elif r < 0.65:
            w = "".join(chr(rng.randrange(0x20, 0x7f)) for _ in range(rng.randrange(1, 12)))
        elif r < 0.72:
            w = "".join(chr(rng.choice([rng.randrange(0xa0, 0x2000), rng.randrange(0x3040, 0x9fff),
                                        rng.randrange(0xac00, 0xd7a3), rng.randrange(0x1f300, 0x1fa6f)]))
                        for _ in range(rng.randrange(1, 6)))
        else:
            w = rng.choice(SPACES)
        out.append(w)
        if rng.random() < 0.6:
            out.append(" ")
        size += len(w) + 1
    return "".join(out)


def train(pre, text, specials=(), vocab=2500):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=list(specials), show_progress=False)
    t.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], tr)
    return t


def with_model_flag(t, key, value):
    j = json.loads(t.to_str())
    j["model"][key] = value
    return Tokenizer.from_str(json.dumps(j))


def run(args, **kw):
    p = subprocess.run([BIASKIT, "tokenize"] + args, capture_output=True, **kw)
    if p.returncode != 0:
        raise SystemExit("biaskit tokenize %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr.decode()))
    return p.stdout


def write_gguf(t, pre, path):
    import gguf
    vocab = t.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for s, i in vocab.items():
        tokens[i] = s
    added = {a.content: a for a in t.get_added_tokens_decoder().values()}
    types = [(3 if added[s].special else 4) if s in added else 1 for s in tokens]
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(t.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def first_mismatch(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    t0 = time.time()
    rng = random.Random(20261203)
    corpus = repo_text()
    train_text = corpus[:600_000] + generated(rng, 100_000)
    L3 = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    forms = []
    forms.append(("gpt2", train(pre_tokenizers.ByteLevel(add_prefix_space=False), train_text, ["<|endoftext|>"]),
                  "gpt2", True))
    t = train(pre_tokenizers.ByteLevel(add_prefix_space=True), train_text, ["<|endoftext|>"])
    t.add_tokens(["<tool>", "foo bar"])
    forms.append(("gpt2-prefix-space", t, None, False))
    forms.append(("smollm", train(pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                           pre_tokenizers.ByteLevel(add_prefix_space=False)]),
                                  train_text, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]), "smollm", True))
    t = with_model_flag(train(L3, train_text), "ignore_merges", True)
    t.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    t.add_tokens(["<tool>"])
    forms.append(("llama3", t, "llama3", True))
    mixed = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\n\n", "merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[A-Z][a-z]+"), "merged_with_next"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex(r"\p{P}"), "contiguous"),
        pre_tokenizers.Split(Regex(r"[\p{L}\p{N}_]+"), "isolated", invert=True),
        pre_tokenizers.Split(Regex(r"^ +|\d+$"), "removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    forms.append(("split-behaviours", train(mixed, train_text, ["<|endoftext|>"]), None, False))  # Removed: no round trip
    print("trained %d tokenizers in %.1f s" % (len(forms), time.time() - t0))

    try:
        import gguf  # noqa: F401
        have_gguf = True
    except ImportError:
        have_gguf = False
        print("gguf-py does not import: the GGUF forms are not checked")

    total_bytes = total_tokens = mismatches = 0
    with tempfile.TemporaryDirectory(prefix="bk_bpe_peer_") as d:
        for k, (name, tok, gguf_pre, round_trip) in enumerate(forms):
            start = 600_000 + k * SLICE
            text = corpus[start:start + SLICE] + generated(rng, GENERATED)
            if len(corpus) < start + SLICE:
                text += generated(rng, start + SLICE - len(corpus))
            tj, tf, idf = (os.path.join(d, name + x) for x in (".json", ".txt", ".ids"))
            tok.save(tj)
            data = text.encode("utf-8")
            with open(tf, "wb") as f:
                f.write(data)
            ref = tok.encode(text, add_special_tokens=False).ids
            got = [int(x) for x in run([tj, tf, "--ids"]).split()]
            bad = 0
            if got != ref:
                i = first_mismatch(got, ref)
                bad += 1
                print("%s: MISMATCH at token %d of %d (HF %d): HF %r, biaskit %r" % (
                    name, i, len(got), len(ref), [tok.id_to_token(x) for x in ref[max(0, i - 3):i + 4]],
                    [tok.id_to_token(x) for x in got[max(0, i - 3):i + 4] if 0 <= x < tok.get_vocab_size()]))
            with open(idf, "w") as f:
                f.write(" ".join(map(str, ref)) + "\n")
            back = run([tj, idf, "--decode"])
            hf_back = tok.decode(ref, skip_special_tokens=False)
            if back.decode("utf-8", errors="replace") != hf_back:
                bad += 1
                print("%s: --decode differs from HF's decode" % name)
            if round_trip and back != data:
                bad += 1
                print("%s: --decode does not give the text back" % name)
            dump = os.path.join(d, name + ".dump.json")
            run([tj, "--dump-json", "--out", dump])
            again = Tokenizer.from_file(dump).encode(text, add_special_tokens=False).ids
            if again != ref:
                bad += 1
                print("%s: HF on --dump-json's tokenizer.json differs at token %d" % (name, first_mismatch(again, ref)))
            if run([dump, tf, "--ids"]).split() != run([tj, tf, "--ids"]).split():
                bad += 1
                print("%s: biaskit on --dump-json's tokenizer.json differs" % name)
            extra = ""
            if gguf_pre and have_gguf:
                gp = os.path.join(d, name + ".gguf")
                write_gguf(tok, gguf_pre, gp)
                gg = [int(x) for x in run([gp, tf, "--ids"]).split()]
                if gg != ref:
                    bad += 1
                    print("%s: the GGUF (pre %s) differs at token %d" % (name, gguf_pre, first_mismatch(gg, ref)))
                extra = ", GGUF pre %s" % gguf_pre
            print("%-18s %9d bytes %8d tokens  %s%s" % (name, len(data), len(ref), "ok" if not bad else "FAILED",
                                                      extra))
            total_bytes += len(data)
            total_tokens += len(ref)
            mismatches += bad
    print("bpe peer: %d bytes, %d tokens, %d mismatches, %.1f s" % (total_bytes, total_tokens, mismatches,
                                                                    time.time() - t0))
    assert total_bytes >= 5_000_000 * SCALE, "expected at least %d bytes of text" % (5_000_000 * SCALE)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
