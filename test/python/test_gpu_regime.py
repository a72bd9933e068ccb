"""bench/e2e/gpu_regime.py: its scaling arithmetic, the profile it hands the workers, and one
small run of the whole benchmark on loopback (the workers' sleeps bound every step from below,
so a step faster than the profile's compute, an exchange that moved nothing, or a missing
prediction fails)."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bench", "e2e"))

import gpu_regime  # noqa: E402
import gpu_regime_worker  # noqa: E402

BUILD = os.environ.get("BYTECOMP_BUILD_DIR", os.path.join(REPO, "build"))


def test_scaled_profile_keeps_the_clusters_compute_to_network_ratio(tmp_path):
    args = gpu_regime.parse_args(["--models", "resnet50", "--shrink", "16", "--rate", "1gbit"])
    text, facts = gpu_regime.scaled_profile("resnet50", args, 25)
    forward, shipped = gpu_regime.read_shipped("resnet50")
    real_compute_s = (forward + sum(g for _, _, g in shipped)) * 1e-6
    # Compute over the time the gradients take on the link: the same in the emulation (1
    # Gbit/s, shrunk bytes) as on the real cluster (25 Gbit/s, real bytes).
    real = real_compute_s / (facts["real_bytes"] * 8 / 25e9)
    emulated = facts["compute_ms"] * 1e-3 / (facts["bytes"] * 8 / 1e9)
    assert emulated == pytest.approx(real, rel=1e-6)
    assert facts["bytes"] < facts["real_bytes"] / 12

    path = tmp_path / "p.pbtxt"
    path.write_text(text)
    forward_us, tensors = gpu_regime_worker.read_profile(str(path))
    assert forward_us == pytest.approx(forward * facts["stretch"], rel=1e-4)
    assert [n for n, _, _, _ in tensors] == ["grad/" + n for n, _, _ in shipped]
    for (_, elements, shape, gap), (name, real_n, real_gap) in zip(tensors, shipped):
        assert elements == (real_n if real_n <= args.keep_elements else
                            max(args.keep_elements, round(real_n / 16 / 64) * 64))
        assert len(shape) in (1, 2) and shape[0] * (shape[1] if len(shape) == 2 else 1) == elements
        assert gap == pytest.approx(real_gap * facts["stretch"], abs=1e-3)


def test_reencodable_codecs_follow_the_cost_table(tmp_path):
    costs = tmp_path / "costs.pbtxt"
    costs.write_text('codecs {\n  name: "fp16"\n  ratio: 0.5\n  reencodable: true\n}\n'
                     'codecs {\n  name: "powersgd"\n  two_round: true\n}\n'
                     'codecs {\n  name: "topk"\n  reencodable: true\n}\n')
    assert gpu_regime.reencodable_codecs(str(costs)) == {"fp16", "topk"}


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "bin", "bytecomp-plan")),
                    reason="bytecomp-plan is not built")
def test_a_small_run_measures_every_kind_of_system(tmp_path):
    out = tmp_path / "gpu.json"
    env = dict(os.environ, BYTECOMP_LIBRARY=os.path.join(BUILD, "lib", "libbytecomp_worker.so"))
    res = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "e2e", "gpu_regime.py"), "--loopback",
         "--models", "resnet50", "--clusters", "25", "--shrink", "64", "--workers", "2",
         "--systems", "local,ddp-gloo,bc-none,bc-topk,bc-auto", "--reps", "1", "--steps", "2",
         "--warmup", "1", "--calibrate-seconds", "0.002", "--timeout", "240",
         "--bin-dir", os.path.join(BUILD, "bin"), "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert "LOOPBACK" in res.stdout and "vs best DDP" in res.stdout
    table = json.loads(out.read_text())["tables"][0]
    rows = {r["system"]: r for r in table["rows"]}
    assert set(rows) == {"local", "ddp-gloo", "bc-none", "bc-topk", "bc-auto"}
    for r in rows.values():  # the sleeps alone take the profile's compute
        assert r["step_ms"] >= 0.97 * table["facts"]["compute_ms"], r
    assert rows["local"]["engine_bytes_per_step"] == 0
    full = 2 * table["facts"]["bytes"]  # pushed and pulled
    assert rows["bc-none"]["engine_bytes_per_step"] == pytest.approx(full, rel=0.01)
    # Shrunk 64x, most tensors are under the 64 KiB below which the preset sends them whole.
    assert 0 < rows["bc-topk"]["engine_bytes_per_step"] < full / 1.5
    # The scheduler planned bc-auto (its prediction is in its log) and the fixed strategies
    # were simulated with the inputs it planned with.
    assert rows["bc-auto"]["predicted_ms"] > 0
    assert rows["bc-none"]["predicted_ms"] > 0 and rows["bc-topk"]["predicted_ms"] > 0
    assert table["prediction_inputs"][0].endswith(".profile.pbtxt")
