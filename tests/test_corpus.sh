#!/usr/bin/env bash
# scripts/corpus.py and scripts/tokenize.py on a tiny made-up tree (no network, no apt, a few seconds):
# decoding, HTML stripping, deduplication, the split by document, the manifest's checksums, the
# errors; llm.c shards written in pure Python and read back by biaskit (2 training steps); and, when
# the Python package `tokenizers` is importable, a hand-made tokenizer.json.
# usage: test_corpus.sh <biaskit binary> <source dir>
set -u
bk=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/check.sh"
corpus="$src/scripts/corpus.py" tokenize="$src/scripts/tokenize.py"


# The tree: 200 distinct documents; two exact duplicates (one a CRLF copy); a near duplicate (the
# same first 4 KiB); an HTML page; a Latin-1 file; a Windows-1251 one (neither UTF-8 nor Latin-1); a
# binary file; an empty and a near-empty one.
python3 - "$work/tree" <<'EOF'
import os, sys
root = sys.argv[1]
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma tau phi".split()
def doc(i, n=600):
    out, k = [f"Document {i}."], i
    while sum(len(w) + 1 for w in out) < n:
        k = (k * 1103515245 + 12345) % 2**31
        out.append(words[k % len(words)] + ("\n" if k % 11 == 0 else ""))
    return " ".join(out) + "\n"
def put(rel, data):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
for i in range(200):
    put(f"docs/doc_{i:03d}.txt", doc(i))
put("dup/copy_of_5.txt", doc(5))
put("dup/crlf_of_9.txt", doc(9).replace("\n", "\r\n"))
big = doc(1000, 6000)
put("big/a.txt", big)
put("big/b.txt", big[:5000] + " a different ending " + doc(1001))
put("web/page.html", "<html><head><title>T</title><style>p {color: red}</style><script>var SECRET_SCRIPT = 1;</script>"
    "</head><body><nav>NAVTEXT</nav><div class=\"related\">RELATEDTEXT</div><h1>A heading</h1><p>Visible &amp; "
    "<b>text</b> of the page.</p><p>" + doc(2000) + "</p><pre>line one\n    indented line</pre></body></html>")
put("latin1.txt", ("Caf\u00e9 au lait. " + doc(3000)).encode("latin-1"))
put("bin/blob.bin", bytes(range(256)) * 8)
put("cyrillic.txt", ("\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! " * 40).encode("cp1251"))
put("empty.txt", "")
put("tiny.txt", "hi\n")
EOF

check "corpus: --help" 0 "usage: corpus.py" python3 "$corpus" --help
check "corpus: --list names the presets" 0 "^math: .*LaTeX" python3 "$corpus" --list
check "corpus: from a directory" 0 "wrote .*train [0-9]+ documents" python3 "$corpus" t1 "$work/c1" --from-dir "$work/tree"
check "corpus: again, elsewhere" 0 "" python3 "$corpus" t1 "$work/c2" --from-dir "$work/tree" -q
check "corpus: deterministic (identical files)" 0 "" \
    bash -c "for f in manifest.json train.txt val.txt test.txt train.idx val.idx test.idx; do cmp '$work/c1/'\$f '$work/c2/'\$f || exit 1; done"

# The manifest against the files and against the rules, recomputed here independently.
check "corpus: manifest, dedup, split and checksums" 0 "^all good$" python3 - "$work/c1" <<'EOF'
import hashlib, json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
st = m["dedup"]
want = {"candidates": 206, "exact_duplicates": 2, "near_duplicates": 1, "kept": 203, "dropped_binary": 1, "decoded_latin1": 1,
        "dropped_other_encoding": 1,
        "dropped_near_empty": 2}
for k, v in want.items():
    assert st[k] == v, (k, st[k], v)
keys = {}
for split in ("train", "val", "test"):
    data = open(os.path.join(d, f"{split}.txt"), "rb").read()
    for f in (f"{split}.txt", f"{split}.idx"):
        p = os.path.join(d, f)
        assert m["files"][f]["sha256"] == hashlib.sha256(open(p, "rb").read()).hexdigest(), f
        assert m["files"][f]["bytes"] == os.path.getsize(p), f
    assert m["counts"][split]["bytes"] == len(data), split
    end = 0
    lines = open(os.path.join(d, f"{split}.idx"), encoding="utf-8").read().splitlines()
    assert m["counts"][split]["documents"] == len(lines), split
    for i, line in enumerate(lines):
        off, n, key = line.split("\t")
        off, n = int(off), int(n)
        assert off == (end + 2 if i else 0) and (i == 0 or data[end:off] == b"\n\n"), (split, i)
        assert n > 0 and not data[off:off + n].endswith(b"\n"), (split, key)
        end = off + n
        b = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 1000
        assert split == ("train" if b < 900 else "val" if b < 950 else "test"), (key, split)
        assert key not in keys, ("in two splits", key)
        keys[key] = split
    assert end == len(data)
