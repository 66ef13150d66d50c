"""Guards for the performance decisions (docs/performance.md): each would fail if an optimisation
changed what the program declares or renders, or leaked state from one run into the next."""

from __future__ import annotations

import base64
import contextlib
import gc
import os
from collections.abc import Callable

import pulumi
import pytest
import yaml

from infra.boot import cloudinit, yaml_text
from plan import artifacts
from plan.artifacts import cloud_init_entries, custom_data_of, plan_files, write_plan
from plan.diff import load_plan
from plan.runner import run_declarations
from tests.helpers import load_yaml, recorded_stack_traces


@pytest.mark.slow  # every distinct cloud-init of dev and prod through the pure-Python emitter
def test_libyaml_writes_every_cloud_init_byte_for_byte_as_the_python_emitter(dev_plan, prod_plan):
    pure_python = yaml_text.literal_block_dumper(yaml.SafeDumper)
    texts = {custom_data_of(r) for run in (dev_plan, prod_plan) for r in run.registrations} - {None}
    assert len(texts) > 10, "every VM and pool of dev and prod"
    for text in texts:
        assert cloudinit.dump(load_yaml(text), dumper=pure_python) == text


def test_every_cloud_init_reads_item_by_item_exactly_as_parsed_whole(dev_plan, prod_plan):
    texts = {custom_data_of(r) for run in (dev_plan, prod_plan) for r in run.registrations} - {None}
    for text in texts:
        assert artifacts._write_files_items(text) is not None, "the plan's own cloud-inits take the short way"
        whole = load_yaml(text)["write_files"]
        assert cloud_init_entries(text) == {entry["path"]: entry for entry in whole}


def test_the_cloud_init_read_back_from_customdata_is_what_decoding_it_gives(dev_plan):
    """The plan reads a machine's cloud-init from the customData the request carries: the text of what this run's
    program encoded is looked up by that base64 (``ProgramRun.encoded``), anything else decoded, the same text
    either way. Every machine of dev is looked up, so no plan decodes the 19 MB of a 30,000-node plan's
    customData."""
    import base64

    sent = [r for r in dev_plan.registrations if artifacts._raw_custom_data(r) is not None]
    assert len(sent) > 5
    for registration in sent:
        raw = artifacts._raw_custom_data(registration)
        assert raw in dev_plan.encoded, f"{registration.name}: its customData would be decoded"
        assert artifacts._decoded(raw, dev_plan.encoded) == base64.b64decode(raw).decode(), registration.name
    assert artifacts.collect_files(dev_plan.registrations, dev_plan.encoded) == artifacts.collect_files(
        dev_plan.registrations
    )
    first = artifacts._raw_custom_data(sent[0])
    looked_up = artifacts.collect_files(dev_plan.registrations, {first: "#cloud-config\n"})
    assert looked_up[f"{sent[0].name}/cloud-init.yaml"] == "#cloud-config\n", "the text is looked up, not decoded"
    elsewhere = base64.b64encode(b"#cloud-config\nbootcmd: [never encoded here]\n").decode()
    assert artifacts._decoded(elsewhere, dev_plan.encoded) == "#cloud-config\nbootcmd: [never encoded here]\n"


