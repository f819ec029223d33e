"""The real datasets in their official formats, verified, read with the
standard library; and synthetic data of the same shape.

Layout: `<data_dir>/<dataset>/<official file name>`, e.g.
`data/mnist/train-images-idx3-ubyte.gz`. CIFAR-10 and PTB are read straight
from their official archives, or from the files that `tar xzf` extracts
from them into the same folder.

Checksums. Every file is read into memory, hashed, compared with the
official digest and only then parsed, so the bytes parsed are the bytes
verified. SHA-256 is the check wherever an official or widely published
value exists (MNIST: tensorflow-datasets; the CIFAR-10 archive: Keras);
the MD5s that the dataset sites and torchvision/torchtext/Paddle publish
are checked as well. For three layouts only an MD5 is published anywhere we
could find (the extracted CIFAR-10 batches, simple-examples.tgz and its PTB
text files): those are verified by MD5 and results say so.

Custom checksums (tests, the generated-data benchmark) replace the
official table only when passed explicitly as an argument; they must name a
SHA-256 for every file read, and results label the dataset `<name>-custom`,
so a run on unofficial files can never pass for the real dataset. Nothing
(no variable, no file in the data folder) turns verification off.
"""
import gzip
import hashlib
import io
import os
import pickle
import random
import struct
import tarfile
from collections import namedtuple

from .errors import HarnessError

# urls: official location first, then well-known mirrors with the same bytes.
FileSpec = namedtuple("FileSpec", "name sha256 md5 size urls")
# A set of files that together hold the dataset; the first layout of a
# dataset is what `invoke data` downloads.
Layout = namedtuple("Layout", "name files")
# kind: "images" (uint8 pixels, channels-first) or "tokens" (a word stream).
Dataset = namedtuple("Dataset", "name kind sample_shape classes train_count "
                                "test_count layouts source")

_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
               "https://storage.googleapis.com/cvdf-datasets/mnist/",
               "http://yann.lecun.com/exdb/mnist/")


def _mnist_file(name, sha256, md5, size):
    return FileSpec(name, sha256, md5, size,
                    tuple(base + name for base in _MNIST_URLS))


_CIFAR_BATCHES = (  # MD5s as torchvision publishes them; no SHA-256 exists.
    ("data_batch_1", "c99cafc152244af753f735de768cd75f"),
    ("data_batch_2", "d4bba439e000b95fd0a9bffe97cbabec"),
    ("data_batch_3", "54ebc095f3ab1f0389bbae665268c751"),
    ("data_batch_4", "634d18415352ddfa80567beed471001a"),
    ("data_batch_5", "482c414d41f54cd18b22e5b47cb7c3cb"),
    ("test_batch", "40351d587109b95175f43aff81a1287e"),
)
_PTB_TEXT = (  # MD5s as torchtext publishes them (the simple-examples files).
    ("ptb.train.txt", "f26c4b92c5fdc7b3f8c7cdcb991d8420"),
    ("ptb.valid.txt", "aa0affc06ff7c36e977d7cd49e3839bf"),
    ("ptb.test.txt", "8b80168b89c18661a38ef683c0dc3721"),
)

