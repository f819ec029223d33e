"""Dataset readers, checksum verification, synthetic data and downloads.

Files are generated in the exact official formats (no real download); a
loopback HTTP server stands in for the dataset sites."""
import functools
import gzip
import hashlib
import http.server
import pickle
import socket
import subprocess
import threading

import pytest

from cli import invoke
from dlrepro.converge import datasets as dd
from dlrepro.errors import UserError
from harness.data import datasets as hd
from harness.data import formats as hdf
from harness.errors import HarnessError

LAYOUTS = [(d, l.name) for d in sorted(hd.DATASETS)
           for l in hd.DATASETS[d].layouts]


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.mark.parametrize("name,layout", LAYOUTS,
                         ids=[f"{d}-{l}" for d, l in LAYOUTS])
def test_generated_files_read_back_exactly(data_dir, name, layout):
    checksums = dd.generate(name, data_dir, 40, 12, seed=3, layout=layout)
    assert sorted(checksums) == sorted(
        s.name for s in next(l for l in hd.get(name).layouts
                             if l.name == layout).files)
    loaded = hd.load(name, str(data_dir), checksums=checksums)
    info = loaded.info
    assert info["layout"] == layout and info["checksums"] == "custom"
    assert info["label"] == "{}-custom sha256:{}".format(
        name, hd.manifest_digest(info["files"]))
    for record in info["files"]:
        data = (data_dir / name / record["name"]).read_bytes()
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
        assert record["verified_by"] == "sha256"
    if name == "ptb":
        assert loaded.train.count == (len(loaded.train.tokens) - 1) // 32
        assert loaded.train.count >= 40 and loaded.test.count >= 1
        assert max(loaded.train.tokens) < hd.PTB_VOCABULARY
        return
    expected = hd.synthetic(name, 3, 40, 12)
    assert loaded.train == expected.train and loaded.test == expected.test
    assert (loaded.train.count, loaded.test.count) == (40, 12)


@pytest.mark.parametrize("name,layout", LAYOUTS,
                         ids=[f"{d}-{l}" for d, l in LAYOUTS])
def test_official_checksums_reject_other_files(data_dir, name, layout):
    dd.generate(name, data_dir, 20, 5, layout=layout)
    with pytest.raises(HarnessError) as info:
        hd.load(name, str(data_dir))
    message = str(info.value)
    spec = next(l for l in hd.get(name).layouts if l.name == layout).files[0]
    path = data_dir / name / spec.name
    algorithm = "sha256" if spec.sha256 else "md5"
    expected = spec.sha256 or spec.md5
    actual = hashlib.new(algorithm, path.read_bytes()).hexdigest()
    assert message.startswith(f"{path}: {algorithm} mismatch")
    assert f"expected {expected}, got {actual}" in message
    assert "\n" not in message


def test_corrupt_file_names_file_and_digests(data_dir):
    checksums = dd.generate("mnist", data_dir, 30, 10)
    path = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(HarnessError) as info:
        hd.load("mnist", str(data_dir), checksums=checksums)
    assert str(info.value).startswith(f"{path}: sha256 mismatch: expected "
                                      f"{checksums[path.name]}, got "
                                      f"{hashlib.sha256(data).hexdigest()}")


def test_custom_checksums_must_cover_every_file(data_dir):
    checksums = dd.generate("mnist", data_dir, 30, 10)
    del checksums["train-labels-idx1-ubyte.gz"]
    with pytest.raises(HarnessError, match="no SHA-256 for "
                       "train-labels-idx1-ubyte.gz: every file read must be "
                       "verified"):
        hd.load("mnist", str(data_dir), checksums=checksums)
    with pytest.raises(HarnessError, match="must map file names"):
        hd.load("mnist", str(data_dir), checksums=["not", "a", "dict"])


