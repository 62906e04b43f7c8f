#!/usr/bin/env python3
"""Evaluation corpora for biaskit from what Debian ships (python3 standard library only).

usage: scripts/corpus.py NAME DIR [--download-dir D] [--max-mb N] [--min-mb N]
       scripts/corpus.py NAME DIR --from-dir SRC [--include REGEX] [--exclude REGEX]
       scripts/corpus.py --list

Presets (NAME): prose, code, math (see --list and docs/corpora.md). A preset's Debian packages are
fetched with `apt-get download` (no root, no install) into the download directory, checked against
the SHA256 that apt knows, and read straight from the package's data archive (`dpkg-deb
--fsys-tarfile`, the stream that `dpkg-deb -x` unpacks). With --from-dir any NAME is allowed and the
documents are the files under SRC (your own text: .html/.htm/.xhtml files are stripped to text).

Pipeline: select files (per-package path rules) -> decode to UTF-8 text (HTML stripped) -> drop
binary, empty and near-empty files and files over --max-doc-kb -> deduplicate (exact: SHA256 of the
normalised text; near: SHA256 of the first 4 KiB with whitespace collapsed and letters lowercased)
-> cap at --max-mb (documents taken in the order of the SHA256 of their key) -> split by document
(SHA256 of the key "package/path": 90% train, 5% val, 5% test) -> write DIR/{train,val,test}.txt
(documents separated by a blank line), DIR/{train,val,test}.idx (one line per document: byte
offset, byte length, key) and DIR/manifest.json. The same packages give the same bytes, always.

Errors are one line on stderr and exit status 1.
"""
import argparse
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import tarfile

SCRIPT_VERSION = "1.0.0"
NEAR_DUP_PREFIX = 4096        # bytes of the normalised text that the near-duplicate key hashes
MAX_LATIN1_HIGH = 0.10        # a file that is not UTF-8 is read as Latin-1 when at most 10% of its bytes are >= 0x80
MIN_DOC_CHARS = 200           # documents with fewer non-space characters are "near-empty"
SPLIT_BUCKETS = 1000          # key hash mod 1000: [0, 900) train, [900, 950) val, [950, 1000) test
SPLITS = (("train", 900), ("val", 950), ("test", 1000))
SEPARATOR = "\n\n"            # between documents in the .txt files (each document ends without a newline)
HTML_EXT = (".html", ".htm", ".xhtml")


class CorpusError(Exception):
    pass