assert len(keys) == 203 and m["counts"]["total"]["documents"] == 203
assert all(k.startswith("local/") for k in keys)
# the copy kept is the one of the smallest key; the CRLF copy and the near duplicate are gone
assert "local/docs/doc_005.txt" in keys and "local/dup/copy_of_5.txt" not in keys
assert "local/dup/crlf_of_9.txt" not in keys and "local/big/a.txt" in keys and "local/big/b.txt" not in keys
assert "local/bin/blob.bin" not in keys and "local/cyrillic.txt" not in keys and "local/empty.txt" not in keys and "local/tiny.txt" not in keys
assert all(m["counts"][s]["documents"] > 0 for s in ("train", "val", "test"))
print("all good")
EOF
all="$work/c1/train.txt $work/c1/val.txt $work/c1/test.txt"
check "corpus: HTML stripped to its visible text" 0 "^Visible & text of the page\.$" cat $all
check "corpus: HTML <pre> keeps its lines" 0 "^    indented line$" cat $all
check "corpus: no script, style, navigation or tags" 1 "" grep -Eq "SECRET_SCRIPT|NAVTEXT|RELATEDTEXT|color: red|<p>|&amp;" $all
check "corpus: Latin-1 decoded to UTF-8" 0 "^Café au lait" cat $all
check "corpus: --include/--exclude" 0 "\"kept\": 200$" bash -c \
    "python3 '$corpus' t3 '$work/c3' --from-dir '$work/tree' --include '^docs/' --exclude 'nothing' -q && cat '$work/c3/manifest.json'"

check "corpus: unknown preset" 1 "^corpus.py: error: corpus 'novels': unknown preset \(presets: prose, code, math" \
    python3 "$corpus" novels "$work/x"
check "corpus: --from-dir that is not a directory" 1 "^corpus.py: error: corpus 't1': --from-dir '$work/nope' is not a directory$" \
    python3 "$corpus" t1 "$work/x" --from-dir "$work/nope"
check "corpus: not enough text" 1 "^corpus.py: error: corpus 't1': not enough text: 0\.1 MB after deduplication, at least 1\.0 MB wanted" \
    python3 "$corpus" t1 "$work/x" --from-dir "$work/tree" --min-mb 1
check "corpus: no documents" 1 "corpus 't1': no documents" python3 "$corpus" t1 "$work/x" --from-dir "$work/tree" --include '^nothing'
check "corpus: a bad name" 1 "a name is letters" python3 "$corpus" "a/b" "$work/x" --from-dir "$work/tree"
# a package apt does not know, and a download that fails: apt-cache and apt-get stand-ins on PATH
mkdir -p "$work/fakebin"
printf '#!/bin/sh\necho "E: No packages found" >&2\nexit 100\n' >"$work/fakebin/apt-cache"
chmod +x "$work/fakebin/apt-cache"
check "corpus: a package apt does not know" 1 "^corpus.py: error: package 'python3.11-doc': not known to apt \(run 'apt-get update'\?; apt-cache says: E: No packages found\)$" \
    env PATH="$work/fakebin:$PATH" python3 "$corpus" prose "$work/x" --download-dir "$work/debs"
printf '#!/bin/sh\nprintf "Package: x\\nVersion: 1.0\\nArchitecture: all\\nSHA256: 00\\nSize: 10\\n"\n' >"$work/fakebin/apt-cache"
printf '#!/bin/sh\necho "E: Failed to fetch something" >&2\nexit 100\n' >"$work/fakebin/apt-get"
chmod +x "$work/fakebin/apt-cache" "$work/fakebin/apt-get"
check "corpus: apt-get download failing" 1 "^corpus.py: error: package 'golang-1.19-src': apt-get download failed \(exit 100\): E: Failed to fetch something$" \
    env PATH="$work/fakebin:$PATH" python3 "$corpus" code "$work/x" --download-dir "$work/debs" -q