def test_official_table_checks_what_is_published():
    payload = b"some bytes"
    both = hd.FileSpec("f", hashlib.sha256(payload).hexdigest(),
                       hashlib.md5(payload).hexdigest(), None, ())
    md5_only = hd.FileSpec("f", None, hashlib.md5(payload).hexdigest(), None,
                           ())
    assert hd.verify("f", payload, both) == "sha256+md5"
    assert hd.verify("f", payload, md5_only) == "md5"
    nothing = hd.FileSpec("f", None, None, None, ())
    with pytest.raises(HarnessError, match="no checksum"):
        hd.verify("f", payload, nothing)
    # Every official file has a digest, and MNIST and the CIFAR-10 archive a
    # SHA-256 (the layouts without one are the documented MD5-only ones).
    for dataset in hd.DATASETS.values():
        for layout in dataset.layouts:
            for spec in layout.files:
                assert spec.sha256 or spec.md5
    assert all(s.sha256 for s in hd.get("mnist").layouts[0].files)
    assert hd.get("cifar10").layouts[0].files[0].sha256


def test_missing_folder_and_files_say_what_to_place_where(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(HarnessError) as info:
        hd.load("cifar10", str(missing))
    message = str(info.value)
    assert message.startswith(f"data folder {missing} does not exist")
    assert f"{missing}/cifar10/cifar-10-python.tar.gz  (from https://www.cs." \
           f"toronto.edu/~kriz/cifar-10-python.tar.gz)" in message
    assert "invoke data --dataset cifar10" in message
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"x")
    with pytest.raises(HarnessError) as info:
        hd.load("mnist", str(tmp_path))
    assert "mnist files missing: {}".format(
        tmp_path / "mnist" / "train-labels-idx1-ubyte.gz") in str(info.value)


def test_malformed_files_are_clear_errors():
    with pytest.raises(HarnessError, match="not an IDX file"):
        hd.parse_idx(b"\x00\x00\x0d\x03" + b"\x00" * 12, "x")
    with pytest.raises(HarnessError, match="header says 8 values, file has 7"):
        hd.parse_idx(b"\x00\x00\x08\x01\x00\x00\x00\x08" + b"\x00" * 7, "x")
    with pytest.raises(HarnessError, match="not a gzip file"):
        hdf.gunzip(b"plain", "x")
    with pytest.raises(HarnessError, match="not a readable .tar.gz"):
        hdf.archive_members(gzip.compress(b"not a tar"), "x")


def test_cifar_reader_runs_no_code_from_the_file():
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    blob = pickle.dumps({"data": Evil(), "labels": [1]}, protocol=2)
    with pytest.raises(HarnessError, match=r"unexpected global "
                                           r"(__builtin__|builtins)\.print"):
        hd.parse_cifar_batch(blob, "evil")


def test_ptb_words_and_vocabulary():
    words = hd.ptb_words(" the cat \n the dog <unk> \n")
    assert words == ["the", "cat", "<eos>", "the", "dog", "<unk>", "<eos>"]
    vocab = hd.ptb_vocabulary(words)
    assert vocab == {"<eos>": 0, "the": 1, "<unk>": 2, "cat": 3, "dog": 4}
    with pytest.raises(HarnessError, match="distinct words"):
        hd.ptb_vocabulary(words, size=3)


def test_samples_can_be_limited(data_dir):
    checksums = dd.generate("cifar10", data_dir, 50, 20, layout="extracted")
    loaded = hd.load("cifar10", str(data_dir), checksums, train_samples=7,
                     test_samples=3)
    assert (loaded.train.count, loaded.test.count) == (7, 3)
    assert len(loaded.train.images) == 7 * 3072
    assert loaded.info["train_samples"] == 7


