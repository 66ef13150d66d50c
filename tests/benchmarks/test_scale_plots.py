"""The scale proof's plots, drawn by matplotlib from a small synthetic results.json (fixtures/scale-results.json,
in the shape benchmarks/scale_proof.py writes; its numbers are made up and are never shown as a measurement)."""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path

import pytest
from matplotlib.image import imread

from benchmarks.scale import plots

# matplotlib renders real PNGs (seconds each).
pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).with_name("fixtures") / "scale-results.json"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def results() -> dict:
    return json.loads(FIXTURE.read_text())


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_the_plots_are_written_next_to_results_json_as_pngs(tmp_path, results):
    paths = plots.write_plots(results, tmp_path)
    assert [p.name for p in paths] == [plots.LATENCY_PNG, plots.LOAD_PNG, plots.PATTERNS_PNG]
    for path in paths:
        assert path.parent == tmp_path
        width, height = png_size(path)
        assert width > 600 and height > 300
        pixels = imread(path)  # decoded by a real PNG reader
        assert pixels.shape[:2] == (height, width) and pixels.std() > 0.05  # something is drawn
    assert plots.markdown(paths) == "".join(f"![{p.stem}]({p.name})\n" for p in paths)


def test_every_side_by_side_pattern_is_a_pair_with_its_spread(results):
    pairs = plots._pattern_pairs(results["patterns"])
    assert [p["title"] for p in pairs] == ["join burst", "Event storm", "per-node agents LISTing pods"]
    storm_latency, storm_writes = pairs[1]["panels"]
    assert storm_latency["runs"] == [("events override", [(100.0, 500.0)]), ("no override", [(150.0, 600.0)])]
    assert storm_writes["runs"][1] == ("no override", [(None, 300.0), (None, 0.0)])  # a rate has no spread
    lease = pairs[0]["panels"][1]["runs"]
    assert lease == [("paced", [(0.2, 2.0)]), ("all at once", [(0.1, 1.0)])]


def test_an_older_run_without_the_lease_median_still_plots_without_its_spread(tmp_path, results):
    for run in results["patterns"].values():
        run.pop("lease_update_p50_s")
    pairs = plots._pattern_pairs(results["patterns"])
    assert pairs[0]["panels"][1]["runs"][0] == ("paced", [(None, 2.0)])
    assert len(plots.write_plots(results, tmp_path)) == 3


@pytest.mark.parametrize(
    ("remove", "message"),
    [
        (lambda r: r.pop("steps"), "the run has no 'steps'"),
        (lambda r: r.update(steps=[]), "no measured step"),
        (lambda r: r["steps"][1].pop("lease_update_p99_s"), "steps[1] has no 'lease_update_p99_s'"),
        (lambda r: r["steps"][0].pop("cores_busy"), "steps[0] has no 'cores_busy'"),
        (lambda r: r["patterns"].pop("event_storm_override_off"), "patterns has no 'event_storm_override_off'"),
        (
            lambda r: r["patterns"]["list_agents_apf_removed"]["agents"].pop("p99_ms"),
            "list_agents_apf_removed has no 'p99_ms'",
        ),
    ],
)
def test_missing_data_fails_clearly_and_draws_nothing(tmp_path, results, remove, message):
    broken = copy.deepcopy(results)
    remove(broken)
    with pytest.raises(plots.PlotDataError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plots.write_plots(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_step_without_a_measurement_is_a_gap_not_a_zero(tmp_path, results):
    results["steps"][0]["lease_update_p99_s"] = None  # fewer than 20 lease renewals in the window
    series = plots._step_series(results["steps"])
    assert series["lease"][0] != series["lease"][0]  # NaN: matplotlib leaves the point out
    assert len(plots.write_plots(results, tmp_path)) == 3