def test_the_texts_of_encoded_customdata_are_kept_by_one_run_only():
    """``cloudinit.custom_data`` keeps nothing: its base64 carries its text (``CustomData``), and the run that
    registers a machine with it keeps that text for itself (``ProgramRun.encoded``), not for the next run or the
    process."""
    vm = "azure-native:compute:VirtualMachine"
    first, second = "#cloud-config\nruncmd:\n- [echo, é]\n", "#cloud-config\nruncmd:\n- [echo, two]\n"

    def machine(text: str, name: str) -> Callable[[], object]:
        return lambda: pulumi.CustomResource(vm, name, {"osProfile": {"customData": cloudinit.custom_data(text, name)}})

    encoded = cloudinit.custom_data(first, "a test")
    assert encoded == base64.b64encode(first.encode()).decode() and encoded.text == first
    held = [
        name
        for name, value in vars(cloudinit).items()
        if isinstance(value, (dict, list, set))
        and any(kept in (first, encoded) for kept in (*value, *(value.values() if isinstance(value, dict) else ())))
    ]
    assert not held, f"the encoder keeps what it encoded in {held}"
    one, two = run_declarations(machine(first, "one")), run_declarations(machine(second, "two"))
    assert one.encoded == {base64.b64encode(first.encode()).decode(): first}
    assert two.encoded == {base64.b64encode(second.encode()).decode(): second}
    plain = run_declarations(
        lambda: pulumi.CustomResource(
            vm, "plain", {"osProfile": {"customData": str(cloudinit.custom_data(first, "p"))}}
        )
    )
    assert plain.encoded == {}, "a base64 the program did not pass encoded is not looked up: it is decoded"
    assert artifacts.collect_files(plain.registrations, plain.encoded)["plain/cloud-init.yaml"] == first


def test_a_node_cloud_init_is_read_back_from_the_items_it_was_joined_from(dev_plan, prod_plan):
    """Every node scale set's cloud-init the plan reads back comes with the ``write_files`` items ``rendered``
    joined into it (``ProgramRun.write_files``): the plan takes them instead of finding them in the text again,
    and they are exactly what finding them gives. Items that are not exactly the text's are not taken."""
    for run in (dev_plan, prod_plan):
        shards = [artifacts._raw_custom_data(r) for r in run.node_scale_sets()]
        assert shards and all(raw in run.write_files for raw in shards), "every shard's items carried"
        for raw, items in run.write_files.items():
            text = run.encoded[raw]
            assert artifacts._rendered_items(text, items) == artifacts._write_files_items(text)
    raw, items = next(iter(prod_plan.write_files.items()))
    text = prod_plan.encoded[raw]
    assert artifacts._rendered_items(text, ()) is None, "no items: they are found in the text"
    for wrong in (items[1:], (items[0] + " ",) + items[1:], items[:-1], (*items, items[-1])):
        assert artifacts._rendered_items(text, wrong) is None, "items that are not exactly the text's"
    plain, no_items = cloudinit.rendered(cloudinit.CloudConfig(runcmd=[["true"]]))
    assert no_items == () and artifacts._rendered_items(plain, no_items) is None


def test_the_secret_scan_is_handed_each_node_cloud_init_cut_before_its_items(prod_plan):
    """The scan takes a node's cloud-init cut right before each write_files item (``cloud_init_pieces``), as it
    would cut it itself, without finding the cuts in the text again."""
    from plan import secret_scan

    pieces = artifacts.cloud_init_pieces(prod_plan.encoded, prod_plan.write_files)
    assert len(pieces) == len(prod_plan.write_files) > 5
    for text, held in pieces.items():
        assert secret_scan._cut_as_pieces(text, held), "joined, the text, each cut before a '- ' line"
        assert len(held) == len(artifacts._write_files_items(text)) + 1


@pytest.mark.parametrize(
    "text",
    [
        "#cloud-config\nwrite_files:\n- &a {path: /a, content: x}\n- path: /b\n  content: *a\n",  # alias across items
        "#cloud-config\nwrite_files: [{path: /a, content: x}]\nruncmd:\n- [ls]\n",  # flow style
        "#cloud-config\nwrite_files:\n  - path: /a\n    content: x\n  - path: /b\n    content: |\n      y\n",
        "#cloud-config\nwrite_files:\n- path: /a\n  content: x\n# a comment\n- path: /b\n  content: y\n",
        "#cloud-config\nwrite_files:\n- path: /a\n  content: x\nwrite_files:\n- path: /b\n  content: y\n",
        "#cloud-config\nruncmd:\n- [ls]\n",
        "#cloud-config\n{}\n",
        "  write_files:\n  - path: /a\n    content: x\n",  # the whole document indented
        "",
        '#cloud-config\n"write_files":\n- path: /a\n  content: x\n',
    ],
)
def test_a_cloud_init_laid_out_otherwise_reads_as_parsed_whole(text):
    whole = (load_yaml(text) or {}).get("write_files") or []
    if isinstance(whole, dict):
        whole = [whole]
    assert cloud_init_entries(text) == {entry["path"]: entry for entry in whole}


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

    with contextlib.suppress(Exception):  # the SDK wraps it; only the aftermath matters here
        run_declarations(fail)
    assert gc.isenabled()