# Each preset: its Debian packages, and per package which files are documents (a regular
# expression on the path inside the package, without the leading "./"; a trailing ".gz" is
# stripped first and the file decompressed), an optional exclusion, and how to read them.
PRESETS = {
    "prose": {
        "about": "English technical prose: manuals and books (nearest to OpenWebText2 / PG-19)",
        "min_mb": 20,
        "sources": [
            {"package": "python3.11-doc", "format": "text",
             "include": r"^usr/share/doc/python3\.11/html/_sources/.*\.rst\.txt$",
             "why": "the Python documentation (tutorial, reference, HOWTOs), reStructuredText sources"},
            {"package": "linux-doc-6.1", "format": "text",
             "include": r"^usr/share/doc/linux-doc-6\.1/html/_sources/.*\.rst\.txt$",
             "exclude": r"/translations/",
             "why": "the Linux kernel documentation (English; translations left out), reStructuredText sources"},
            {"package": "debian-handbook", "format": "html",
             "include": r"^usr/share/doc/debian-handbook/html/en-US/.*\.html$",
             "why": "The Debian Administrator's Handbook, a book (English edition), HTML stripped to text"},
            {"package": "debian-reference-en", "format": "html",
             "include": r"^usr/share/debian-reference/.*\.en\.html$",
             "why": "Debian Reference, a book, HTML stripped to text"},
            {"package": "postgresql-doc-15", "format": "html",
             "include": r"^usr/share/doc/postgresql-doc-15/html/.*\.html$",
             "why": "the PostgreSQL 15 manual, HTML stripped to text"},
            {"package": "jargon-text", "format": "text",
             "include": r"^usr/share/doc/jargon-text/jargon\.txt$", "max_doc_kb": 4096,
             "why": "The Jargon File, a long prose glossary"},
        ],
    },
    "code": {
        "about": "source code in Go, Rust, C and Python (nearest to the GitHub subset of the Pile)",
        "min_mb": 20,
        "sources": [
            {"package": "golang-1.19-src", "format": "text",
             "include": r"^usr/share/go-1\.19/.*\.go$", "exclude": r"/testdata/|^usr/share/go-1\.19/test/",
             "why": "Go: the Go 1.19 toolchain and standard library (compiler regression tests left out)"},
            {"package": "rust-src", "format": "text",
             "include": r"^usr/src/rustc-[0-9.]+/.*\.rs$", "exclude": r"^usr/src/rustc-[0-9.]+/src/test/",
             "why": "Rust: the Rust 1.63 compiler, tools and standard library (compiler UI tests left out)"},
            {"package": "linux-source-6.1", "format": "text", "inner": r"^usr/src/linux-source-6\.1\.tar\.xz$",
             "include": r"^linux-source-6\.1/(kernel|mm|lib|block|ipc|init|security|crypto)/.*\.[ch]$",
             "why": "C: the Linux 6.1 core (kernel, mm, lib, block, ipc, init, security, crypto; drivers, "
                    "file systems, networking and architectures left out), from the source tarball in the package"},
            {"package": "libpython3.11-minimal", "format": "text",
             "include": r"^usr/lib/python3\.11/.*\.py$",
             "why": "Python: the core of the Python 3.11 standard library"},
            {"package": "libpython3.11-stdlib", "format": "text",
             "include": r"^usr/lib/python3\.11/.*\.py$",
             "why": "Python: the rest of the Python 3.11 standard library"},
        ],
    },
    "math": {
        "about": "LaTeX sources of documents with mathematics (nearest to the ArXiv subset of the Pile)",
        "min_mb": 20,
        "sources": [
            {"package": "texlive-science-doc", "format": "text",
             "include": r"^usr/share/doc/texlive-doc/.*\.(tex|ltx)$",
             "why": "documentation and examples of TeX Live's mathematics and science packages"},
            {"package": "texlive-publishers-doc", "format": "text",
             "include": r"^usr/share/doc/texlive-doc/.*\.(tex|ltx)$",
             "why": "sample articles and theses for journal and university classes (the closest to arXiv papers)"},
            {"package": "texlive-latex-extra-doc", "format": "text",
             "include": r"^usr/share/doc/texlive-doc/.*\.(tex|ltx)$",
             "why": "documentation and examples of TeX Live's LaTeX packages"},
        ],
    },
}


def fail(msg):
    raise CorpusError(msg)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Text: decoding, HTML stripping, normalisation


