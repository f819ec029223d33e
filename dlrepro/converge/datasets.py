"""Datasets on the host: download the official files (verified, atomically),
say where to place them when the network does not allow, and write small
files in the exact official formats for tests and the generated-data
benchmark. The formats and the official checksums live in
harness/data/datasets.py, which the harness reads the same files with."""
import gzip
import hashlib
import http.client
import io
import os
import pickle
import random
import struct
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from harness.data import datasets as hd
from harness.errors import HarnessError

from dlrepro import ROOT
from dlrepro.errors import UserError

DEFAULT_DATA_DIR = ROOT / "data"
CHUNK = 1 << 16


def get(name):
    try:
        return hd.get(name)
    except HarnessError as exc:
        raise UserError(str(exc))


# --- download -------------------------------------------------------------------

# What urllib opens; anything else it refuses with a ValueError.
MIRROR_SCHEMES = ("http", "https", "ftp", "file")


def check_mirror(mirror):
    """UserError unless `mirror` is a base URL urllib can open."""
    try:
        parts = urllib.parse.urlsplit(mirror)
        parts.port  # read for its ValueError: a port that is no number
    except ValueError as exc:  # "Invalid IPv6 URL", "Port could not be..."
        raise UserError(f"--mirror {mirror!r} is not a URL: {exc}")
    if parts.scheme not in MIRROR_SCHEMES or \
            not (parts.netloc or parts.scheme == "file"):
        raise UserError(f"--mirror must be a base URL (http://HOST/PATH, "
                        f"https://, ftp:// or file:///PATH), got {mirror!r}")


def _sources(spec, mirror):
    if mirror:
        return [mirror.rstrip("/") + "/" + spec.name.rsplit("/", 1)[-1]]
    return list(spec.urls)