class _CountingOs:
    """``os`` as linecache sees it, with every ``stat`` noted."""

    def __init__(self) -> None:
        self.stats: list[str] = []

    def __getattr__(self, name: str):
        return getattr(os, name)

    def stat(self, path, *args, **kwargs):
        self.stats.append(path)
        return os.stat(path, *args, **kwargs)


def test_a_run_stats_no_source_file_per_resource(monkeypatch):
    """The SDK's ``traceback.extract_stack()`` for each resource has linecache ``os.stat`` every source file on
    the stack (about ten): the runner reads the stack from the frames instead (``_RecordedStacks`` in
    plan/runner.py), for any resource class, not only the program's own."""
    import linecache

    counting = _CountingOs()
    monkeypatch.setattr(linecache, "os", counting)

    class Typed(pulumi.CustomResource):  # as the typed SDK classes: a constructor of its own
        def __init__(self, name: str) -> None:
            super().__init__("bench:index:Bare", name, {})

    count = 60
    run = run_declarations(lambda: [Typed(f"r{i}") for i in range(count)])
    assert len(run.registrations) == count
    assert len(counting.stats) < count / 2, sorted(set(counting.stats))  # about 600 through extract_stack


def test_a_run_leaves_linecache_as_it_found_it():
    """Nothing of a run stays in linecache: a source file read before is still checked for changes afterwards,
    as in any other process (a changed source file shows in a traceback)."""
    import linecache

    from components import declare

    linecache.getline(declare.__file__, 1)
    before = dict(linecache.cache)
    run_declarations(lambda: declare.azure("resources:ResourceGroup", "rg", {"location": "westus3"}))
    assert linecache.cache.get(declare.__file__) == before[declare.__file__]
    assert linecache.cache[declare.__file__][1] is not None, "its modification time, checked again"


def _recorded_stacks() -> list[bytes]:
    """Every resource's recorded stack and source position as the engine receives them, for resources of every
    shape: made from a few lines through helpers and a constructor of their own (the same lines many times), inside
    a component, as a provider, as a bare ``CustomResource`` (two constructors: nothing recorded), and from code
    with no file (no position)."""
    from plan import mocks

    sent: list[bytes] = []
    register = mocks.RecordingMonitor.RegisterResource

    def recording(self, request):
        sent.append(request.stackTrace.SerializeToString() + request.sourcePosition.SerializeToString())
        return register(self, request)

    class Typed(pulumi.CustomResource):
        def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
            super().__init__("bench:index:Bare", name, {}, opts)

    class Group(pulumi.ComponentResource):
        def __init__(self, name: str) -> None:
            super().__init__("bench:index:Group", name)
            Typed(f"{name}-child", pulumi.ResourceOptions(parent=self))

    class Provider(pulumi.ProviderResource):
        def __init__(self, name: str) -> None:
            super().__init__("bench", name, {})

    def helper(depth: int, name: str) -> None:
        if depth:
            helper(depth - 1, name)
        else:
            Typed(name)

    def declare() -> None:
        for index in range(12):
            helper(index % 3, f"r{index}")
        Group("group")
        Provider("provider")
        pulumi.CustomResource("bench:index:Bare", "bare", {})
        exec(compile("Typed('no-file')", "<string>", "exec"), {"Typed": Typed})  # noqa: S102 - a frame with no file

    mocks.RecordingMonitor.RegisterResource = recording
    try:
        run_declarations(declare)
    finally:
        mocks.RecordingMonitor.RegisterResource = register
    return sent