DATASETS = dict((d.name, d) for d in (
    Dataset("mnist", "images", (1, 28, 28), 10, 60000, 10000, (
        Layout("idx-gz", (
            # SHA-256 and sizes: tensorflow-datasets url_checksums/mnist.txt;
            # MD5: torchvision.datasets.MNIST.resources.
            _mnist_file("train-images-idx3-ubyte.gz",
                        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                        "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
            _mnist_file("train-labels-idx1-ubyte.gz",
                        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                        "d53e105ee54ea40749a09fcbcd1e9432", 28881),
            _mnist_file("t10k-images-idx3-ubyte.gz",
                        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                        "9fb629c4189551a2d022fa330f9573f3", 1648877),
            _mnist_file("t10k-labels-idx1-ubyte.gz",
                        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                        "ec29112dd5afa0611ce80d1b7f02629c", 4542),
        )),
    ), "http://yann.lecun.com/exdb/mnist/"),
    Dataset("cifar10", "images", (3, 32, 32), 10, 50000, 10000, (
        Layout("archive", (
            # SHA-256: keras.datasets.cifar10; MD5: the CIFAR page and
            # torchvision.datasets.CIFAR10.tgz_md5.
            FileSpec("cifar-10-python.tar.gz",
                     "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                     "c58f30108f718f92721af3b95e74349a", 170498071,
                     ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",)),
        )),
        Layout("extracted", tuple(
            FileSpec("cifar-10-batches-py/" + name, None, md5, None, ())
            for name, md5 in _CIFAR_BATCHES)),
    ), "https://www.cs.toronto.edu/~kriz/cifar.html"),
    Dataset("ptb", "tokens", (32,), 10000, None, None, (
        Layout("archive", (
            # MD5: PaddlePaddle's dataset/imikolov.py; no SHA-256 published.
            FileSpec("simple-examples.tgz", None,
                     "30177ea32e27c525793142b6bf2c8e2d", None,
                     ("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",)),
        )),
        Layout("extracted", tuple(
            FileSpec("simple-examples/data/" + name, None, md5, None, ())
            for name, md5 in _PTB_TEXT)),
    ), "http://www.fit.vutbr.cz/~imikolov/rnnlm/"),
))

# The dataset each real-data network trains on.
NETWORK_DATASETS = {"fcn-r": "mnist", "alexnet-r": "cifar10",
                    "resnet-56": "cifar10", "lstm": "ptb"}

PTB_VOCABULARY = 10000

# images: uint8 pixels, count x prod(sample_shape), channels-first, C order;
# labels: one uint8 class per sample. For PTB, `tokens` holds the word ids of
# the split as one stream (a list of ints), images/labels are None, and a
# sample is a window: inputs tokens[i*steps:(i+1)*steps], targets the same
# window shifted by one word, so `count` is (len(tokens) - 1) // steps.
Split = namedtuple("Split", "count images labels tokens")
Loaded = namedtuple("Loaded", "dataset train test info")


def get(name):
    try:
        return DATASETS[name]
    except KeyError:
        raise HarnessError("unknown dataset {!r}; valid datasets: {}".format(
            name, ", ".join(sorted(DATASETS))))


def for_network(network_name):
    """The dataset a network trains on, or None for synthetic-only ones."""
    return NETWORK_DATASETS.get(network_name)


# --- verification -------------------------------------------------------------

def digests(data):
    return {"sha256": hashlib.sha256(data).hexdigest(),
            "md5": hashlib.md5(data).hexdigest()}


def verify(path, data, spec, custom=None):
    """Compare the bytes of `path` with the expected digests; returns what
    was checked ("sha256", "md5", "sha256+md5"). `custom` (a SHA-256) replaces
    the official digests."""
    actual = digests(data)
    if custom is not None:
        expected = {"sha256": custom}
    else:
        expected = {"sha256": spec.sha256, "md5": spec.md5}
    checked = []
    for algorithm in ("sha256", "md5"):
        want = expected.get(algorithm)
        if want is None:
            continue
        if actual[algorithm] != want.lower():
            raise HarnessError("{}: {} mismatch: expected {}, got {} (a "
                               "corrupt or different file; delete it and run "
                               "`invoke data` again)".format(
                                   path, algorithm, want, actual[algorithm]))
        checked.append(algorithm)
    if not checked:
        raise HarnessError("{}: no checksum to verify against".format(path))
    return "+".join(checked)


def placement(dataset, data_dir):
    """Lines telling a user which files to put where (the first layout)."""
    folder = os.path.join(data_dir, dataset.name)
    lines = []
    for spec in dataset.layouts[0].files:
        where = os.path.join(folder, spec.name)
        source = spec.urls[0] if spec.urls else dataset.source
        lines.append("{}  (from {})".format(where, source))
    return lines


def locate(name, data_dir):
    """(layout, [(FileSpec, path)]) of the first complete layout of dataset
    `name` under `data_dir`, or a HarnessError naming what to place where."""
    dataset = get(name)
    folder = os.path.join(data_dir, dataset.name)
    if not os.path.isdir(data_dir):
        raise HarnessError("data folder {} does not exist; run `invoke data "
                           "--dataset {} --data-dir {}` or place: {}".format(
                               data_dir, name, data_dir,
                               "; ".join(placement(dataset, data_dir))))
    for layout in dataset.layouts:
        paths = [(spec, os.path.join(folder, spec.name))
                 for spec in layout.files]
        if all(os.path.isfile(path) for _, path in paths):
            return layout, paths
    missing = [path for spec, path in
               ((s, os.path.join(folder, s.name))
                for s in dataset.layouts[0].files) if not os.path.isfile(path)]
    raise HarnessError("{} files missing: {}; run `invoke data --dataset {} "
                       "--data-dir {}` or place: {}".format(
                           name, ", ".join(missing), name, data_dir,
                           "; ".join(placement(dataset, data_dir))))


def check_custom(checksums, layout, name):
    if checksums is None:
        return
    if not isinstance(checksums, dict):
        raise HarnessError("custom checksums must map file names to SHA-256 "
                           "digests, got {!r}".format(checksums))
    missing = [s.name for s in layout.files if not checksums.get(s.name)]
    if missing:
        raise HarnessError("custom checksums for {} give no SHA-256 for {}: "
                           "every file read must be verified".format(
                               name, ", ".join(missing)))


def read_verified(name, data_dir, checksums=None):
    """{file name: bytes} of the dataset's files, each verified, with the
    per-file record that results carry."""
    layout, paths = locate(name, data_dir)
    check_custom(checksums, layout, name)
    contents, records = {}, []
    for spec, path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except (IOError, OSError) as exc:
            raise HarnessError("cannot read {}: {}".format(path, exc.strerror))
        checked = verify(path, data, spec,
                         None if checksums is None else checksums[spec.name])
        record = {"name": spec.name, "bytes": len(data),
                  "verified_by": checked}
        record.update(digests(data))
        records.append(record)
        contents[spec.name] = data
    return layout, contents, records


def manifest_digest(records):
    """One SHA-256 for a set of files: over "sha256  name" lines, sorted."""
    lines = sorted("{}  {}\n".format(r["sha256"], r["name"]) for r in records)
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def label(name, records, custom):
    """The cell's `dataset`: "mnist sha256:<manifest>", with "-custom" when
    the files were checked against custom checksums."""
    return "{}{} sha256:{}".format(name, "-custom" if custom else "",
                                   manifest_digest(records))


# --- MNIST: IDX in gzip ---------------------------------------------------------

def parse_idx(data, what):
    """(dims, payload bytes) of an uncompressed IDX file of unsigned bytes."""
    if len(data) < 4:
        raise HarnessError("{}: not an IDX file (too short)".format(what))
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise HarnessError("{}: not an IDX file of unsigned bytes (magic "
                           "{!r})".format(what, data[:4]))
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    payload = data[4 + 4 * ndim:]
    count = 1
    for d in dims:
        count *= d
    if len(payload) != count:
        raise HarnessError("{}: IDX header says {} values, file has {}".format(
            what, count, len(payload)))
    return dims, payload


def _gunzip(data, what):
    try:
        return gzip.decompress(data)
    except (IOError, OSError, EOFError) as exc:
        raise HarnessError("{}: not a gzip file ({})".format(what, exc))


def _mnist_split(contents, prefix):
    images_name = "{}-images-idx3-ubyte.gz".format(prefix)
    labels_name = "{}-labels-idx1-ubyte.gz".format(prefix)
    dims, images = parse_idx(_gunzip(contents[images_name], images_name),
                             images_name)
    ldims, labels = parse_idx(_gunzip(contents[labels_name], labels_name),
                              labels_name)
    if len(dims) != 3 or dims[1:] != (28, 28) or len(ldims) != 1:
        raise HarnessError("{}: expected N x 28 x 28 images, got {}".format(
            images_name, dims))
    if dims[0] != ldims[0]:
        raise HarnessError("{} has {} images but {} has {} labels".format(
            images_name, dims[0], labels_name, ldims[0]))
    _check_labels(labels, 10, labels_name)
    return Split(dims[0], images, labels, None)


def _check_labels(labels, classes, what):
    if labels and max(bytearray(labels)) >= classes:
        raise HarnessError("{}: label {} out of range 0..{}".format(
            what, max(bytearray(labels)), classes - 1))


# --- CIFAR-10: pickled batches ---------------------------------------------------

class _Array(object):
    """Stands in for the numpy array in a CIFAR batch: the pickle's state
    holds shape, dtype and the raw bytes, which is all we need."""

    def __setstate__(self, state):
        self.state = state


class _Dtype(object):
    def __init__(self, kind):
        self.kind = kind

    def __setstate__(self, state):
        self.state = state


def _reconstruct(cls, shape, typecode):
    return _Array()


def _dtype(kind, align=False, copy=False):
    return _Dtype(kind)


def _latin1(text, encoding):
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(text, "latin1").
    if encoding != "latin1":
        raise pickle.UnpicklingError("unexpected encoding {!r}".format(encoding))
    return text.encode("latin-1")


_NDARRAY = object()
_ALLOWED_GLOBALS = {
    ("_codecs", "encode"): _latin1,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _dtype,
}


class _BatchUnpickler(pickle.Unpickler):
    # The batches are Python 2 pickles of numpy arrays. Only the three
    # globals a uint8 array needs are resolved, to stand-ins, so reading a
    # batch neither needs numpy nor can run code from the file.
    def find_class(self, module, name):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError("unexpected global {}.{}".format(
                module, name))


def _raw_bytes(value):
    # Python 2 str payloads arrive as latin-1 text: the bytes are unchanged.
    return value.encode("latin-1") if isinstance(value, str) else bytes(value)


def parse_cifar_batch(data, what):
    """(count, pixels, labels) of one CIFAR-10 python batch."""
    try:
        batch = _BatchUnpickler(io.BytesIO(data), encoding="latin1").load()
    except Exception as exc:  # any malformed pickle
        raise HarnessError("{}: not a CIFAR-10 python batch ({})".format(
            what, exc))
    if not isinstance(batch, dict) or "data" not in batch or \
            "labels" not in batch:
        raise HarnessError("{}: a CIFAR-10 batch is a dict with 'data' and "
                           "'labels'".format(what))
    array = batch["data"]
    state = getattr(array, "state", None)
    if not isinstance(state, tuple) or len(state) != 5:
        raise HarnessError("{}: 'data' is not a pickled array".format(what))
    _, shape, dtype, _, raw = state
    if not isinstance(dtype, _Dtype) or dtype.kind != "u1":
        raise HarnessError("{}: 'data' must be uint8".format(what))
    if len(shape) != 2 or shape[1] != 3072:
        raise HarnessError("{}: 'data' must be N x 3072, got {}".format(
            what, shape))
    pixels = _raw_bytes(raw)
    labels = bytes(bytearray(batch["labels"]))
    if len(pixels) != shape[0] * 3072 or len(labels) != shape[0]:
        raise HarnessError("{}: {} images, {} pixel bytes, {} labels do not "
                           "match".format(what, shape[0], len(pixels),
                                          len(labels)))
    _check_labels(labels, 10, what)
    return shape[0], pixels, labels


def _archive_members(data, what):
    """{member name without a leading ./: bytes} of a .tar.gz archive."""
    try:
        members = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive.getmembers():
                if member.isfile():
                    name = member.name[2:] if member.name.startswith("./") \
                        else member.name
                    members[name] = archive.extractfile(member).read()
        return members
    except (tarfile.TarError, IOError, OSError, EOFError) as exc:
        raise HarnessError("{}: not a readable .tar.gz archive ({})".format(
            what, exc))


def _member(members, name, archive):
    try:
        return members[name]
    except KeyError:
        raise HarnessError("{} has no member {}".format(archive, name))


def _cifar_splits(layout, contents):
    if layout.name == "archive":
        archive = layout.files[0].name
        members = _archive_members(contents[archive], archive)
        batches = dict(("cifar-10-batches-py/" + n,
                        _member(members, "cifar-10-batches-py/" + n, archive))
                       for n, _ in _CIFAR_BATCHES)
    else:
        batches = contents
    splits = []
    for names in (["data_batch_{}".format(i) for i in range(1, 6)],
                  ["test_batch"]):
        count, pixels, labels = 0, [], []
        for n in names:
            c, p, l = parse_cifar_batch(batches["cifar-10-batches-py/" + n], n)
            count += c
            pixels.append(p)
            labels.append(l)
        splits.append(Split(count, b"".join(pixels), b"".join(labels), None))
    return splits


# --- PTB: the simple-examples text files ---------------------------------------

def ptb_words(text):
    """Words of a PTB file, with <eos> ending each line (as the TensorFlow
    and Zaremba et al. readers do)."""
    words = []
    for line in text.splitlines():
        words.extend(line.split())
        words.append("<eos>")
    return words


def ptb_vocabulary(train_words, size=PTB_VOCABULARY):
    """{word: id}, most frequent first, ties by word (the TensorFlow PTB
    tutorial's order)."""
    counts = {}
    for w in train_words:
        counts[w] = counts.get(w, 0) + 1
    if len(counts) > size:
        raise HarnessError("ptb.train.txt has {} distinct words; the network's "
                           "vocabulary is {}".format(len(counts), size))
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict((w, i) for i, (w, _) in enumerate(ordered))


def _ptb_splits(layout, contents):
    if layout.name == "archive":
        archive = layout.files[0].name
        members = _archive_members(contents[archive], archive)
        texts = dict((n, _member(members, "simple-examples/data/" + n, archive))
                     for n, _ in _PTB_TEXT)
    else:
        texts = dict((n, contents["simple-examples/data/" + n])
                     for n, _ in _PTB_TEXT)
    words = dict((n, ptb_words(t.decode("utf-8"))) for n, t in texts.items())
    vocabulary = ptb_vocabulary(words["ptb.train.txt"])
    splits = []
    for n in ("ptb.train.txt", "ptb.test.txt"):
        try:
            ids = [vocabulary[w] for w in words[n]]
        except KeyError as exc:
            raise HarnessError("{}: word {} is not in the training "
                               "vocabulary".format(n, exc))
        splits.append(_token_split(ids))
    return splits


def _token_split(ids, steps=32):
    return Split((len(ids) - 1) // steps, None, None, ids)


# --- loading ----------------------------------------------------------------------

def _limit(split, count, sample_size):
    if count is None or count >= split.count:
        return split
    if split.tokens is not None:
        return _token_split(split.tokens[:count * sample_size + 1],
                            sample_size)
    return Split(count, split.images[:count * sample_size],
                 split.labels[:count], None)


def _size(shape):
    size = 1
    for d in shape:
        size *= d
    return size


def load(name, data_dir, checksums=None, train_samples=None,
         test_samples=None):
    """Read and verify dataset `name` from `data_dir`. `checksums` ({file
    name: SHA-256}) replaces the official digests (see the module's doc);
    `train_samples`/`test_samples` keep only the first samples of a split."""
    dataset = get(name)
    layout, contents, records = read_verified(name, data_dir, checksums)
    if name == "mnist":
        train, test = _mnist_split(contents, "train"), \
            _mnist_split(contents, "t10k")
    elif name == "cifar10":
        train, test = _cifar_splits(layout, contents)
    else:
        train, test = _ptb_splits(layout, contents)
    size = _size(dataset.sample_shape)
    train = _limit(train, train_samples, size)
    test = _limit(test, test_samples, size)
    custom = checksums is not None
    info = {
        "name": name,
        "source": "files",
        "label": label(name, records, custom),
        "checksums": "custom" if custom else "official",
        "layout": layout.name,
        "files": records,
        "train_samples": train.count,
        "test_samples": test.count,
        "sample_shape": list(dataset.sample_shape),
    }
    if dataset.kind == "tokens":
        info["train_tokens"] = len(train.tokens)
        info["test_tokens"] = len(test.tokens)
    return Loaded(dataset, train, test, info)


# --- synthetic data of the same shape -----------------------------------------------

def _noise(rng, count):
    return rng.getrandbits(8 * count).to_bytes(count, "little") if count else b""


def _bernoulli_table(probability):
    # bytes.translate maps each random byte to 0xFF with the probability:
    # a per-pixel coin flip at C speed.
    cut = int(round(256 * probability))
    return bytes(0xFF if v < cut else 0 for v in range(256))


_ON = _bernoulli_table(0.2)
_KEEP = _bernoulli_table(0.75)
_STRAY = _bernoulli_table(0.05)


def synthetic_images(dataset, count, rng):
    """Learnable, MNIST-like images: each class has a fixed sparse pattern
    (a fifth of the pixels on, random intensities); a sample keeps three
    quarters of its class's pixels and adds stray pixels (5%), so a network
    can fit it (the loss falls) while every sample differs."""
    size = _size(dataset.sample_shape)

    def number(data):
        return int.from_bytes(data, "little")

    patterns = [number(_noise(rng, size).translate(_ON)) &
                number(_noise(rng, size)) for _ in range(dataset.classes)]
    labels = bytearray(rng.randrange(dataset.classes) for _ in range(count))
    images = []
    for y in labels:
        keep = number(_noise(rng, size).translate(_KEEP))
        stray = number(_noise(rng, size).translate(_STRAY)) & \
            number(_noise(rng, size))
        images.append(((patterns[y] & keep) | stray).to_bytes(size, "little"))
    return b"".join(images), bytes(labels)


def synthetic_tokens(count, vocabulary, rng, distinct=200):
    """A word-id stream from a sparse Markov chain over `distinct` ids: the
    next word is one of two successors of the current word 90% of the time,
    so a language model can learn it."""
    ids = rng.sample(range(vocabulary), distinct)
    successors = dict((w, (rng.choice(ids), rng.choice(ids))) for w in ids)
    stream, current = [], ids[0]
    for _ in range(count):
        stream.append(current)
        current = rng.choice(successors[current]) if rng.random() < 0.9 \
            else rng.choice(ids)
    return stream


def synthetic(name, seed, train_samples=None, test_samples=None):
    """Synthetic data shaped like dataset `name` (the official sample counts
    unless given), deterministic in `seed`, labelled `synthetic`."""
    dataset = get(name)
    rng = random.Random(seed)
    info = {"name": name, "source": "synthetic", "label": "synthetic",
            "checksums": None, "layout": None, "files": [],
            "sample_shape": list(dataset.sample_shape)}
    if dataset.kind == "tokens":
        # PTB's own sizes: 929589 training and 82430 test words.
        steps = dataset.sample_shape[0]
        train_n = train_samples or (929589 - 1) // steps
        test_n = test_samples or (82430 - 1) // steps
        stream = synthetic_tokens((train_n + test_n) * steps + 2,
                                  dataset.classes, rng)
        cut = train_n * steps + 1
        train = _token_split(stream[:cut], steps)
        test = _token_split(stream[cut:], steps)
        info.update(train_tokens=len(train.tokens), test_tokens=len(test.tokens),
                    train_samples=train.count, test_samples=test.count)
        return Loaded(dataset, train, test, info)
    train_n = train_samples or dataset.train_count
    test_n = test_samples or dataset.test_count
    images, labels = synthetic_images(dataset, train_n + test_n, rng)
    size = _size(dataset.sample_shape)
    train = Split(train_n, images[:train_n * size], labels[:train_n], None)
    test = Split(test_n, images[train_n * size:], labels[train_n:], None)
    info.update(train_samples=train_n, test_samples=test_n)
    return Loaded(dataset, train, test, info)
