#!/usr/bin/env python3
r"""Write the training and evaluation data for `ampc train` (models/*.train.npz, *.eval.npz).

`ampc train MODEL --data DATA.npz --steps N` reads one array per graph input, named after
the input and shaped [num_batches, *input shape]; step i uses batch i % num_batches. Every
array in these files is a graph input (nothing else may be in them), so tiny_gpt's
vocabulary goes to a separate tiny_gpt.vocab.json.

    python models/make_datasets.py            # writes the files below into models/
    python models/make_datasets.py --out DIR  # writes them into DIR instead
    python models/make_datasets.py --extract-text \
        /usr/lib/R/site-library/janeaustenr/data/Rdata.rdb
        # first rewrites models/text/persuasion_vol1.txt from Debian's r-cran-janeaustenr
        # package (`apt-get download r-cran-janeaustenr`, `dpkg-deb -x`), then writes the data

Files (see models/README.md for shapes, origin and licences):

  mlp.train.npz, mlp.eval.npz  x f32 [B, 8, 64],       label i64 [B, 8]   (digits.npz)
  cnn.train.npz, cnn.eval.npz  x f32 [B, 8, 1, 8, 8],  label i64 [B, 8]   (digits.npz)
  tiny_gpt.train.npz, .eval.npz  tokens, targets i64 [B, 4, 32]  (text/persuasion_vol1.txt)
  tiny_gpt.vocab.json          the 64-id character vocabulary

Needs only numpy (reads the committed digits.npz and text file). Deterministic: the
shuffles use numpy's legacy RandomState (its streams are frozen across numpy versions) with
fixed seeds, and the .npz files are written here with fixed zip metadata (1980-01-01
timestamps, Unix "made by"), deflate level 9 and NPY format 1.0, so a rerun gives the same
bytes (with the same zlib). Every file is read back and checked before the script exits.
"""

import argparse
import hashlib
import io
import json
import os
import sys
import zipfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT_REL = os.path.join("text", "persuasion_vol1.txt")

# --- digits (mlp, cnn)
DIGITS_SEED = 0
DIGITS_BATCH = 8
DIGITS_TRAIN = 1600  # first 1600 shuffled samples -> 200 batches; the other 197 -> 24 batches
DIGITS_X_SHAPE = {"mlp": [8, 64], "cnn": [8, 1, 8, 8]}

# --- text (tiny_gpt)
TEXT_SEED = 0
TEXT_BATCH, TEXT_CONTEXT = 4, 32
TEXT_EVAL_FRACTION = 0.1  # the eval text starts at the first paragraph after 90 %
# id 0 is the fallback for any other character (decoded as U+FFFD); ids 1..63 are these,
# in code-point order: newline, space, printable ASCII without upper case (text is
# lower-cased first) and without the 7 characters < > \ ^ ` | ~.
VOCAB_CHARS = "\n !\"#$%&'()*+,-./0123456789:;=?@[]_abcdefghijklmnopqrstuvwxyz{}"
UNKNOWN_ID = 0
VOCAB_SIZE = 64

# --- extracting the text from Debian's r-cran-janeaustenr (data/Rdata.rdb)
BOOK_FIRST_LINE = "Persuasion"    # janeaustenr's `persuasion`: one string per line
VOLUME_ONE_END = "Chapter 13"     # volume two (of the first edition) starts here
VOLUME_ONE_LAST = "(End of volume one.)"

MAX_NPZ_BYTES = 1024 * 1024