class _HTMLText(html.parser.HTMLParser):
    """Visible text of an HTML page: scripts, styles, the head and navigation left out; block
    elements end lines; whitespace collapsed outside <pre>."""

    SKIP = {"script", "style", "head", "nav", "noscript", "template", "svg", "button", "form"}
    SKIP_CLASS = {"nav", "docnav", "banner", "navheader", "navfooter", "navigation", "sphinxsidebar", "related",
                  "footer", "header", "breadcrumb", "breadcrumbs", "headerlink"}  # class/role/id words
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
            "track", "wbr"}
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
             "table", "tr", "blockquote", "section", "article", "hr", "title", "caption", "figure", "figcaption",
             "address", "main", "aside"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out = []
        self.skip_tag = None
        self.skip_depth = 0
        self.pre = 0

    def handle_starttag(self, tag, attrs):
        if self.skip_tag is not None:
            if tag == self.skip_tag and tag not in self.VOID:
                self.skip_depth += 1
            return
        words = set(" ".join(v or "" for k, v in attrs if k in ("class", "role", "id")).lower().split())
        if tag in self.SKIP or (tag not in self.VOID and tag in ("div", "table", "p", "span", "a", "ul")
                                and words & self.SKIP_CLASS):
            if tag not in self.VOID:
                self.skip_tag, self.skip_depth = tag, 1
            return
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n")
        if tag == "li":
            self.out.append("- ")

    def handle_startendtag(self, tag, attrs):
        if self.skip_tag is None and tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if self.skip_tag is not None:
            if tag == self.skip_tag:
                self.skip_depth -= 1
                if self.skip_depth == 0:
                    self.skip_tag = None
            return
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip_tag is not None:
            return
        if self.pre:
            self.out.append(data.replace("\n", "\x00"))  # protected from collapsing below
        else:
            self.out.append(re.sub(r"\s+", " ", data))

    def text(self):
        s = "".join(self.out)
        lines = [line.strip(" \t") for line in s.split("\n")]
        s = "\n".join(lines).replace("\x00", "\n")
        return re.sub(r"\n{3,}", "\n\n", s)


def html_to_text(s):
    p = _HTMLText()
    try:
        p.feed(s)
        p.close()
    except (AssertionError, ValueError):  # malformed markup: keep what was read
        pass
    return p.text()


_HIGH_BYTES = bytes(range(0x80, 0x100))
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def decode(data):
    """(str, was it Latin-1); (None, False) for binary, (None, True) for text in neither UTF-8 nor
    Latin-1. UTF-8 (a BOM dropped), else Latin-1 when the bytes look like text (no NUL, at most 1%
    control characters) with at most 10% bytes >= 0x80."""
    if b"\x00" in data[:65536]:
        return None, False
    latin1 = False
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        # Latin-1 text has a few accented letters; mostly high bytes is another encoding (Cyrillic,
        # CJK...) that Latin-1 would turn into mojibake: refused (None, True)
        if len(data) - len(data.translate(None, _HIGH_BYTES)) > len(data) * MAX_LATIN1_HIGH:
            return None, True
        s, latin1 = data.decode("latin-1"), True
    if s.startswith("\ufeff"):
        s = s[1:]
    sample = s[:65536]
    if sample and len(_CONTROL.findall(sample)) > len(sample) // 100:
        return None, False
    return s, latin1


def normalise(s):
    """Newlines to \\n, control characters dropped, trailing spaces removed, runs of 4+ newlines cut
    to 3 (two blank lines), no leading or trailing blank lines."""
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    s = _CONTROL.sub("", s)
    s = "\n".join(line.rstrip() for line in s.split("\n"))
    s = re.sub(r"\n{4,}", "\n\n\n", s)
    return s.strip("\n")


def near_key(text):
    prefix = text.encode("utf-8")[:NEAR_DUP_PREFIX].decode("utf-8", "ignore")
    return hashlib.sha256(re.sub(r"\s+", " ", prefix).strip().lower().encode("utf-8")).hexdigest()


def key_hash(key):
    return hashlib.sha256(key.encode("utf-8")).digest()


def split_of(key):
    b = int.from_bytes(key_hash(key)[:8], "big") % SPLIT_BUCKETS
    for name, upto in SPLITS:
        if b < upto:
            return name
    raise AssertionError


# ---------------------------------------------------------------------------------------------
# Sources: Debian packages or a directory


def apt_info(package):
    """Version, architecture and SHA256 of the candidate version that apt-get download fetches."""
    try:
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", package], capture_output=True, text=True)
    except FileNotFoundError:
        fail(f"package '{package}': apt-cache not found (a Debian system is needed; or use --from-dir)")
    fields = {}
    for line in r.stdout.splitlines():
        if ":" in line and not line.startswith(" "):
            k, v = line.split(":", 1)
            fields.setdefault(k, v.strip())
    if r.returncode != 0 or "Version" not in fields:
        fail(f"package '{package}': not known to apt (run 'apt-get update'?; apt-cache says: "
             f"{(r.stderr.strip().splitlines() or ['nothing'])[-1]})")
    return {"version": fields["Version"], "architecture": fields.get("Architecture", ""),
            "sha256": fields.get("SHA256", ""), "size": int(fields.get("Size", "0") or 0)}


