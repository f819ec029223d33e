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

This module holds the registry, the verification and `load`; the readers of
each format are in harness/data/formats.py, synthetic data in
harness/data/synthetic.py.
"""
import hashlib
import os
import random
from collections import namedtuple

from ..errors import HarnessError, named
from .formats import (Split, cifar_splits, mnist_split, ptb_splits,
                      sample_size, token_split)
from .synthetic import synthetic_splits
# Re-exported: the host and the tests name them as
# harness.data.datasets.<name>.
from .formats import (PTB_VOCABULARY, parse_cifar_batch, parse_idx,
                      ptb_vocabulary, ptb_words)
from .synthetic import synthetic_images, synthetic_tokens

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

# train and test are harness.data.formats.Split; info is the result's
# dataset record.
Loaded = namedtuple("Loaded", "dataset train test info")

__all__ = ["FileSpec", "Layout", "Dataset", "DATASETS", "NETWORK_DATASETS",
           "PTB_VOCABULARY", "Split", "Loaded", "get", "for_network",
           "digests", "verify", "placement", "locate", "check_custom",
           "read_verified", "manifest_digest", "label", "load", "synthetic",
           "parse_idx", "parse_cifar_batch", "ptb_words", "ptb_vocabulary",
           "synthetic_images", "synthetic_tokens"]


def get(name):
    """The dataset called `name`, or a HarnessError listing the valid ones."""
    return named(DATASETS, name, "dataset")


def for_network(network_name):
    """The dataset a network trains on, or None for synthetic-only ones."""
    return NETWORK_DATASETS.get(network_name)


# --- verification ------------------------------------------------------------

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
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise HarnessError("data folder {} is not a folder".format(data_dir))
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
    missing = [path + (" (not a regular file)" if os.path.exists(path)
                       else "")
               for path in (os.path.join(folder, s.name)
                            for s in dataset.layouts[0].files)
               if not os.path.isfile(path)]
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


# --- loading -----------------------------------------------------------------

def _limit(split, count, size):
    if count is None or count >= split.count:
        return split
    if split.tokens is not None:
        return token_split(split.tokens[:count * size + 1], size)
    return Split(count, split.images[:count * size],
                 split.labels[:count], None)


_READERS = {"mnist": lambda layout, contents: (
                mnist_split(contents, "train"), mnist_split(contents, "t10k")),
            "cifar10": cifar_splits, "ptb": ptb_splits}


def load(name, data_dir, checksums=None, train_samples=None,
         test_samples=None):
    """Read and verify dataset `name` from `data_dir`. `checksums` ({file
    name: SHA-256}) replaces the official digests (see the module's doc);
    `train_samples`/`test_samples` keep only the first samples of a split."""
    dataset = get(name)
    layout, contents, records = read_verified(name, data_dir, checksums)
    train, test = _READERS[name](layout, contents)
    size = sample_size(dataset.sample_shape)
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


def synthetic(name, seed, train_samples=None, test_samples=None):
    """Synthetic data shaped like dataset `name` (the official sample counts
    unless given), deterministic in `seed`, labelled `synthetic`."""
    dataset = get(name)
    train, test = synthetic_splits(dataset, random.Random(seed),
                                   train_samples, test_samples)
    info = {"name": name, "source": "synthetic", "label": "synthetic",
            "checksums": None, "layout": None, "files": [],
            "sample_shape": list(dataset.sample_shape),
            "train_samples": train.count, "test_samples": test.count}
    if dataset.kind == "tokens":
        info.update(train_tokens=len(train.tokens),
                    test_tokens=len(test.tokens))
    return Loaded(dataset, train, test, info)