def _fetch(url, target, timeout, progress):
    """Download `url` into a temporary file next to `target`; returns
    (temporary path, digests) or raises what download() records as that
    source's problem."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=target.parent)
    sha256, md5 = hashlib.sha256(), hashlib.md5()
    try:
        with os.fdopen(fd, "wb") as out, \
                urllib.request.urlopen(url, timeout=timeout) as response:
            total = response.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            done = 0
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                sha256.update(chunk)
                md5.update(chunk)
                done += len(chunk)
                progress(done, total)
            if total is not None and done != total:
                # http.client reads a connection closed early as the end.
                raise urllib.error.ContentTooShortError(
                    f"cut short: {done} of {total} bytes", None)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, {"sha256": sha256.hexdigest(), "md5": md5.hexdigest()}


def _mismatch(spec, actual, custom):
    expected = {"sha256": custom} if custom else \
        {"sha256": spec.sha256, "md5": spec.md5}
    for algorithm in ("sha256", "md5"):
        want = expected.get(algorithm)
        if want and actual[algorithm] != want:
            return f"{algorithm} mismatch: expected {want}, got {actual[algorithm]}"
    return None


def _verified_on_disk(spec, path, custom):
    try:
        data = path.read_bytes()
    except OSError:
        return False
    try:
        hd.verify(str(path), data, spec, custom)
        return True
    except HarnessError:
        return False


def download(name, data_dir=DEFAULT_DATA_DIR, *, mirror=None, checksums=None,
             timeout=60, log=print, progress=None):
    """Download dataset `name`'s official files into `data_dir/<name>/`.

    Each file goes to a temporary file beside its target, is verified, and is
    renamed into place only then; files already present and verified are
    kept. `mirror` replaces the official URLs with one base URL; `checksums`
    ({file name: SHA-256}) replaces the official digests (tests only). Returns
    the paths. Raises UserError naming each file that could not be had, what
    went wrong and where to place it by hand.
    """
    dataset = get(name)
    if mirror:
        check_mirror(mirror)
    data_dir = Path(data_dir)
    layout = dataset.layouts[0]
    if checksums is not None:
        try:
            hd.check_custom(checksums, layout, name)
        except HarnessError as exc:
            raise UserError(str(exc))
    progress = progress or (lambda label, done, total: None)
    folder = data_dir / dataset.name
    paths, failures = [], []
    for spec in layout.files:
        target = folder / spec.name
        custom = None if checksums is None else checksums[spec.name]
        paths.append(target)
        if target.is_file() and _verified_on_disk(spec, target, custom):
            log(f"{target}: present and verified")
            continue
        problems = []
        for url in _sources(spec, mirror):
            log(f"downloading {url}")
            try:
                tmp, actual = _fetch(url, target, timeout,
                                     lambda d, t: progress(spec.name, d, t))
            # HTTPException: a reply that is no HTTP (BadStatusLine), a
            # chunked one cut short (IncompleteRead; _fetch checks a plain
            # one's length itself), a URL http.client refuses (InvalidURL);
            # ValueError: one urllib refuses.
            except (OSError, ValueError, http.client.HTTPException,
                    urllib.error.URLError) as exc:
                reason = getattr(exc, "reason", None) or exc
                problems.append(f"{url}: {reason}")
                continue
            mismatch = _mismatch(spec, actual, custom)
            if mismatch:
                os.unlink(tmp)
                problems.append(f"{url}: {mismatch}")
                continue
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
            log(f"{target}: verified ({'custom sha256' if custom else 'official checksums'})")
            break
        else:
            failures.append((spec, target, problems))
    if failures:
        what, where = [], []
        for spec, target, problems in failures:
            more = f"; {len(problems) - 1} more source(s) failed" \
                if len(problems) > 1 else ""
            what.append(f"{spec.name} ({problems[0]}{more})")
            where.append(f"{target} from {spec.urls[0] if spec.urls else dataset.source}")
        raise UserError(f"could not download {name}: {', '.join(what)}. "
                        f"Place the files by hand: {', '.join(where)}")
    return paths


def status(name, data_dir=DEFAULT_DATA_DIR):
    """One line per layout file: present/verified/missing (no download)."""
    dataset = get(name)
    lines = []
    try:
        layout, _contents, records = hd.read_verified(name, str(data_dir))
    except HarnessError as exc:
        return [f"{name}: {exc}"]
    for record in records:
        lines.append(f"{name}/{record['name']}: ok ({record['verified_by']}, "
                     f"{record['bytes']} bytes)")
    lines.append(f"{name}: {hd.label(name, records, False)} "
                 f"({dataset.name} layout {layout.name})")
    return lines


# --- small files in the official formats (tests, generated-data benchmark) ------

def _idx(dims, payload):
    header = struct.pack(">HBB", 0, 0x08, len(dims))
    header += struct.pack(">" + "I" * len(dims), *dims)
    return header + payload


def _gzip(data):
    # mtime 0: the same content gives the same bytes, hence the same digest.
    return gzip.compress(data, mtime=0)


def _short(text):
    raw = text.encode("latin-1")
    return pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw


def _int(value):
    if value < 256:
        return pickle.BININT1 + bytes([value])
    if value < 65536:
        return pickle.BININT2 + struct.pack("<H", value)
    return pickle.BININT + struct.pack("<i", value)


def cifar_batch_pickle(batch_label, labels, pixels, filenames):
    """A CIFAR-10 python batch as the official files are: a Python 2
    cPickle (protocol 2) of {'batch_label', 'labels', 'data', 'filenames'}
    where 'data' is an N x 3072 uint8 numpy array (written here opcode by
    opcode, so no numpy is needed)."""
    count = len(labels)
    out = [pickle.PROTO + b"\x02", pickle.EMPTY_DICT, pickle.MARK]
    out += [_short("batch_label"), _short(batch_label)]
    out += [_short("labels"), pickle.EMPTY_LIST]
    for start in range(0, count, 1000):  # cPickle appends in groups of 1000
        out.append(pickle.MARK)
        out += [_int(v) for v in labels[start:start + 1000]]
        out.append(pickle.APPENDS)
    out += [_short("data"),
            pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n",
            pickle.GLOBAL + b"numpy\nndarray\n",
            _int(0), pickle.TUPLE1, _short("b"), pickle.TUPLE3, pickle.REDUCE,
            pickle.MARK, _int(1), _int(count), _int(3072), pickle.TUPLE2,
            pickle.GLOBAL + b"numpy\ndtype\n", _short("u1"), _int(0), _int(1),
            pickle.TUPLE3, pickle.REDUCE,
            pickle.MARK, _int(3), _short("|"), pickle.NONE, pickle.NONE,
            pickle.NONE, pickle.BININT + struct.pack("<i", -1),
            pickle.BININT + struct.pack("<i", -1), _int(0), pickle.TUPLE,
            pickle.BUILD, pickle.NEWFALSE,
            pickle.BINSTRING + struct.pack("<i", len(pixels)), pixels,
            pickle.TUPLE, pickle.BUILD]
    out += [_short("filenames"), pickle.EMPTY_LIST]
    for start in range(0, count, 1000):
        out.append(pickle.MARK)
        out += [_short(f) for f in filenames[start:start + 1000]]
        out.append(pickle.APPENDS)
    out += [pickle.SETITEMS, pickle.STOP]
    return b"".join(out)


def _tar_gz(members):
    """A .tar.gz of {name: bytes}, deterministic (fixed mtime, owner)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        folders = sorted({name.rsplit("/", 1)[0] for name in members
                          if "/" in name})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return _gzip(buffer.getvalue())