def deb_name(package, info):
    version = info["version"].replace(":", "%3a")
    return f"{package}_{version}_{info['architecture']}.deb"


def fetch_deb(package, download_dir, log):
    info = apt_info(package)
    path = os.path.join(download_dir, deb_name(package, info))
    if os.path.exists(path) and (not info["sha256"] or sha256_file(path) == info["sha256"]):
        log(f"{package} {info['version']}: using {path}")
    else:
        log(f"{package} {info['version']}: apt-get download ({info['size'] / 1e6:.1f} MB)")
        os.makedirs(download_dir, exist_ok=True)
        r = subprocess.run(["apt-get", "download", f"{package}={info['version']}"], cwd=download_dir,
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(path):
            msg = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("W:")]
            fail(f"package '{package}': apt-get download failed (exit {r.returncode}): "
                 f"{(msg or ['no message'])[-1]}")
    digest = sha256_file(path)
    if info["sha256"] and digest != info["sha256"]:
        fail(f"package '{package}': {path} has SHA256 {digest}, apt expects {info['sha256']}")
    return path, {"package": package, "version": info["version"], "architecture": info["architecture"],
                  "deb": os.path.basename(path), "deb_sha256": digest, "deb_bytes": os.path.getsize(path)}


def deb_files(path, package, inner=None):
    """(path inside the package, a reader of its bytes) of each regular file, in archive order. With
    `inner` (a regex), the files of the tar archive(s) inside the package whose path matches it
    instead (e.g. linux-source's tarball), named by their path in that archive."""
    p = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    found = False
    try:
        with tarfile.open(fileobj=p.stdout, mode="r|") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                name = m.name[2:] if m.name.startswith("./") else m.name
                if inner is None:
                    yield name, (lambda m=m: tf.extractfile(m).read())
                elif re.search(inner, name):
                    found = True
                    with tarfile.open(fileobj=tf.extractfile(m), mode="r|*") as itf:
                        for im in itf:
                            if im.isfile():
                                iname = im.name[2:] if im.name.startswith("./") else im.name
                                yield iname, (lambda im=im: itf.extractfile(im).read())
        while p.stdout.read(1 << 20):   # the archive's padding: read to the end, so dpkg-deb exits 0
            pass
    except (tarfile.TarError, EOFError, OSError) as e:
        fail(f"package '{package}': cannot read {path}: {e}")
    finally:
        p.stdout.close()
        err = p.stderr.read().decode("utf-8", "replace").strip()
        if p.wait() != 0:
            fail(f"package '{package}': dpkg-deb --fsys-tarfile {path} failed: {err.splitlines()[-1] if err else ''}")
    if inner is not None and not found:
        fail(f"package '{package}': no archive matching {inner} in {path}")


def dir_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            if os.path.isfile(full) and not os.path.islink(full):
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                yield rel, (lambda full=full: open(full, "rb").read())


def dir_digest(root):
    h = hashlib.sha256()
    for rel, read in dir_files(root):
        h.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(read()).digest())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------


def collect(files, source, max_doc_bytes, stats, docs):
    """Append (key, text) of each document of `source` to docs; returns this source's counters."""
    mine = {k: 0 for k in ("files_selected", "dropped_binary", "dropped_other_encoding", "dropped_near_empty",
                           "dropped_too_large", "decoded_latin1")}
    max_doc_bytes = source.get("max_doc_kb", 0) * 1024 or max_doc_bytes
    inc = re.compile(source["include"])
    exc = re.compile(source["exclude"]) if source.get("exclude") else None
    for name, read in files:
        logical = name[:-3] if name.endswith(".gz") else name
        if not inc.search(logical) or (exc and exc.search(logical)):
            continue
        mine["files_selected"] += 1
        data = read()
        if name.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):
                mine["dropped_binary"] += 1
                continue
        if len(data) > max_doc_bytes:
            mine["dropped_too_large"] += 1
            continue
        text, latin1 = decode(data)
        if text is None:
            mine["dropped_other_encoding" if latin1 else "dropped_binary"] += 1
            continue
        mine["decoded_latin1"] += latin1
        fmt = source["format"]
        if fmt == "html" or (fmt == "auto" and logical.lower().endswith(HTML_EXT)):
            text = html_to_text(text)
        text = normalise(text)
        if len(re.sub(r"\s", "", text)) < MIN_DOC_CHARS:
            mine["dropped_near_empty"] += 1
            continue
        docs.append((f"{source['package']}/{logical}", text))
    for k, v in mine.items():
        stats[k] += v
    return mine


def dedup(docs, stats):
    """Keep the first of each exact / near duplicate, the documents taken in key order."""
    docs.sort(key=lambda d: d[0])
    seen_exact, seen_near, kept = set(), set(), []
    for key, text in docs:
        b = text.encode("utf-8")
        exact = hashlib.sha256(b).hexdigest()
        if exact in seen_exact:
            stats["exact_duplicates"] += 1
            stats["duplicate_bytes"] += len(b)
            continue
        seen_exact.add(exact)
        near = near_key(text)
        if near in seen_near:
            stats["near_duplicates"] += 1
            stats["duplicate_bytes"] += len(b)
            continue
        seen_near.add(near)
        kept.append((key, text))
    return kept


