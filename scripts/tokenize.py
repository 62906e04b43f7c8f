#!/usr/bin/env python3
"""Tokenize a corpus made by scripts/corpus.py into llm.c .bin shards that biaskit reads with
[data] format = "shards".

usage: scripts/tokenize.py CORPUS_DIR [--vocab N] [--tokenizer tokenizer.json] [--bytes] [--out DIR]

  --vocab N            train a byte-level BPE tokenizer of N tokens (default 8192) on the train split
  --tokenizer FILE     use this Hugging Face tokenizer.json instead of training one
  --bytes              no tokenizer: one token per byte (vocab 256), the same stream as format = "text"

Training and loading use Hugging Face `tokenizers` (PyPI). When python3 cannot import it, a virtual
environment is made on first use in .venv-tokenize/ at the repository root (--venv), `tokenizers`
is pip-installed there, and the script runs again inside it (--no-install forbids that). --bytes
needs nothing but the standard library.

Output (default CORPUS_DIR/bpe<N>, CORPUS_DIR/tok-<sha256 of the tokenizer.json, 12 digits> or
CORPUS_DIR/bytes): train/, val/, test/ with <split>_000000.bin ... (llm.c format: 256 little-endian
int32 header [magic 20240520, version 1, token count N, 0...], then N little-endian uint16 tokens),
tokenizer.json, and manifest.json. Each document is preceded by the end-of-text token (llm.c's
convention) when the tokenizer has "<|endoftext|>". Errors are one line on stderr, exit status 1.
"""
import os
import sys

# This file is named like the standard library's `tokenize` module (which linecache, traceback and
# inspect import): keep its own directory off the module search path.
_HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _HERE:
    del sys.path[0]

import argparse  # noqa: E402
import array  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

SCRIPT_VERSION = "1.0.0"
TOKENIZERS_REQUIREMENT = "tokenizers==0.22.1"
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
MAX_VOCAB = 65536               # ids are stored as uint16
EOT = "<|endoftext|>"
SPLITS = ("train", "val", "test")
REPO = os.path.dirname(_HERE)
VENV_ENV = "BIASKIT_TOKENIZE_IN_VENV"


class TokError(Exception):
    pass


def fail(msg):
    raise TokError(msg)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# llm.c shards (standard library only)


def write_shard(path, tokens):
    """tokens: an array('H') (or a sequence of ints < 65536). Writes header + tokens, little-endian."""
    toks = tokens if isinstance(tokens, array.array) and tokens.typecode == "H" else array.array("H", tokens)
    if len(toks) >= 2**31:
        fail(f"{path}: {len(toks)} tokens do not fit the header's int32 count")
    header = array.array("i", [SHARD_MAGIC, SHARD_VERSION, len(toks)] + [0] * (HEADER_INTS - 3))
    if sys.byteorder != "little":
        header.byteswap()
        toks = array.array("H", toks)
        toks.byteswap()
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        header.tofile(f)
        toks.tofile(f)
    os.replace(tmp, path)


def read_shard(path):
    """The tokens of one shard (array('H')), the header checked as biaskit checks it."""
    with open(path, "rb") as f:
        header = array.array("i")
        try:
            header.fromfile(f, HEADER_INTS)
        except EOFError:
            fail(f"{path}: shorter than the 1024-byte header")
        if sys.byteorder != "little":
            header.byteswap()
        if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
            fail(f"{path}: bad magic/version {header[0]}/{header[1]}")
        toks = array.array("H")
        toks.frombytes(f.read())
        if sys.byteorder != "little":
            toks.byteswap()
    if len(toks) != header[2]:
        fail(f"{path}: header says {header[2]} tokens, file has {len(toks)}")
    return toks


class ShardWriter:
    """Writes <dir>/<split>_000000.bin, _000001.bin, ... of at most shard_tokens tokens each."""

    def __init__(self, directory, split, shard_tokens):
        self.dir, self.split, self.limit = directory, split, shard_tokens
        self.buf = array.array("H")
        self.shards = []
        os.makedirs(directory, exist_ok=True)

    def add(self, ids):
        self.buf.extend(ids)
        while len(self.buf) >= self.limit:
            self._flush(self.buf[:self.limit])
            self.buf = self.buf[self.limit:]

    def _flush(self, toks):
        path = os.path.join(self.dir, f"{self.split}_{len(self.shards):06d}.bin")
        write_shard(path, toks)
        self.shards.append({"file": os.path.relpath(path, os.path.dirname(self.dir)), "tokens": len(toks),
                            "sha256": sha256_file(path)})

    def close(self):
        if self.buf or not self.shards:
            self._flush(self.buf)
            self.buf = array.array("H")
        return self.shards


# ---------------------------------------------------------------------------------------------
# The corpus