def test_the_stack_the_runner_records_is_the_one_the_sdk_records(monkeypatch):
    """``_RecordedStacks`` (plan/runner.py) reads each resource's stack from its frames, each position made once per
    file and line: every resource's stack and source position are the same bytes as the SDK's own function
    makes them."""
    from plan import runner

    read_from_frames = _recorded_stacks()

    class Unchanged:
        def restore(self) -> None:
            pass

    monkeypatch.setattr(runner, "_RecordedStacks", Unchanged)
    made_by_the_sdk = _recorded_stacks()
    assert len(read_from_frames) == 18 and len(set(read_from_frames)) >= 6  # with the stack itself
    assert read_from_frames == made_by_the_sdk
    assert sum(b"/tests/stacks/test_performance.py" in sent for sent in read_from_frames) >= 14
    assert b"" in read_from_frames, "the bare resource: nothing recorded"


def test_a_run_leaves_the_sdks_stack_recording_as_it_found_it():
    import pulumi.runtime.resource as sdk

    original = sdk._get_stack_trace
    run_declarations(lambda: pulumi.CustomResource("bench:index:Bare", "r", {}))
    assert sdk._get_stack_trace is original

    def fail() -> None:
        raise RuntimeError("from the program")

    with contextlib.suppress(Exception):
        run_declarations(fail)
    assert sdk._get_stack_trace is original


def test_the_benchmarks_replay_registers_every_machine_as_the_plan_sent_it(dev_plan, tmp_path):
    """``resources.json`` points at a machine's cloud-init instead of holding its customData: the benchmark's
    replay puts it back, so it registers what the plan registered (benchmarks/plan_benchmark.py)."""
    import pickle

    from benchmarks.plan_benchmark import replay_input

    write_plan(tmp_path / "plan", plan_files(dev_plan.registrations, dev_plan.outputs, ""))
    with open(replay_input(tmp_path / "plan", tmp_path / "replay.pickle"), "rb") as given:
        replayed = {r["urn"]: r["inputs"] for r in pickle.load(given)}
    machines = [r for r in dev_plan.registrations if r.type in artifacts.VM_TYPES]
    assert len(machines) >= 5, "etcd, events etcd, the apiservers, NAT hosts, the pools' scale sets"
    for machine in machines:
        assert replayed[machine.urn] == machine.inputs, machine.name


def test_a_written_plan_reads_back_exactly_with_identical_shards_linked(prod_plan, tmp_path):
    files = plan_files(prod_plan.registrations, prod_plan.outputs, "summary\n")
    write_plan(tmp_path / "plan", files)
    root = tmp_path / "plan" / "files"
    assert not (root / "prod-pool-h100a-s000").is_symlink()
    # InfiniBand shards differ in their nodes' InfiniBand domain label; a CPU pool's shards are identical.
    assert not (root / "prod-pool-h100a-s029").is_symlink()
    assert os.readlink(root / "prod-pool-cpu-s001") == "prod-pool-cpu-s000"
    assert not (root / "prod-pool-h100b-s000").is_symlink(), "another pool's cloud-init differs"
    assert not any((root / f"prod-etcd-{i}-vm").is_symlink() for i in range(5)), "each member's files differ"
    # Within a shard, what repeats the pool's first shard is linked: all but kubelet's unit and the cloud-init.
    shard = root / "prod-pool-h100a-s029"
    assert os.readlink(shard / "usr") == "../prod-pool-h100a-s000/usr"
    assert os.readlink(shard / "etc" / "kubernetes") == "../../prod-pool-h100a-s000/etc/kubernetes"
    assert not (shard / "etc" / "systemd" / "system").is_symlink(), "kubelet's unit names the InfiniBand domain"
    assert load_plan(tmp_path / "plan").files == {
        path.removeprefix("files/"): text for path, text in files.items() if path.startswith("files/")
    }


