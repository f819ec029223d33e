"""The network descriptions: exact parameter counts, shapes and FLOPs."""
import math

import pytest

from harness import networks as nets
from harness.errors import HarnessError

# The networks of Shi et al. 2016 (arXiv:1608.07249); their parameter
# counts computed by hand from the architectures (see the comments) and
# cross-checked against the frameworks in tests/backends/test_identity.py.
EXPECTED_PARAMETERS = {
    "fcn5": 117_997_696,
    "fcn8": 130_586_752,
    "alexnet": 76_009_832,
    "alexnet-r": 89_578,
    "resnet50": 25_557_032,   # torchvision's resnet50
    "resnet-56": 853_018,     # He et al. option A, CIFAR
    # 784*2048+2048 + 2048*4096+4096 + 4096*1024+1024 + 1024*10+10
    "fcn-r": 14_205_962,
    # embedding 10000*256 + 2 LSTM layers 4*256*(256+256+1)
    # + dense 256*10000+10000
    "lstm32": 6_180_624,
    "lstm64": 6_180_624,
    "lstm": 6_180_624,
    # GPT-2 small: tokens 50257*768 + positions 1024*768 + 12 blocks of
    # 2 layer norms (2*2*768), W_qkv 768*2304+2304, W_o 768*768+768, W_1
    # 768*3072+3072, W_2 3072*768+768 + final layer norm 2*768; the output
    # is the token table (tied)
    "gpt-small": 124_439_808,
    # 1000*128 + 64*128 + 2 * 198_272 + 2*128
    "gpt-tiny": 532_992,
}

EXPECTED_OUTPUT = {
    "fcn5": (26752,), "fcn8": (26752,), "alexnet": (1000,),
    "resnet50": (1000,), "lstm32": (32, 10000), "lstm64": (64, 10000),
    "fcn-r": (10,), "alexnet-r": (10,), "resnet-56": (10,),
    "lstm": (32, 10000), "gpt-small": (1024, 50257), "gpt-tiny": (64, 1000),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_parameter_counts(name):
    assert nets.parameter_count(nets.get(name)) == EXPECTED_PARAMETERS[name]


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTPUT))
def test_output_shapes(name):
    assert nets.output_shape(nets.get(name)) == EXPECTED_OUTPUT[name]


def test_every_network_is_listed():
    assert set(nets.NETWORKS) == set(EXPECTED_PARAMETERS)


def test_alexnet_spatial_sizes_follow_same_padding():
    # 224 -> conv 11/4 SAME 56 -> pool 28 -> 28 -> pool 14 -> 14 -> pool 7
    spatial = [r.out_shape[1:] for r in nets.resolve(nets.get("alexnet"))
               if len(r.out_shape) == 3]
    assert spatial == [(56, 56), (28, 28), (28, 28), (14, 14), (14, 14),
                       (14, 14), (14, 14), (7, 7)]


def test_alexnet_r_pools_with_ceil_mode():
    # Caffe's ceil-mode pooling makes the fully connected input 64*4*4.
    flatten = [r for r in nets.resolve(nets.get("alexnet-r"))
               if type(r.layer) is nets.Flatten][0]
    assert flatten.in_shape == (64, 4, 4)


def test_resnet56_has_three_stages_of_nine_blocks():
    blocks = [r for r in nets.resolve(nets.get("resnet-56"))
              if type(r.layer) is nets.Residual]
    assert len(blocks) == 27
    assert [b.out_shape for b in blocks[::9]] == [(16, 32, 32), (32, 16, 16),
                                                   (64, 8, 8)]


def test_lstm_extra_bias_is_one_vector_per_gate_per_layer():
    assert nets.lstm_extra_bias(nets.get("lstm")) == 2 * 4 * 256
    assert nets.lstm_extra_bias(nets.get("fcn5")) == 0


def test_fcn_flops_are_twice_the_weights():
    # A dense layer does in*out multiply-adds per sample: 2 FLOPs each.
    net = nets.get("fcn5")
    weights = nets.parameter_count(net) - (3 * 2048 + 26752)
    assert nets.forward_flops_per_sample(net) == 2 * weights
    assert nets.flops_per_iteration(net, 64) == 3 * 2 * weights * 64


def test_alexnet_forward_flops():
    # conv1: 3*121 MACs per output * 96*56*56 outputs, and so on.
    macs = (3 * 121 * 96 * 56 * 56 + 96 * 25 * 256 * 28 * 28
            + 256 * 9 * 384 * 14 * 14 + 384 * 9 * 384 * 14 * 14
            + 384 * 9 * 256 * 14 * 14 + 12544 * 4096 + 4096 * 4096
            + 4096 * 1000)
    assert nets.forward_flops_per_sample(nets.get("alexnet")) == 2 * macs