def read_documents(corpus, split):
    """The documents of one split, in file order, from <split>.txt and <split>.idx."""
    txt, idx = os.path.join(corpus, f"{split}.txt"), os.path.join(corpus, f"{split}.idx")
    for p in (txt, idx):
        if not os.path.isfile(p):
            fail(f"corpus '{corpus}': {os.path.basename(p)} is missing (make the corpus with scripts/corpus.py)")
    with open(txt, "rb") as f:
        data = f.read()
    docs = []
    with open(idx, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            try:
                off, length = int(parts[0]), int(parts[1])
            except (ValueError, IndexError):
                fail(f"{idx}:{n}: expected 'offset<TAB>length<TAB>key'")
            if off < 0 or length < 0 or off + length > len(data):
                fail(f"{idx}:{n}: document [{off}, {off + length}) is outside {txt} ({len(data)} bytes)")
            docs.append(data[off:off + length].decode("utf-8"))
    return docs, data


# ---------------------------------------------------------------------------------------------
# tokenizers, in a virtual environment when needed


def ensure_tokenizers(args, argv):
    try:
        import tokenizers  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get(VENV_ENV):
        fail(f"'tokenizers' is not importable in {sys.executable} (the virtual environment {args.venv} is broken? "
             "remove it and run again)")
    if args.no_install:
        fail(f"the Python package 'tokenizers' is not importable by {sys.executable} and --no-install was given "
             f"(pip install '{TOKENIZERS_REQUIREMENT}', or run without --no-install to use {args.venv})")
    py = os.path.join(args.venv, "bin", "python")
    if not os.path.exists(py):
        print(f"tokenize.py: creating the virtual environment {args.venv}", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "venv", args.venv])
        if r.returncode != 0:
            fail(f"python3 -m venv {args.venv} failed (exit {r.returncode}; on Debian: apt-get install python3-venv)")
    r = subprocess.run([py, "-c", "import tokenizers"], capture_output=True)
    if r.returncode != 0:
        print(f"tokenize.py: pip install {TOKENIZERS_REQUIREMENT} into {args.venv}", file=sys.stderr)
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            TOKENIZERS_REQUIREMENT])
        if r.returncode != 0:
            fail(f"pip install {TOKENIZERS_REQUIREMENT} into {args.venv} failed (exit {r.returncode})")
    env = dict(os.environ, **{VENV_ENV: "1"})
    r = subprocess.run([py, os.path.abspath(__file__)] + argv, env=env)
    sys.exit(r.returncode)


