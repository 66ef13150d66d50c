"""Guards for the performance decisions (README "Performance"): each would fail if an optimisation
changed what the program declares or renders, or leaked state from one run into the next."""

from __future__ import annotations

import gc

import pulumi
import yaml

from infra import cloudinit
from infra.plan.artifacts import custom_data_of
from infra.plan.runner import run_declarations


def test_libyaml_writes_every_cloud_init_byte_for_byte_as_the_python_emitter(dev_plan, prod_plan):
    pure_python = cloudinit.literal_block_dumper(yaml.SafeDumper)
    texts = {custom_data_of(r) for run in (dev_plan, prod_plan) for r in run.registrations} - {None}
    assert len(texts) > 10, "every VM and pool of dev and prod"
    for text in texts:
        assert cloudinit.dump(yaml.safe_load(text), dumper=pure_python) == text


def test_a_run_pauses_cyclic_gc_only_while_it_runs():
    seen = []
    run_declarations(lambda: seen.append(gc.isenabled()))
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        run_declarations(lambda: None)
        assert not gc.isenabled(), "a caller's choice is left as it was"
    finally:
        gc.enable()


def test_a_failed_run_restores_gc_too():
    def fail():
        pulumi.CustomResource("bench:index:Bare", "r", {})
        raise RuntimeError("boom")

    try:
        run_declarations(fail)
    except Exception:  # noqa: BLE001 - the SDK wraps it; only the aftermath matters here
        pass
    assert gc.isenabled()
