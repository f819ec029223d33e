"""Suite files: the shipped ones load; malformed ones are named and explained."""
import pytest

from dlrepro.bench import suites
from dlrepro.errors import UserError


@pytest.mark.parametrize("name", sorted(suites.available()))
def test_shipped_suites_load(name):
    suite = suites.load(name)
    assert suite["name"] == name
    assert suite["groups"]


def test_paper_batch_sizes_are_the_papers():
    groups = suites.load("paper-synthetic-gpu")["groups"]
    sizes = {n: g["batch_sizes"] for g in groups for n in g["networks"]}
    assert sizes["fcn5"] == [32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert sizes["alexnet"] == [16, 32, 64, 128]
    assert sizes["resnet50"] == [8, 16, 32, 64]
    assert sizes["lstm64"] == [128, 256, 512]
    real = {n: g["batch_sizes"] for g in suites.load("paper-real-gpu")["groups"]
            for n in g["networks"]}
    assert real["fcn-r"] == [342, 512, 1024, 2048, 4096]
    assert real["resnet-56"] == [11, 16, 32, 64, 128]
    cpu = suites.load("paper-synthetic-cpu")["groups"]
    assert all(g["threads"] == [1, 2, 4, 8, 16, 32] for g in cpu)


def test_smoke_suite_covers_every_network_once():
    from harness import networks
    groups = suites.load("smoke")["groups"]
    named = [n for g in groups for n in g["networks"]]
    # The transformer at its smoke size only: gpt-small's build alone
    # (124 M parameters) would outweigh the rest of the suite.
    assert sorted(named) == sorted(set(networks.NETWORKS) - {"gpt-small"})
    assert all(len(g["batch_sizes"]) == 1 for g in groups)


def test_a_suite_can_be_given_as_a_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n[[group]]\nnetworks = ["fcn-r"]\n'
                    'batch_sizes = [8]\n')
    suite = suites.load(str(path))
    assert suite["groups"][0]["iterations"] == suites.DEFAULTS["iterations"]


@pytest.mark.parametrize("text,message", [
    ("name = \n", "is not valid TOML"),
    ('name = "x"\n', "needs at least one [[group]]"),
    ('name = "x"\ncolour = 1\n[[group]]\nnetworks=["fcn5"]\nbatch_sizes=[1]\n',
     "unknown keys colour"),
    ('name = "x"\n[[group]]\nnetworks=["vgg"]\nbatch_sizes=[1]\n',
     "unknown network 'vgg'"),
    ('name = "x"\n[[group]]\nnetworks=["fcn5"]\nbatch_sizes=[0]\n',
     "batch_sizes must be an integer >= 1, got 0"),
    ('name = "x"\n[[group]]\nnetworks=["fcn5"]\n', "missing `batch_sizes`"),
    ('name = "x"\n[[group]]\nnetworks=["fcn5"]\nbatch_sizes=[8]\ndevice="tpu"\n',
     "device must be cpu or gpu"),
    ('name = "x"\n[defaults]\nnetworks=["fcn5"]\n[[group]]\nnetworks=["fcn5"]\n'
     'batch_sizes=[8]\n', "networks and batch_sizes belong in groups"),
    ('name = "x"\n[[group]]\nnetworks=["fcn5"]\nbatch_sizes=[8]\n'
     'repeat = 100000000\n', "repeat must be at most 1000, got 100000000"),
])
def test_malformed_suites_name_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        suites.load(str(path))
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_unknown_suite_lists_the_shipped_ones():
    with pytest.raises(UserError, match="valid suites: modern-cpu, modern-gpu, paper-multi-gpu, "):
        suites.load("nightly")


def test_missing_suite_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        suites.load(str(tmp_path / "gone.toml"))
