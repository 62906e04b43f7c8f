"""The GGUF reader against gguf-py (PyPI `gguf`, the format's own Python package): a file written by
gguf-py's GGUFWriter with random tensors quantized by gguf.quants (F32, F16, BF16, Q8_0, Q4_0, Q4_1) and
metadata of several types is read by tests/gguf_dump.c; every dequantized value must equal
gguf.quants.dequantize's bit for bit, and every scalar entry its value. With a path argument, the same
comparison on that file (e.g. SmolLM2's). Exits 77 (skipped) when gguf is not installed.

usage: gguf_peer.py GGUF_DUMP [FILE.gguf]
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import gguf
    from gguf import quants
except ImportError:
    print("skip: gguf-py is not installed (pip install gguf)")
    sys.exit(77)

dump = sys.argv[1]
work = tempfile.mkdtemp()
path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(work, "peer.gguf")
if len(sys.argv) <= 2:
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(3)
    w.add_float32("test.scale", 0.125)
    w.add_int32("test.negative", -42)
    w.add_string("test.name", "peer")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "<|im_end|>"])
    kinds = [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16,
             gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1]
    for k, q in enumerate(kinds):
        x = (rng.standard_normal((7, 64)) * (0.5 + k)).astype(np.float32)
        x[0, :5] = [0.0, -0.0, 1e-8, 65504.0, -1e-3]
        data = x if q == gguf.GGMLQuantizationType.F32 else quants.quantize(x, q)
        w.add_tensor("t%d.%s" % (k, q.name), data, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

out = subprocess.run([dump, path, work], capture_output=True, text=True)
if out.returncode != 0:
    print(out.stdout + out.stderr)
    sys.exit(1)
lines = out.stdout.splitlines()
reader = gguf.GGUFReader(path)
failures = 0
compared = 0
for t in reader.tensors:
    line = next((l for l in lines if l.split(" ")[1:2] == [t.name]), None)
    if line is None:
        print("FAIL: tensor %s not listed" % t.name)
        failures += 1
        continue
    index = line.split(" ")[0]
    f = os.path.join(work, index + ".f32")
    if not os.path.exists(f):
        print("skip tensor %s (%s): not a type the reader dequantizes" % (t.name, t.tensor_type.name))
        continue
    mine = np.fromfile(f, dtype="<f4")
    theirs = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
    if mine.shape != theirs.shape or mine.tobytes() != theirs.tobytes():
        bad = np.nonzero(mine.view(np.uint32) != theirs.view(np.uint32))[0] if mine.shape == theirs.shape else []
        print("FAIL: tensor %s (%s): %s" % (t.name, t.tensor_type.name,
              "shapes %s vs %s" % (mine.shape, theirs.shape) if mine.shape != theirs.shape else
              "%d values differ, the first at %d: %r vs %r" % (len(bad), bad[0], mine[bad[0]], theirs[bad[0]])))
        failures += 1
    compared += 1
scalars = 0
for field in reader.fields.values():
    if len(field.types) != 1 or field.types[0] == gguf.GGUFValueType.ARRAY or field.name.startswith("GGUF."):
        continue
    want = field.parts[field.data[0]]
    want = bytes(want).decode() if field.types[0] == gguf.GGUFValueType.STRING else want[0]
    got = next((l.split("=", 1)[1] for l in lines if l.startswith(field.name + "=")), None)
    if isinstance(want, str):
        want = want.replace("\\", "\\\\").replace("\n", "\\n")  # as gguf_dump escapes it
    ok = got is not None and (want == got if isinstance(want, str) else float(got) == float(want))
    if not ok:
        print("FAIL: metadata %s: %r, gguf-py says %r" % (field.name, got, want))
        failures += 1
    scalars += 1
print("gguf_peer: %d tensors compared bit for bit, %d metadata values, %d failures" % (compared, scalars, failures))
sys.exit(1 if failures or not compared else 0)