def test_lstm_flops_count_gates_and_output_per_step():
    steps = 32
    macs = steps * (4 * 256 * 512 * 2) + steps * 256 * 10000
    assert nets.forward_flops_per_sample(nets.get("lstm32")) == 2 * macs


def test_resnet50_flops_match_the_usual_four_gigamacs():
    # ResNet-50 is commonly quoted at ~4.1 GMACs per 224x224 image.
    macs = nets.forward_flops_per_sample(nets.get("resnet50")) / 2
    assert math.isclose(macs, 4.09e9, rel_tol=0.02)


def test_unknown_network_lists_the_valid_ones():
    with pytest.raises(HarnessError, match="valid networks: alexnet, "):
        nets.get("vgg16")


def test_shape_errors_are_reported():
    with pytest.raises(HarnessError, match="flat input"):
        nets.resolve_layers([nets.Dense(10, None)], (3, 8, 8))


def test_describe_is_json_ready():
    d = nets.describe(nets.get("fcn-r"))
    assert d["parameters"] == 14_205_962
    assert d["input_shape"] == [784]
    assert d["learning_rate"] == 0.05 and d["momentum"] == 0.9


@pytest.mark.parametrize("name, d, ff, vocab, layers, steps", [
    ("gpt-small", 768, 3072, 50257, 12, 1024),
    ("gpt-tiny", 128, 512, 1000, 2, 64),
    ("gpt-small@128", 768, 3072, 50257, 12, 128),
])
def test_transformer_flops_count_dense_attention_and_tied_output(
        name, d, ff, vocab, layers, steps):
    # Per token and block: W_qkv 3 d^2, W_o d^2, W_1 and W_2 2 d ff, and
    # attention's q.k and weights.v over every one of `steps` keys (d
    # each); then the tied output d * vocab.
    per_token = layers * (4 * d * d + 2 * d * ff + 2 * steps * d) + d * vocab
    net = nets.get(name)
    assert nets.forward_flops_per_sample(net) == 2 * steps * per_token
    # The input is token ids: no input gradient to skip.
    assert nets.executed_flops_per_iteration(net, 8) == \
        nets.flops_per_iteration(net, 8) == 3 * 8 * 2 * steps * per_token


def test_gpt_small_forward_flops_are_about_six_times_the_parameters():
    # The usual estimate 2 N per token (N without the position table) plus
    # attention's 2 * 2 * layers * steps * d per token.
    net = nets.get("gpt-small")
    per_token = nets.forward_flops_per_sample(net) / 1024
    estimate = 2 * (124_439_808 - 1024 * 768) + 4 * 12 * 1024 * 768
    assert math.isclose(per_token, estimate, rel_tol=0.001)


def test_a_shorter_sequence_keeps_the_weights():
    short = nets.get("gpt-small@256")
    assert short.name == "gpt-small@256" and short.input_shape == (256,)
    assert nets.parameter_count(short) == 124_439_808
    assert nets.output_shape(short) == (256, 50257)
    assert nets.context(short) == 1024


@pytest.mark.parametrize("name, message", [
    ("gpt-small@2048", "sequence length 2048 is above gpt-small's context "
                       "of 1024 tokens"),
    ("gpt-tiny@0", "must be a positive integer"),
    ("gpt-tiny@x", "must be a positive integer"),
    ("lstm@16", "lstm takes no sequence length"),
    ("vgg@16", "unknown network 'vgg'"),
])
def test_bad_sequence_lengths_are_refused_in_one_line(name, message):
    with pytest.raises(HarnessError, match=message) as info:
        nets.get(name)
    assert "\n" not in str(info.value)


def test_largest_tensor_of_a_transformer_is_its_logits_or_scores():
    # gpt-small: logits 1024 x 50257 beat the scores 12 x 1024 x 1024;
    # gpt-tiny: the scores 4 x 64 x 64 = 16384 lose to 64 x 1000 logits.
    assert nets.largest_tensor(nets.get("gpt-small")) == 1024 * 50257
    assert nets.largest_tensor(nets.get("gpt-tiny")) == 64 * 1000
    wide = nets.Network("wide", (64,), "int64", 10, [nets.Transformer(
        10, 16, 64, 1, 8, 32, 1e-5)], 0.01, 0.0, "synthetic", "")
    assert nets.largest_tensor(wide) == 8 * 64 * 64