def test_synthetic_is_deterministic_and_labelled():
    a = hd.synthetic("mnist", 5, 30, 10)
    b = hd.synthetic("mnist", 5, 30, 10)
    c = hd.synthetic("mnist", 6, 30, 10)
    assert a.train == b.train and a.train != c.train
    assert a.info["label"] == "synthetic" and a.info["files"] == []
    assert len(a.train.images) == 30 * 784 and set(a.train.labels) <= set(
        range(10))
    full = hd.synthetic("ptb", 1)
    assert full.train.count == (929589 - 1) // 32


def test_network_dataset_mapping():
    assert hd.NETWORK_DATASETS == {"fcn-r": "mnist", "alexnet-r": "cifar10",
                                   "resnet-56": "cifar10", "lstm": "ptb"}
    assert hd.for_network("fcn5") is None


def test_generated_cifar_batches_load_with_numpy(tmp_path, framework_python):
    """The generated batch is what torchvision/Keras read: pickle + numpy."""
    dd.generate("cifar10", tmp_path, 9, 4, seed=2, layout="extracted")
    script = (
        "import pickle, sys\n"
        "b = pickle.load(open(sys.argv[1], 'rb'), encoding='latin1')\n"
        "print(b['data'].dtype, b['data'].shape, sum(b['labels']),"
        " int(b['data'].sum()), b['batch_label'])\n")
    batch = tmp_path / "cifar10" / "cifar-10-batches-py" / "data_batch_1"
    out = subprocess.run([str(framework_python("mxnet")), "-c", script,
                          str(batch)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    _, pixels, labels = hd.parse_cifar_batch(batch.read_bytes(), "b")
    assert out.stdout.split() == ["uint8", f"({len(labels)},", "3072)",
                                  str(sum(labels)), str(sum(pixels)),
                                  "training", "batch", "1", "of", "5"]


# --- downloads against a loopback HTTP server --------------------------------

class _Server:
    def __init__(self, root, handler_class=None):
        handler = functools.partial(handler_class or _QuietHandler,
                                    directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.requests = []
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        self.server.requests.append(self.path)


@pytest.fixture
def served(tmp_path):
    """Generated MNIST files behind a loopback HTTP server."""
    checksums = dd.generate("mnist", tmp_path / "site", 25, 5, seed=9)
    server = _Server(tmp_path / "site" / "mnist")
    yield server, checksums
    server.close()


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_download_verifies_and_renames_into_place(tmp_path, served):
    server, checksums = served
    seen = []
    paths = dd.download("mnist", tmp_path / "data", mirror=server.url,
                        checksums=checksums, log=lambda m: None,
                        progress=lambda *a: seen.append(a))
    folder = tmp_path / "data" / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(checksums)
    assert paths == [folder / s.name for s in hd.get("mnist").layouts[0].files]
    for name, digest in checksums.items():
        data = (folder / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest
    sizes = dict((label, total) for label, _done, total in seen)
    assert sizes["t10k-labels-idx1-ubyte.gz"] == \
        (folder / "t10k-labels-idx1-ubyte.gz").stat().st_size
    loaded = hd.load("mnist", str(tmp_path / "data"), checksums)
    assert loaded.train.count == 25
    # A second call finds the verified files and fetches nothing.
    before = len(server.httpd.requests)
    log = []
    dd.download("mnist", tmp_path / "data", mirror=server.url,
                checksums=checksums, log=log.append)
    assert len(server.httpd.requests) == before
    assert all(line.endswith("present and verified") for line in log)


def test_download_replaces_a_corrupt_local_file(tmp_path, served):
    server, checksums = served
    folder = tmp_path / "data" / "mnist"
    folder.mkdir(parents=True)
    (folder / "train-images-idx3-ubyte.gz").write_bytes(b"truncated")
    dd.download("mnist", tmp_path / "data", mirror=server.url,
                checksums=checksums, log=lambda m: None)
    assert hashlib.sha256((folder / "train-images-idx3-ubyte.gz").read_bytes(
    )).hexdigest() == checksums["train-images-idx3-ubyte.gz"]


def test_download_rejects_a_corrupt_file(tmp_path, served):
    server, checksums = served
    site = tmp_path / "site" / "mnist" / "t10k-images-idx3-ubyte.gz"
    corrupt = site.read_bytes()[:-7] + b"garbage"
    site.write_bytes(corrupt)
    with pytest.raises(UserError) as info:
        dd.download("mnist", tmp_path / "data", mirror=server.url,
                    checksums=checksums, log=lambda m: None)
    message = str(info.value)
    name = "t10k-images-idx3-ubyte.gz"
    assert f"{name} ({server.url}/{name}:" \
           f" sha256 mismatch: expected {checksums[name]}," \
           f" got {hashlib.sha256(corrupt).hexdigest()})" in message
    folder = tmp_path / "data" / "mnist"
    # Nothing unverified lands: no target, no temporary file.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        n for n in checksums if n != "t10k-images-idx3-ubyte.gz")


def test_download_from_an_unreachable_url_says_where_to_place(tmp_path):
    mirror = f"http://127.0.0.1:{_closed_port()}/mnist"
    with pytest.raises(UserError) as info:
        dd.download("mnist", tmp_path / "data", mirror=mirror,
                    log=lambda m: None)
    message = str(info.value)
    assert message.startswith("could not download mnist: "
                              "train-images-idx3-ubyte.gz (" + mirror)
    assert "refused" in message.lower()
    for spec in hd.get("mnist").layouts[0].files:
        assert f"{tmp_path / 'data' / 'mnist' / spec.name} from {spec.urls[0]}" \
            in message
    assert list((tmp_path / "data" / "mnist").iterdir()) == []


class _CutShortHandler(_QuietHandler):
    """Promises 1000 bytes, sends 10 and closes the connection."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"x" * 10)
        self.close_connection = True


class _NotHttpHandler(_QuietHandler):
    """Answers with a line that is no HTTP status."""

    def do_GET(self):
        self.wfile.write(b"NOT HTTP\r\n\r\n")
        self.close_connection = True


@pytest.mark.parametrize("handler, says", [
    (_CutShortHandler, "cut short: 10 of 1000 bytes"),
    (_NotHttpHandler, "NOT HTTP"),
], ids=["cut-short", "not-http"])
def test_a_broken_response_is_that_sources_problem(tmp_path, handler, says):
    """A response that ends before its Content-Length was read as the
    whole file (only the digest then refused it); one whose status line is
    no HTTP raised http.client's BadStatusLine, no OSError: a traceback."""
    server = _Server(tmp_path, handler)
    try:
        with pytest.raises(UserError) as info:
            dd.download("mnist", tmp_path / "data", mirror=server.url,
                        log=lambda m: None)
    finally:
        server.close()
    message = str(info.value)
    assert message.startswith("could not download mnist: "
                              "train-images-idx3-ubyte.gz (" + server.url)
    assert says in message, message
    assert list((tmp_path / "data" / "mnist").iterdir()) == []


def test_download_to_official_checksums_rejects_generated_files(tmp_path,
                                                                served):
    server, _checksums = served
    with pytest.raises(UserError, match="sha256 mismatch: expected "
                       "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f"
                       "203523609"):
        dd.download("mnist", tmp_path / "data", mirror=server.url,
                    log=lambda m: None)


def test_data_task_errors(tmp_path):
    out = invoke("data", "--dataset", "imagenet")
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: unknown dataset 'imagenet'; valid "
                                  "datasets: cifar10, mnist, ptb")
    out = invoke("data", "--dataset", "ptb", "--data-dir",
                  str(tmp_path), "--mirror",
                  f"http://127.0.0.1:{_closed_port()}")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert f"Place the files by hand: {tmp_path}/ptb/simple-examples.tgz " \
           f"from http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz" \
        in out.stderr
    out = invoke("data", "--dataset", "mnist", "--data-dir",
                  str(tmp_path / "none"), "--check")
    assert out.returncode == 2
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr
