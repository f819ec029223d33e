"""The datasets' official formats, read with the standard library: MNIST's
IDX files in gzip, CIFAR-10's pickled Python batches and PTB's text files,
from their archives or from the files `tar xzf` extracts. Each reader takes
bytes that harness/data/datasets.py has already verified and returns Splits.
"""
import gzip
import io
import pickle
import struct
import tarfile
from collections import namedtuple

from ..errors import HarnessError

# images: uint8 pixels, count x prod(sample_shape), channels-first, C order;
# labels: one uint8 class per sample. For PTB, `tokens` holds the word ids of
# the split as one stream (a list of ints), images/labels are None, and a
# sample is a window: inputs tokens[i*steps:(i+1)*steps], targets the same
# window shifted by one word, so `count` is (len(tokens) - 1) // steps.
Split = namedtuple("Split", "count images labels tokens")

PTB_VOCABULARY = 10000
CIFAR_FOLDER = "cifar-10-batches-py/"
CIFAR_TRAIN = tuple("data_batch_{}".format(i) for i in range(1, 6))
CIFAR_TEST = ("test_batch",)
PTB_FOLDER = "simple-examples/data/"
PTB_FILES = ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")


def token_split(ids, steps=32):
    """A Split of a word-id stream in windows of `steps` words."""
    return Split((len(ids) - 1) // steps, None, None, ids)


def sample_size(shape):
    """Values per sample of `shape`."""
    size = 1
    for d in shape:
        size *= d
    return size


# --- MNIST: IDX in gzip ------------------------------------------------------

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


def gunzip(data, what):
    try:
        return gzip.decompress(data)
    except (IOError, OSError, EOFError) as exc:
        raise HarnessError("{}: not a gzip file ({})".format(what, exc))


def mnist_split(contents, prefix):
    """The Split of one MNIST prefix ("train" or "t10k")."""
    images_name = "{}-images-idx3-ubyte.gz".format(prefix)
    labels_name = "{}-labels-idx1-ubyte.gz".format(prefix)
    dims, images = parse_idx(gunzip(contents[images_name], images_name),
                             images_name)
    ldims, labels = parse_idx(gunzip(contents[labels_name], labels_name),
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


# --- CIFAR-10: pickled batches -----------------------------------------------

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
        raise pickle.UnpicklingError("unexpected encoding {!r}".format(
            encoding))
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


def archive_members(data, what):
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


def cifar_splits(layout, contents):
    """(train, test) Splits from the archive or the extracted batches."""
    if layout.name == "archive":
        archive = layout.files[0].name
        members = archive_members(contents[archive], archive)
        batches = dict((CIFAR_FOLDER + n,
                        _member(members, CIFAR_FOLDER + n, archive))
                       for n in CIFAR_TRAIN + CIFAR_TEST)
    else:
        batches = contents
    splits = []
    for names in (CIFAR_TRAIN, CIFAR_TEST):
        count, pixels, labels = 0, [], []
        for n in names:
            c, p, l = parse_cifar_batch(batches[CIFAR_FOLDER + n], n)
            count += c
            pixels.append(p)
            labels.append(l)
        splits.append(Split(count, b"".join(pixels), b"".join(labels), None))
    return splits


# --- PTB: the simple-examples text files -------------------------------------

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
        raise HarnessError("ptb.train.txt has {} distinct words; the "
                           "network's vocabulary is {}".format(len(counts),
                                                               size))
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict((w, i) for i, (w, _) in enumerate(ordered))


def ptb_splits(layout, contents):
    """(train, test) Splits of word ids, the vocabulary from the training
    text, from the archive or the extracted text files."""
    if layout.name == "archive":
        archive = layout.files[0].name
        members = archive_members(contents[archive], archive)
        texts = dict((n, _member(members, PTB_FOLDER + n, archive))
                     for n in PTB_FILES)
    else:
        texts = dict((n, contents[PTB_FOLDER + n]) for n in PTB_FILES)
    words = dict((n, ptb_words(t.decode("utf-8"))) for n, t in texts.items())
    vocabulary = ptb_vocabulary(words["ptb.train.txt"])
    splits = []
    for n in ("ptb.train.txt", "ptb.test.txt"):
        try:
            ids = [vocabulary[w] for w in words[n]]
        except KeyError as exc:
            raise HarnessError("{}: word {} is not in the training "
                               "vocabulary".format(n, exc))
        splits.append(token_split(ids))
    return splits