def fail(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


# --------------------------------------------------------------------------- npz writing

def write_npz(path, arrays):
    """np.savez_compressed, but with fixed zip metadata so the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), version=(1, 0),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, whatever the host
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def check_npz(path, arrays):
    with np.load(path, allow_pickle=False) as back:
        if sorted(back.files) != sorted(arrays):
            fail(f"{path}: keys {back.files}, want {list(arrays)}")
        for k, v in arrays.items():
            if back[k].dtype != v.dtype or back[k].shape != v.shape or \
                    not np.array_equal(back[k], v):
                fail(f"{path}: {k} does not read back as written")
    if os.path.getsize(path) > MAX_NPZ_BYTES:
        fail(f"{path}: {os.path.getsize(path)} bytes, over {MAX_NPZ_BYTES}")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def describe(arrays):
    return ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in arrays.items())


# --------------------------------------------------------------------------- digits

def digits_splits(digits_path):
    """(train, eval) as (x f32 [N, 64] = images / 16, label i64 [N]), shuffled, whole batches."""
    if not os.path.exists(digits_path):
        fail(f"{digits_path}: not found (write it with models/make_digits.py)")
    with np.load(digits_path) as d:
        images, labels = d["images"], d["labels"]
    if images.dtype != np.uint8 or images.shape[1:] != (8, 8) or labels.dtype != np.int64 \
            or labels.shape != images.shape[:1]:
        fail(f"{digits_path}: want images uint8 [N,8,8] and labels int64 [N]")
    n = images.shape[0]
    if n <= DIGITS_TRAIN:
        fail(f"{digits_path}: {n} images, need more than {DIGITS_TRAIN}")
    # The same normalisation as training_refs.py's digits batches: images / 16 as float32
    # (exact: the pixels are integers 0..16).
    x = images.astype(np.float32).reshape(n, 64) / np.float32(16.0)
    order = np.random.RandomState(DIGITS_SEED).permutation(n)
    x, y = x[order], labels[order]
    n_eval = (n - DIGITS_TRAIN) // DIGITS_BATCH * DIGITS_BATCH  # drop the last partial batch
    return (x[:DIGITS_TRAIN], y[:DIGITS_TRAIN]), \
        (x[DIGITS_TRAIN:DIGITS_TRAIN + n_eval], y[DIGITS_TRAIN:DIGITS_TRAIN + n_eval])


def digits_arrays(model, x, y):
    nb = x.shape[0] // DIGITS_BATCH
    arrays = {"x": x.reshape([nb] + DIGITS_X_SHAPE[model]).astype(np.float32),
              "label": y.reshape(nb, DIGITS_BATCH).astype(np.int64)}
    if arrays["label"].min() < 0 or arrays["label"].max() > 9:
        fail(f"{model}: labels outside 0..9")
    return arrays


# --------------------------------------------------------------------------- text

def _r_strings(raw):
    """The lines of an R-serialized character vector (XDR format, no attributes), else None.

    Just enough of R's serialization format for janeaustenr's lazy-load data: a header
    ("X\\n", format version 2 or 3), then a STRSXP (type 16) whose elements are CHARSXPs
    (type 9; length -1 is NA).
    """
    def i32(pos):
        return int.from_bytes(raw[pos:pos + 4], "big", signed=True), pos + 4
    if raw[:2] != b"X\n":
        return None
    version, pos = i32(2)
    pos += 8  # R version that wrote it, oldest R version that reads it
    if version == 3:
        nelen, pos = i32(pos)
        pos += nelen  # native encoding name
    elif version != 2:
        return None
    flags, pos = i32(pos)
    if flags & 0xFF != 16 or flags & (1 << 9):  # STRSXP without attributes
        return None
    n, pos = i32(pos)
    lines = []
    for _ in range(n):
        flags, pos = i32(pos)
        length, pos = i32(pos)
        if flags & 0xFF != 9 or length < 0:
            fail("janeaustenr data: a string element that is not a CHARSXP, or NA")
        lines.append(raw[pos:pos + length].decode("utf-8"))
        pos += length
    if pos != len(raw):
        fail("janeaustenr data: trailing bytes after a character vector")
    return lines


def extract_text(rdata_rdb, text_path):
    """Writes Persuasion's first volume (chapters 1-12) from janeaustenr's Rdata.rdb.

    Rdata.rdb is R's lazy-load database: a run of blocks, each a 4-byte big-endian length
    and a zlib stream of one serialized object (janeaustenr's six novels, each a character
    vector with one line per element). The block whose first line is "Persuasion" is the
    novel; its first volume ends just before the line "Chapter 13".
    """
    with open(rdata_rdb, "rb") as f:
        db = f.read()
    pos, book = 0, None
    while pos < len(db):
        size = int.from_bytes(db[pos:pos + 4], "big")
        z = zlib.decompressobj()
        raw = z.decompress(db[pos + 4:])
        if len(raw) != size or not z.eof:
            fail(f"{rdata_rdb}: block at byte {pos} is not a zlib-compressed object")
        pos = len(db) - len(z.unused_data)
        lines = _r_strings(raw)
        if lines and lines[0] == BOOK_FIRST_LINE:
            book = lines
    if book is None:
        fail(f"{rdata_rdb}: no character vector starting with {BOOK_FIRST_LINE!r}: "
             "not r-cran-janeaustenr's data/Rdata.rdb?")
    if book.count(VOLUME_ONE_END) != 1:
        fail(f"{rdata_rdb}: want one line {VOLUME_ONE_END!r} in Persuasion")
    volume = [line.rstrip() for line in book[:book.index(VOLUME_ONE_END)]]
    while volume and not volume[-1]:
        volume.pop()
    if volume[-1] != VOLUME_ONE_LAST:
        fail(f"{rdata_rdb}: volume one ends with {volume[-1]!r}, want {VOLUME_ONE_LAST!r}")
    text = "\n".join(volume) + "\n"
    if not text.isascii():
        fail(f"{rdata_rdb}: Persuasion is not ASCII")
    os.makedirs(os.path.dirname(text_path), exist_ok=True)
    with open(text_path, "w", encoding="ascii", newline="\n") as f:
        f.write(text)
    print(f"{text_path}: {len(text)} characters, {len(volume)} lines "
          f"(of {len(book)} in Persuasion) from {rdata_rdb}")


def encode(text):
    """Lower-cases and maps each character to its id (UNKNOWN_ID if not in the vocabulary)."""
    table = np.full(0x110000, UNKNOWN_ID, np.int64)
    for i, c in enumerate(VOCAB_CHARS, start=1):
        table[ord(c)] = i
    cps = np.array([ord(c) for c in text.lower()], np.int64)
    return table[cps]


def windows(ids, starts):
    """tokens = ids[s : s+32], targets = ids[s+1 : s+33] for each start s (any shape)."""
    offs = np.arange(TEXT_CONTEXT)
    return ids[starts[..., None] + offs], ids[starts[..., None] + 1 + offs]


def text_arrays(text):
    """(train, eval, info) for tiny_gpt from the whole text."""
    ids = encode(text)
    n = len(ids)
    cut = text.find("\n\n", int(n * (1 - TEXT_EVAL_FRACTION)))
    if cut < 0:
        fail("text: no blank line in its last 10 %")
    cut += 2  # the eval text starts with a paragraph
    per_batch = TEXT_BATCH
    # Non-overlapping windows: window k's tokens are ids[off + 32k : off + 32k + 32] and its
    # targets the same shifted by one (the last target is the next window's first token).
    def starts_of(lo, hi):
        count = (hi - lo - 1) // TEXT_CONTEXT
        return lo + TEXT_CONTEXT * np.arange(count, dtype=np.int64)
    train_starts = starts_of(0, cut)
    train_starts = train_starts[np.random.RandomState(TEXT_SEED).permutation(len(train_starts))]
    nb = len(train_starts) // per_batch
    train_starts = train_starts[:nb * per_batch].reshape(nb, per_batch)
    eval_starts = starts_of(cut, n)  # in text order
    ne = len(eval_starts) // per_batch
    eval_starts = eval_starts[:ne * per_batch].reshape(ne, per_batch)
    out = []
    for st in (train_starts, eval_starts):
        tok, tgt = windows(ids, st)
        out.append({"tokens": tok, "targets": tgt})
    info = {"chars": n, "eval_start": cut, "unknown": int((ids == UNKNOWN_ID).sum())}
    return out[0], out[1], info


def vocab_json(text_rel):
    return {
        "vocab_size": VOCAB_SIZE,
        "unknown_id": UNKNOWN_ID,
        "lowercase": True,
        "context": TEXT_CONTEXT,
        "text": text_rel.replace(os.sep, "/"),
        "note": "id i decodes to chars[i]; the text is lower-cased, then every character "
                "not in chars[1:] maps to unknown_id (decoded as U+FFFD). code_points[i] is "
                "ord(chars[i]).",
        "chars": ["\ufffd"] + list(VOCAB_CHARS),
        "code_points": [0xFFFD] + [ord(c) for c in VOCAB_CHARS],
    }


def check_text_arrays(arrays, text, kind):
    tok, tgt = arrays["tokens"], arrays["targets"]
    if tok.dtype != np.int64 or tgt.dtype != np.int64 or tok.shape != tgt.shape or \
            tok.shape[1:] != (TEXT_BATCH, TEXT_CONTEXT):
        fail(f"tiny_gpt {kind}: tokens {tok.dtype}{tok.shape}, targets {tgt.dtype}{tgt.shape}")
    if tok.min() < 0 or tok.max() >= VOCAB_SIZE or tgt.min() < 0 or tgt.max() >= VOCAB_SIZE:
        fail(f"tiny_gpt {kind}: ids outside 0..{VOCAB_SIZE - 1}")
    if not np.array_equal(tok[..., 1:], tgt[..., :-1]):
        fail(f"tiny_gpt {kind}: targets are not the tokens shifted by one")
    # Every window (tokens + its last target) is a substring of the lower-cased text.
    chars = np.array(["\ufffd"] + list(VOCAB_CHARS))
    lower = text.lower()
    for b in range(0, tok.shape[0], max(1, tok.shape[0] // 50)):
        for r in range(TEXT_BATCH):
            s = "".join(chars[tok[b, r]]) + chars[tgt[b, r, -1]]
            if s not in lower:
                fail(f"tiny_gpt {kind}: batch {b} row {r} is not a window of the text")


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="See models/README.md ('Training data') for what each file holds.")
    ap.add_argument("--out", default=HERE,
                    help="output folder (default: the models/ folder of this script)")
    ap.add_argument("--digits", default=os.path.join(HERE, "digits.npz"),
                    help="the digits data set (default: models/digits.npz)")
    ap.add_argument("--text", default=os.path.join(HERE, TEXT_REL),
                    help=f"the tiny_gpt corpus (default: models/{TEXT_REL})")
    ap.add_argument("--extract-text", metavar="RDATA_RDB",
                    help="first (re)write --text from /usr/lib/R/site-library/janeaustenr/"
                         "data/Rdata.rdb of the Debian package r-cran-janeaustenr")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.extract_text:
        extract_text(a.extract_text, a.text)

    written = []
    (xtr, ytr), (xev, yev) = digits_splits(a.digits)
    for model in ("mlp", "cnn"):
        for split, (x, y) in (("train", (xtr, ytr)), ("eval", (xev, yev))):
            arrays = digits_arrays(model, x, y)
            written.append((os.path.join(a.out, f"{model}.{split}.npz"), arrays))

    if not os.path.exists(a.text):
        fail(f"{a.text}: not found (see --extract-text)")
    with open(a.text, encoding="ascii", newline="") as f:
        text = f.read()
    train, evl, info = text_arrays(text)
    check_text_arrays(train, text, "train")
    check_text_arrays(evl, text, "eval")
    written.append((os.path.join(a.out, "tiny_gpt.train.npz"), train))
    written.append((os.path.join(a.out, "tiny_gpt.eval.npz"), evl))

    for path, arrays in written:
        write_npz(path, arrays)
        check_npz(path, arrays)
    vocab_path = os.path.join(a.out, "tiny_gpt.vocab.json")
    with open(vocab_path, "w", encoding="ascii", newline="\n") as f:
        json.dump(vocab_json(TEXT_REL), f, indent=1, ensure_ascii=True)
        f.write("\n")

    for path, arrays in written:
        print(f"{os.path.relpath(path)}: {describe(arrays)} | {os.path.getsize(path)} bytes "
              f"| sha256 {sha256(path)[:16]}")
    print(f"{os.path.relpath(vocab_path)}: {VOCAB_SIZE} ids | sha256 {sha256(vocab_path)[:16]}")
    print(f"digits: labels per class train {np.bincount(ytr, minlength=10).tolist()}, "
          f"eval {np.bincount(yev, minlength=10).tolist()}")
    print(f"text: {info['chars']} characters, eval from character {info['eval_start']} "
          f"({text[info['eval_start']:info['eval_start'] + 40]!r}...), "
          f"{info['unknown']} mapped to the unknown id | numpy {np.__version__}")


if __name__ == "__main__":
    main()