def train_bpe(docs, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    return tok


# ---------------------------------------------------------------------------------------------


def main(argv):
    ap = argparse.ArgumentParser(
        prog="tokenize.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tokenize a scripts/corpus.py corpus into llm.c .bin shards for biaskit "
                    "([data] format = \"shards\"): train a byte-level BPE tokenizer on its train split, "
                    "load a tokenizer.json, or use bytes.",
        epilog="examples:\n  scripts/tokenize.py /work/corpora/math --vocab 8192\n"
               "  scripts/tokenize.py /work/corpora/prose --tokenizer my/tokenizer.json\n"
               "  scripts/tokenize.py /work/corpora/code --bytes\ndocs/corpora.md says more.")
    ap.add_argument("corpus", help="a directory made by scripts/corpus.py")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--vocab", type=int, help="train a byte-level BPE of this many tokens (<= 65536; default 8192)")
    g.add_argument("--tokenizer", metavar="FILE", help="a Hugging Face tokenizer.json to use instead of training")
    g.add_argument("--bytes", action="store_true", help="one token per byte (vocab 256); needs no package")
    ap.add_argument("--out", help="output directory (default CORPUS/bpe<N>, CORPUS/tok-<hash> or CORPUS/bytes)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000,
                    help="tokens per shard at most (default 100,000,000 as llm.c)")
    ap.add_argument("--venv", default=os.path.join(REPO, ".venv-tokenize"),
                    help="virtual environment for 'tokenizers' when python3 lacks it (default .venv-tokenize/ at "
                         "the repository root)")
    ap.add_argument("--no-install", action="store_true",
                    help="never create the virtual environment or pip-install: fail when 'tokenizers' is missing")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    args = ap.parse_args(argv)
    log = (lambda m: None) if args.quiet else (lambda m: print(f"tokenize.py: {m}", file=sys.stderr))

    corpus = args.corpus
    cm = os.path.join(corpus, "manifest.json")
    if not os.path.isfile(cm):
        fail(f"corpus '{corpus}': no manifest.json (make the corpus with scripts/corpus.py)")
    try:
        with open(cm, encoding="utf-8") as f:
            corpus_manifest = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{cm}: {e}")
    if args.shard_tokens < 1 or args.shard_tokens >= 2**31:
        fail("--shard-tokens must be in [1, 2^31)")
    if args.vocab is not None and not 257 <= args.vocab <= MAX_VOCAB:
        fail(f"--vocab {args.vocab}: must be in [257, {MAX_VOCAB}] (256 bytes + the end-of-text token at least; "
             "token ids are stored as uint16)")
    if args.tokenizer and not os.path.isfile(args.tokenizer):
        fail(f"--tokenizer '{args.tokenizer}': no such file")

    mode = "bytes" if args.bytes else ("file" if args.tokenizer else "bpe")
    vocab_arg = args.vocab or 8192
    if not args.bytes:
        ensure_tokenizers(args, argv)   # returns only when `tokenizers` imports here

    docs = {s: read_documents(corpus, s) for s in SPLITS}
    info = {"mode": mode}
    if mode == "bytes":
        out = args.out or os.path.join(corpus, "bytes")
        model_vocab, eot = 256, None
    else:
        import tokenizers
        from tokenizers import Tokenizer
        info["tokenizers_version"] = tokenizers.__version__
        if mode == "bpe":
            out = args.out or os.path.join(corpus, f"bpe{vocab_arg}")
            log(f"training a byte-level BPE of {vocab_arg} tokens on {len(docs['train'][0])} train documents")
            tok = train_bpe(docs["train"][0], vocab_arg)
            info.update(trained_on="train split", requested_vocab=vocab_arg)
        else:
            try:
                tok = Tokenizer.from_file(args.tokenizer)
            except Exception as e:  # tokenizers raises its own exception type
                fail(f"--tokenizer '{args.tokenizer}': cannot load: {str(e).splitlines()[0] if str(e) else e}")
            out = args.out or os.path.join(corpus, f"tok-{sha256_file(args.tokenizer)[:12]}")
            info["source"] = os.path.abspath(args.tokenizer)
        model_vocab = tok.get_vocab_size(with_added_tokens=True)
        if model_vocab > MAX_VOCAB:
            fail(f"tokenizer has {model_vocab} tokens: more than {MAX_VOCAB}, ids do not fit uint16")
        eot = tok.token_to_id(EOT)
        os.makedirs(out, exist_ok=True)
        tok.save(os.path.join(out, "tokenizer.json"))

    os.makedirs(out, exist_ok=True)
    splits = {}
    for split in SPLITS:
        texts, raw = docs[split]
        w = ShardWriter(os.path.join(out, split), split, args.shard_tokens)
        # stale shards of an earlier run with another --shard-tokens would be read too: remove them
        for fn in sorted(os.listdir(w.dir)):
            if fn.endswith(".bin"):
                os.remove(os.path.join(w.dir, fn))
        max_id = -1
        if mode == "bytes":
            w.add(array.array("H", array.array("B", raw)))   # the .txt bytes exactly: the stream that format = "text" reads
            max_id = max(raw) if raw else -1
        else:
            for i in range(0, len(texts), 256):
                for enc in tok.encode_batch(texts[i:i + 256], add_special_tokens=False):
                    ids = enc.ids
                    if ids and max(ids) >= MAX_VOCAB:
                        fail(f"{split}: token id {max(ids)} does not fit uint16")
                    if eot is not None:
                        w.add((eot,))
                    w.add(ids)
                    max_id = max(max_id, max(ids, default=-1), -1 if eot is None else eot)
        shards = w.close()
        n = sum(s["tokens"] for s in shards)
        splits[split] = {"documents": len(texts), "bytes": len(raw), "tokens": n,
                         "bytes_per_token": round(len(raw) / n, 4) if n else None, "max_id": max_id,
                         "shards": shards}
        log(f"{split}: {len(texts)} documents, {len(raw)} bytes -> {n} tokens in {len(shards)} shard(s)")
    manifest = {
        "script": "scripts/tokenize.py",
        "script_version": SCRIPT_VERSION,
        "corpus": corpus_manifest.get("name"),
        "corpus_manifest_sha256": sha256_file(cm),
        "tokenizer": info,
        "model_vocab": model_vocab,
        "eot_id": eot,
        "document_prefix": "the end-of-text token before each document" if eot is not None else "none",
        "splits": splits,
    }
    if mode != "bytes":
        manifest["tokenizer"]["tokenizer_json_sha256"] = sha256_file(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    ab = os.path.abspath(out)
    print(f"wrote {out}; for biaskit:\n[model]\nvocab = {model_vocab}\n[data]\nformat = \"shards\"\n"
          f"paths = [\"{ab}/train\"]\nval_paths = [\"{ab}/val\"]")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except TokError as e:
        print(f"tokenize.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("tokenize.py: interrupted", file=sys.stderr)
        sys.exit(130)