def _mnist_files(train, test):
    files = {}
    for prefix, split in (("train", train), ("t10k", test)):
        files[f"{prefix}-images-idx3-ubyte.gz"] = _gzip(
            _idx((split.count, 28, 28), split.images))
        files[f"{prefix}-labels-idx1-ubyte.gz"] = _gzip(
            _idx((split.count,), split.labels))
    return files


def _split_batches(count, parts):
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def _cifar_files(train, test, layout):
    batches = {}
    size = 3072
    for i, (start, end) in enumerate(_split_batches(train.count, 5), 1):
        batches[f"data_batch_{i}"] = cifar_batch_pickle(
            f"training batch {i} of 5", list(train.labels[start:end]),
            train.images[start * size:end * size],
            [f"generated_{n:05d}.png" for n in range(start, end)])
    batches["test_batch"] = cifar_batch_pickle(
        "testing batch 1 of 1", list(test.labels), test.images,
        [f"generated_{n:05d}.png" for n in range(test.count)])
    members = {f"cifar-10-batches-py/{n}": b for n, b in batches.items()}
    if layout == "extracted":
        return members
    return {"cifar-10-python.tar.gz": _tar_gz(members)}


def _ptb_text(ids, rng):
    words, lines, line = [f"w{i}" for i in ids], [], []
    for w in words:
        line.append(w)
        if len(line) >= rng.randint(8, 30):
            lines.append(" " + " ".join(line) + " ")
            line = []
    if line:
        lines.append(" " + " ".join(line) + " ")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _ptb_files(train_samples, test_samples, seed, layout):
    rng = random.Random(seed)
    stream = hd.synthetic_tokens((train_samples + test_samples) * 32 + 64,
                                 hd.PTB_VOCABULARY, rng)
    cut = train_samples * 32 + 32
    # Every word of the test text must occur in the training text, as in PTB.
    everything = sorted(set(stream))
    texts = {"ptb.train.txt": _ptb_text(everything + stream[:cut], rng),
             "ptb.valid.txt": _ptb_text(stream[cut:cut + 64], rng),
             "ptb.test.txt": _ptb_text(stream[cut:], rng)}
    members = {f"simple-examples/data/{n}": t for n, t in texts.items()}
    if layout == "extracted":
        return members
    return {"simple-examples.tgz": _tar_gz(members)}


def generate(name, data_dir, train_samples, test_samples, seed=0,
             layout=None):
    """Write a small, learnable dataset `name` in the exact official format
    into `data_dir/<name>/`; returns {file name: SHA-256}, the custom
    checksums that reading these (unofficial) files needs."""
    dataset = get(name)
    layout = layout or dataset.layouts[0].name
    known = [l.name for l in dataset.layouts]
    if layout not in known:
        raise UserError(f"{name} has layouts {', '.join(known)}, not {layout!r}")
    if name == "ptb":
        files = _ptb_files(train_samples, test_samples, seed, layout)
    else:
        loaded = hd.synthetic(name, seed, train_samples, test_samples)
        files = (_mnist_files(loaded.train, loaded.test) if name == "mnist"
                 else _cifar_files(loaded.train, loaded.test, layout))
    folder = Path(data_dir) / dataset.name
    checksums = {}
    for relative, data in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        checksums[relative] = hashlib.sha256(data).hexdigest()
    return checksums


class ProgressPrinter:
    """Download progress on one line per file (rewritten in place on a
    terminal, every 10% otherwise)."""

    def __init__(self, stream, tty):
        self.stream, self.tty = stream, tty
        self.last = {}
        self.started = {}

    def __call__(self, label, done, total):
        now = time.monotonic()
        start = self.started.setdefault(label, now)
        mb = done / 1e6
        if total:
            pct = int(100 * done / total)
            text = f"  {label}: {mb:.1f}/{total / 1e6:.1f} MB ({pct}%)"
            step = pct // 10
        else:
            text = f"  {label}: {mb:.1f} MB"
            step = int(mb)
        rate = mb / (now - start) if now > start else 0.0
        text += f" {rate:.1f} MB/s"
        finished = total is not None and done >= total
        if self.tty:
            self.stream.write("\r" + text + ("\n" if finished else ""))
            self.stream.flush()
        elif self.last.get(label) != step or finished:
            self.stream.write(text + "\n")
        self.last[label] = step
