"""Then vs now: matching our results to the 2016 reference records."""
import pytest

from dlrepro.bench import compare


def pair(framework, network, batch, mean, device="gpu", status="ok"):
    cell = {"framework": framework, "network": network, "device": device,
            "gpus": 1 if device == "gpu" else 0, "global_batch_size": batch}
    result = {"cell": cell, "status": status, "timing": {"mean_s": mean},
              "environment": {"gpus": [{"name": "NVIDIA H200"}]}}
    return {"spec": cell}, result


def test_reference_skips_failed_2016_runs():
    reference = compare.load_reference()
    assert reference and all(r["seconds_per_minibatch"] for r in reference)


def test_matches_tool_network_and_batch():
    reference = compare.load_reference()
    rows = compare.rows([pair("mxnet", "fcn-r", 4096, 0.01)], reference)
    # mxnet fcn-r b4096 was run on a GTX 1080 and a K80 in 2016
    assert sorted(r["then_gpu"] for r in rows) == [
        "GeForce GTX 1080", "Tesla K80 (one GK210)"]
    gtx = [r for r in rows if r["then_gpu"] == "GeForce GTX 1080"][0]
    assert gtx["then_s"] == pytest.approx(0.05940224)
    assert gtx["speedup"] == pytest.approx(5.940224)


def test_pytorch_is_set_beside_torch7_with_a_note():
    rows = compare.rows([pair("pytorch", "resnet-56", 128, 0.02)],
                        compare.load_reference())
    assert rows and all(r["then_tool"] == "torch" for r in rows)
    assert "Torch7" in rows[0]["note"]


def test_cntk_lstm_carries_the_token_counting_caveat():
    rows = compare.rows([pair("cntk", "lstm", 128, 0.02)],
                        compare.load_reference())
    assert rows and "tokens" in rows[0]["note"]


def test_cpu_and_failed_cells_are_left_out():
    reference = compare.load_reference()
    assert compare.rows([pair("mxnet", "fcn-r", 4096, 0.5, device="cpu"),
                         pair("mxnet", "fcn-r", 4096, None, status="oom")],
                        reference) == []
    assert "no result in this run" in compare.format_rows([])[0]


def test_jax_has_no_2016_tool_and_is_left_out():
    # JAX was not in the 2016 round: its GPU results have nothing to meet.
    reference = compare.load_reference()
    assert compare.rows([pair("jax", "fcn-r", 4096, 0.01)], reference) == []
    assert compare.rows([pair("jax", "fcn-r", 4096, 0.01),
                         pair("mxnet", "fcn-r", 4096, 0.01)], reference)


def test_caffe_is_set_beside_its_own_2016_runs():
    rows = compare.rows([pair("caffe", "alexnet-r", 1024, 0.05)],
                        compare.load_reference())
    assert rows and all(r["then_tool"] == "caffe" for r in rows)
    # The 2016 round ran Caffe on the K80 only.
    assert [r["then_gpu"] for r in rows] == ["Tesla K80 (one GK210)"]
    assert rows[0]["then_s"] == pytest.approx(0.137873)
    # Not Torch7's note: Caffe is the tool the paper timed.
    assert all(r["note"] == "" for r in rows)


def test_a_transformer_has_no_2016_figure_and_says_so():
    pairs = [pair("pytorch", "gpt-small", 8, 0.125),
             pair("jax", "gpt-small@512", 16, 0.25),
             pair("pytorch", "gpt-tiny", 8, 0.5, device="cpu"),
             pair("mxnet", "fcn-r", 4096, 0.01)]
    reference = compare.load_reference()
    assert {r["network"] for r in compare.rows(pairs, reference)} == {"fcn-r"}
    missing = compare.no_reference_rows(pairs)
    # JAX too: the network, not the tool, is what 2016 lacks; CPU cells
    # stay out as for every network.
    assert [(r["network"], r["framework"]) for r in missing] == [
        ("gpt-small", "pytorch"), ("gpt-small@512", "jax")]
    assert all(r["then_s"] is None and r["speedup"] is None
               for r in missing)
    lines = compare.format_rows(compare.rows(pairs, reference) + missing)
    assert any(line.startswith("fcn-r ") for line in lines)
    assert ("gpt-small b8 pytorch: 0.12500 s/batch now on NVIDIA H200; no "
            "2016 figure: the 2016 round measured no transformer") in lines
    only = compare.format_rows(missing)
    assert "no result in this run matches" in only[0]
    assert "measured no transformer" in only[-1]