def test_only_identical_trees_are_linked(tmp_path):
    files = {
        "resources.json": "[]\n",
        "files/a/x": "1",
        "files/a/y/z": "2",
        "files/b/x": "1",
        "files/b/y/z": "2",
        "files/c/x": "1",
        "files/c/y/z": "3",
        "files/d/x": "1",
        "files/e/x": "4",
        "files/e/y/z": "2",
        "files/f/w/z": "2",
    }
    write_plan(tmp_path / "plan", files)
    root = tmp_path / "plan" / "files"
    assert [p.name for p in sorted(root.iterdir()) if p.is_symlink()] == ["b"]
    # Below a resource, a directory repeating the same directory of an earlier resource is linked, no other.
    assert os.readlink(root / "e" / "y") == "../a/y"
    assert not (root / "c" / "y").is_symlink() and not (root / "f" / "w").is_symlink()
    assert load_plan(tmp_path / "plan").files == {k.removeprefix("files/"): v for k, v in files.items() if "/" in k}
    assert (root / "c" / "y" / "z").read_text() == "3" and (root / "d" / "x").read_text() == "1"
    assert (root / "b" / "y" / "z").read_text() == "2"


def test_links_name_their_target_as_relpath_does():
    """``write_plan`` computes each link from the two paths' names; ``posixpath.relpath`` is the reference."""
    import itertools
    import posixpath

    names = ["files", "a", "b", ".", "..", ""]
    paths = ["/".join(parts) for length in (1, 2, 3) for parts in itertools.product(names, repeat=length)]
    for path, start in itertools.product(paths[::7], paths[1::11]):
        try:
            expected = posixpath.relpath(path, start)
        except ValueError:
            continue  # an empty path: relpath refuses it, and write_plan never links one
        assert artifacts._relative_path(path, start) == expected, (path, start)


def test_a_run_walks_no_caller_frames_and_hands_back_its_errors_unchanged():
    import traceback

    depths = []

    def deep(levels: int):
        return (
            run_declarations(lambda: depths.append(len(traceback.extract_stack()))) if levels == 0 else deep(levels - 1)
        )

    deep(0)
    deep(100)
    assert depths[0] == depths[1] < 30, "the SDK captures this stack for every resource"

    class Boom(Exception):
        pass

    def fail():
        raise Boom("from the program")

    try:
        run_declarations(fail)
    except Exception as error:  # noqa: BLE001 - the SDK wraps it; the cause must be the program's exception
        chain = [error]
        while chain[-1].__cause__ or chain[-1].__context__:
            chain.append(chain[-1].__cause__ or chain[-1].__context__)
        assert any(isinstance(e, Boom) for e in chain)
    else:
        raise AssertionError("the program's error was swallowed")


def test_the_stack_recorded_with_each_resource_holds_no_harness_thread_or_runpy_frames():
    """The SDK turns every frame below a resource's constructor into a source position, for every resource:
    the plan runs the program's body from a bare thread's first frame, before the event loop runs
    (``run_declarations``)."""
    import inspect

    from components import declare
    from tests.conftest import plan_stack

    with recorded_stack_traces() as recorded:
        plan_stack("dev")
    frames = [frame for trace in recorded for frame in trace.frames]
    files = {frame.pc.uri.rsplit("/", 1)[-1] for frame in frames if frame.HasField("pc")}
    assert "__main__.py" in files
    # No frame of a declaration helper or of Declared's own: only an explicit provider, a ProviderResource
    # made inside declare.provider, is recorded there.
    declare_lines = {frame.pc.line for frame in frames if frame.pc.uri.endswith("/components/declare.py")}
    source, first = inspect.getsourcelines(declare.provider)
    assert declare_lines == {first + i for i, line in enumerate(source) if "pulumi.ProviderResource(" in line}
    assert "threading.py" not in files, "threading.Thread's own frames"
    assert not files & {"base_events.py", "events.py", "sync_await.py", "stack.py"}, "the event loop's frames"
    assert all(frame.HasField("pc") for frame in frames), "runpy's frames (a frozen module: no position)"
    runner_frames = {
        sum(frame.pc.uri.endswith("/plan/runner.py") for frame in trace.frames)
        for trace in recorded
        if any(frame.pc.uri.endswith("/__main__.py") for frame in trace.frames)
    }
    assert runner_frames == {1}, "the program's body is called from the run's own thread frame, nothing between"