def write_outputs(out_dir, name, docs, sources, selection, stats, max_bytes, min_bytes):
    # the cap: documents in the order of their key's hash (a fixed pseudo-random sample)
    docs.sort(key=lambda d: key_hash(d[0]))
    total = sum(len(t.encode("utf-8")) for _, t in docs)
    if max_bytes and total > max_bytes:
        kept, size = [], 0
        for key, text in docs:
            n = len(text.encode("utf-8"))
            if size + n > max_bytes:
                stats["dropped_by_cap"] += 1
                continue
            kept.append((key, text))
            size += n
        docs, total = kept, size
    if total < min_bytes:
        fail(f"corpus '{name}': not enough text: {total / 1e6:.1f} MB after deduplication, "
             f"at least {min_bytes / 1e6:.1f} MB wanted (--min-mb)")
    if not docs:
        fail(f"corpus '{name}': no documents")
    stats["kept"] = len(docs)
    os.makedirs(out_dir, exist_ok=True)
    by_split = {s: [] for s, _ in SPLITS}
    for key, text in docs:           # already in hash order: the order of documents in each file
        by_split[split_of(key)].append((key, text))
    counts, files = {}, {}
    for split, _ in SPLITS:
        txt_path = os.path.join(out_dir, f"{split}.txt")
        idx_path = os.path.join(out_dir, f"{split}.idx")
        offset = 0
        with open(txt_path + ".tmp", "wb") as ft, open(idx_path + ".tmp", "wb") as fi:
            for i, (key, text) in enumerate(by_split[split]):
                b = text.encode("utf-8")
                if i:
                    ft.write(SEPARATOR.encode())
                    offset += len(SEPARATOR)
                ft.write(b)
                fi.write(f"{offset}\t{len(b)}\t{key}\n".encode("utf-8"))
                offset += len(b)
        os.replace(txt_path + ".tmp", txt_path)
        os.replace(idx_path + ".tmp", idx_path)
        counts[split] = {"documents": len(by_split[split]), "bytes": offset}
        for p in (txt_path, idx_path):
            files[os.path.basename(p)] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    manifest = {
        "name": name,
        "script": "scripts/corpus.py",
        "script_version": SCRIPT_VERSION,
        "sources": sources,
        "selection": selection,
        "dedup": stats,
        "counts": {**counts, "total": {"documents": len(docs), "bytes": sum(c["bytes"] for c in counts.values())}},
        "files": files,
    }
    tmp = os.path.join(out_dir, "manifest.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "manifest.json"))
    return manifest


def selection_rules(args, source_rules):
    return {
        "documents": "one file = one document (of the package, or of the archive inside it named by 'inner'); "
                     "'.gz' files decompressed; HTML stripped to visible text "
                     "(html.parser: scripts, styles, head and navigation left out)",
        "sources": source_rules,
        "decode": "UTF-8 (BOM dropped), else Latin-1 when at most 10% of the bytes are >= 0x80 (else dropped as "
                  "another encoding); binary (dropped) = a NUL byte or over 1% control characters",
        "normalise": "CRLF/CR to LF, control characters dropped, trailing spaces removed, runs of 4+ newlines "
                     "to 3, leading/trailing blank lines removed",
        "min_doc_chars": MIN_DOC_CHARS,
        "max_doc_bytes": args.max_doc_kb * 1024,
        "exact_dedup": "SHA256 of the normalised text; the document of the smallest key is kept",
        "near_dedup": f"SHA256 of the first {NEAR_DUP_PREFIX} bytes of the normalised text, whitespace collapsed "
                      "and lowercased; the document of the smallest key is kept",
        "max_bytes": int(args.max_mb * 1e6) if args.max_mb else 0,
        "cap_order": "documents in the order of SHA256(key) until max_bytes (0 = no cap)",
        "key": "package/path inside the package (or, with --from-dir, 'local/<path under the directory>')",
        "split": "first 8 bytes of SHA256(key) as a big-endian integer, mod 1000: < 900 train, < 950 val, else test",
        "order": "documents of a split in the order of SHA256(key), separated by a blank line ('\\n\\n'); "
                 "<split>.idx lists offset, length and key of each",
    }


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="corpus.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Prepare an evaluation corpus from Debian packages (presets prose, code, math) or from a "
                    "directory of your own files (--from-dir): decode, strip HTML, deduplicate, split by "
                    "document into train/val/test .txt files with a manifest.json.",
        epilog="examples:\n  scripts/corpus.py prose /work/corpora/prose\n"
               "  scripts/corpus.py mytext out/mytext --from-dir ~/texts --include '\\.(txt|md)$'\n"
               "docs/corpora.md describes the presets, the rules and the manifest.")
    ap.add_argument("name", nargs="?", help="preset (prose, code, math) or, with --from-dir, any name")
    ap.add_argument("dir", nargs="?", help="output directory")
    ap.add_argument("--list", action="store_true", help="list the presets and their packages, then exit")
    ap.add_argument("--download-dir", default=None,
                    help="where .deb files are kept (default $XDG_CACHE_HOME/biaskit/debs or ~/.cache/biaskit/debs)")
    ap.add_argument("--max-mb", type=float, default=0,
                    help="keep at most this many MB (1e6 bytes) of text after dedup, documents in hash order (default 0: all)")
    ap.add_argument("--min-mb", type=float, default=None,
                    help="fail when less text than this remains (default: 20 for presets, 0 with --from-dir)")
    ap.add_argument("--max-doc-kb", type=int, default=1024,
                    help="drop files larger than this many KiB, usually generated tables (default 1024)")
    ap.add_argument("--from-dir", metavar="SRC", help="take the files under SRC instead of Debian packages")
    ap.add_argument("--include", default=r".", help="with --from-dir: regex a file's relative path must match")
    ap.add_argument("--exclude", default=None, help="with --from-dir: regex of relative paths to leave out")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    args = ap.parse_args(argv)

    if args.list:
        for name, p in PRESETS.items():
            print(f"{name}: {p['about']}")
            for s in p["sources"]:
                print(f"  {s['package']}: {s['why']}")
        return 0
    if not args.name or not args.dir:
        ap.error("NAME and DIR are required")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.name):
        fail(f"corpus '{args.name}': a name is letters, digits, '_', '.' and '-'")
    if args.max_mb < 0 or args.max_doc_kb <= 0:
        fail("--max-mb must be >= 0 and --max-doc-kb > 0")
    log = (lambda m: None) if args.quiet else (lambda m: print(f"corpus {args.name}: {m}", file=sys.stderr))

    stats = {k: 0 for k in ("files_selected", "dropped_binary", "dropped_other_encoding", "dropped_near_empty",
                            "dropped_too_large", "decoded_latin1", "candidates", "exact_duplicates", "near_duplicates", "duplicate_bytes",
                            "dropped_by_cap", "kept")}
    docs, sources, rules = [], [], []
    max_doc_bytes = args.max_doc_kb * 1024
    if args.from_dir:
        if not os.path.isdir(args.from_dir):
            fail(f"corpus '{args.name}': --from-dir '{args.from_dir}' is not a directory")
        try:
            re.compile(args.include)
            re.compile(args.exclude or "")
        except re.error as e:
            fail(f"corpus '{args.name}': bad --include/--exclude regex: {e}")
        src = {"package": "local", "format": "auto", "include": args.include, "exclude": args.exclude}
        mine = collect(dir_files(args.from_dir), src, max_doc_bytes, stats, docs)
        sources.append({"package": "local", "directory": os.path.abspath(args.from_dir),
                        "tree_sha256": dir_digest(args.from_dir), "documents": len(docs), **mine})
        rules.append({k: v for k, v in src.items() if v is not None})
        min_mb = 0 if args.min_mb is None else args.min_mb
    else:
        if args.name not in PRESETS:
            fail(f"corpus '{args.name}': unknown preset (presets: {', '.join(PRESETS)}; or give --from-dir)")
        preset = PRESETS[args.name]
        download_dir = args.download_dir or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "biaskit", "debs")
        for src in preset["sources"]:
            path, info = fetch_deb(src["package"], download_dir, log)
            before = len(docs)
            mine = collect(deb_files(path, src["package"], src.get("inner")), src, max_doc_bytes, stats, docs)
            n = len(docs) - before
            if n == 0:
                fail(f"corpus '{args.name}': package '{src['package']}' {info['version']}: no document from "
                     f"{mine['files_selected']} files matching {src['include']} ({mine['dropped_binary']} binary, "
                     f"{mine['dropped_other_encoding']} not UTF-8/Latin-1, "
                     f"{mine['dropped_near_empty']} near-empty, {mine['dropped_too_large']} too large)")
            log(f"{src['package']}: {n} documents, {sum(len(t) for _, t in docs[before:]) / 1e6:.1f} M characters")
            sources.append({**info, "documents": n, **mine})
            rules.append({k: src[k] for k in ("package", "format", "inner", "include", "exclude", "max_doc_kb", "why")
                          if k in src})
        min_mb = preset["min_mb"] if args.min_mb is None else args.min_mb
    stats["candidates"] = len(docs)
    docs = dedup(docs, stats)
    selection = selection_rules(args, rules)
    manifest = write_outputs(args.dir, args.name, docs, sources, selection, stats,
                             int(args.max_mb * 1e6), int(min_mb * 1e6))
    c = manifest["counts"]
    log(f"wrote {args.dir}: " + ", ".join(f"{s} {c[s]['documents']} documents / {c[s]['bytes'] / 1e6:.2f} MB"
                                           for s, _ in SPLITS)
        + f"; duplicates dropped: {stats['exact_duplicates']} exact, {stats['near_duplicates']} near")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CorpusError as e:
        print(f"corpus.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("corpus.py: interrupted", file=sys.stderr)
        sys.exit(130)
