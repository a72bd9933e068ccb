"""The example's training loop and the strategy files, without a cluster: train_digits.train
runs on 4 threads over the in-process FakeEngine; strategy files are parsed by protoc against
proto/strategy.proto."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))

import bytecomp.torch as bc  # noqa: E402
import train_digits  # noqa: E402
from bytecomp.strategy import PRESETS, strategy_text  # noqa: E402
from fake_engine import run_ranks  # noqa: E402

torch.set_num_threads(1)


def test_digits_training_loop_reaches_accuracy_and_ranks_agree():
    args = train_digits.parse_args(["--epochs", "6", "--lr", "0.1", "--momentum", "0.9"])
    results, _ = run_ranks(4, lambda r: train_digits.train(args, bc, log=lambda s: None))
    assert len({r["param_checksum"] for r in results}) == 1  # every rank holds one model
    assert results[0]["size"] == 4 and len(results[0]["epochs"]) == 6
    assert results[0]["final_accuracy"] >= 0.93
    first, last = results[0]["epochs"][0], results[0]["epochs"][-1]
    assert last["loss"] < first["loss"] / 3
    assert last["bytes_sent"] == last["bytes_uncompressed"] > 0


def test_codec_strategy_file_and_unknown_codec(tmp_path):
    out = tmp_path / "s.pbtxt"
    args = train_digits.parse_args(["--codec", "topk", "--strategy-out", str(out)])
    train_digits.strategy_file_for(args)
    text = out.read_text()
    # Every gradient, forced (the digits MLP's tensors are under 64 KiB); broadcasts and metrics
    # are not matched, so they stay exact.
    assert 'name: "topk"' in text and 'name_pattern: "grad/*"' in text and "force: true" in text
    with pytest.raises(SystemExit, match="unknown"):
        train_digits.main(["--codec", "zip"])


@pytest.mark.skipif(shutil.which("protoc") is None, reason="protoc not installed")
@pytest.mark.parametrize("codec", sorted(PRESETS))
def test_strategy_files_parse_against_the_schema(codec):
    text = strategy_text(codec, two_way=True, min_compress_bytes=0, force=True, seed=3)
    proc = subprocess.run(["protoc", "-I", os.path.join(REPO, "proto"),
                           "--encode=bytecomp.proto.Strategy", "strategy.proto"],
                          input=text.encode(), capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    decoded = subprocess.run(["protoc", "-I", os.path.join(REPO, "proto"),
                              "--decode=bytecomp.proto.Strategy", "strategy.proto"],
                             input=proc.stdout, capture_output=True, timeout=30).stdout.decode()
    if codec == "none":
        assert "push_codec" not in decoded
    else:
        assert f'name: "{codec}"' in decoded and "pull_codec" in decoded