# tokenize.py --bytes: the shard writer in pure Python; the shards hold the .txt bytes exactly
check "tokenize: --help" 0 "usage: tokenize.py" python3 "$tokenize" --help
check "tokenize: --bytes" 0 "^vocab = 256$" python3 "$tokenize" "$work/c1" --bytes --shard-tokens 50000 -q
check "tokenize: the shards are the text's bytes" 0 "^shards good$" python3 - "$work/c1" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "bytes", "manifest.json")))
for split in ("train", "val", "test"):
    got = b""
    for s in m["splits"][split]["shards"]:
        raw = open(os.path.join(d, "bytes", s["file"]), "rb").read()
        magic, version, n = struct.unpack("<3i", raw[:12])
        assert (magic, version) == (20240520, 1) and len(raw) == 1024 + 2 * n == 1024 + 2 * s["tokens"]
        got += bytes(struct.unpack(f"<{n}H", raw[1024:]))
    assert got == open(os.path.join(d, f"{split}.txt"), "rb").read(), split
assert len(m["splits"]["train"]["shards"]) > 1  # --shard-tokens 50000 cut it
print("shards good")
EOF
exp="$work/shards.toml"
printf '[model]\nlayers = 1\nheads = 2\ndim = 16\nvocab = %s\n[train]\nlength = 16\nbatch = 2\nsteps = 2\nwarmup = 1\nlog_every = 1\neval_batches = 2\n[data]\nformat = "shards"\npaths = ["%s/train"]\nval_paths = ["%s/val"]\n[[term]]\nplugin = "alibi"\n' \
    256 "$work/c1/bytes" "$work/c1/bytes" >"$exp"
check "tokenize: biaskit trains on the byte shards" 0 "done: 2 steps" "$bk" train "$exp" --out "$work/run1" --plain
check "tokenize: --vocab over 65536" 1 "^tokenize.py: error: --vocab 70000: must be in \[257, 65536\]" \
    python3 "$tokenize" "$work/c1" --vocab 70000 --no-install
check "tokenize: not a corpus" 1 "^tokenize.py: error: corpus '$work/tree': no manifest.json" \
    python3 "$tokenize" "$work/tree" --bytes

# A hand-made byte-level BPE tokenizer.json (256 bytes, one merge, <|endoftext|>), where `tokenizers`
# imports (python3's own, or the .venv-tokenize that scripts/tokenize.py made): never installed here.
py=""
if python3 -c "import tokenizers" 2>/dev/null; then py=python3
elif [ -x "$src/.venv-tokenize/bin/python" ] && "$src/.venv-tokenize/bin/python" -c "import tokenizers" 2>/dev/null; then
    py="$src/.venv-tokenize/bin/python"
fi
if [ -n "$py" ]; then
    python3 - "$work/tokenizer.json" <<'EOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
chars = dict(zip(bs, map(chr, cs)))
vocab = {chars[b]: b for b in range(256)}
vocab[chars[ord("t")] + chars[ord("h")]] = 256
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": 257, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "normalizer": None, "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": ["t h"]}}, open(sys.argv[1], "w"))
EOF
    check "tokenize: a given tokenizer.json" 0 "^vocab = 258$" "$py" "$tokenize" "$work/c1" --tokenizer "$work/tokenizer.json" \
        --out "$work/c1/tok" --no-install -q
    check "tokenize: ids, end-of-text before each document, the merge used" 0 "^tokens good$" python3 - "$work/c1" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "tok", "manifest.json")))
assert m["model_vocab"] == 258 and m["eot_id"] == 257
for split in ("train", "val", "test"):
    toks = []
    for s in m["splits"][split]["shards"]:
        raw = open(os.path.join(d, "tok", s["file"]), "rb").read()
        toks += struct.unpack(f"<{struct.unpack('<3i', raw[:12])[2]}H", raw[1024:])
    docs = m["splits"][split]["documents"]
    assert toks.count(257) == docs and toks[0] == 257 and 256 in toks and max(toks) == 257, split
    nbytes = sum(int(l.split("\t")[1]) for l in open(os.path.join(d, f"{split}.idx")))
    assert len(toks) == nbytes + docs - toks.count(256), split   # each "th" merge saves one token
print("tokens good")
EOF
    sed 's/^vocab = 256$/vocab = 258/; s#c1/bytes#c1/tok#g' "$exp" >"$work/tok.toml"
    check "tokenize: biaskit trains on the BPE shards" 0 "done: 2 steps" "$bk" train "$work/tok.toml" --out "$work/run2" --plain
else
    echo "note: the Python package 'tokenizers' is not importable here: the tokenizer.json cases are skipped"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
