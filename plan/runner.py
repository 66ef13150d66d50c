"""Runs the real program (``__main__.py``) under Pulumi mocks and returns what it declared.

This is the same code path as ``pulumi up``: the same ``__main__.py``, the same
config keys (encoded as the CLI encodes them), the same components. Only the
engine and the providers are replaced by ``plan.mocks``.
"""

from __future__ import annotations

import _thread
import asyncio
import builtins
import contextlib
import functools
import gc
import json
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import settings
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from components import stack_config
from infra.boot.cloudinit import CustomData
from infra.config.errors import NAMESPACE, ConfigError
from infra.day2.deploy_rules import RollingUpgrade
from infra.facts import tags
from infra.network.hub import example_hub_outputs
from plan.mocks import VM_TYPES, PlanMocks, RecordingMonitor, Registration, plain, struct_value
from plan.stackfile import PROJECT_DIR

PROJECT = "supercluster"
ORGANIZATION = "organization"  # what a DIY (Azure Blob) backend calls every org


# A bound on one run of the program: prod plans in about ten seconds on one core, and a run that waits
# for an output nobody resolves would otherwise wait for ever (every wait is bounded).
PROGRAM_TIMEOUT_SECONDS = 600


class ProgramHung(RuntimeError):
    """The program did not finish within ``PROGRAM_TIMEOUT_SECONDS``."""


@dataclass
class ProgramRun:
    stack: str
    config: dict[str, Any]
    registrations: list[Registration]
    outputs: dict[str, Any]  # plain JSON, secrets as "[secret]"
    monitor: RecordingMonitor
    example_stacks: tuple[str, ...] = ()  # StackReferences answered with example outputs, not real ones
    # The text behind each customData this run's program encoded (``cloudinit.CustomData``), by that base64: the
    # plan reads every machine's cloud-init back from its request without decoding it (``artifacts._decoded``).
    # This run's alone: made fresh by each run, kept by nothing else.
    encoded: dict[str, str] = field(default_factory=dict)
    # The write_files items each of those texts was joined from, by the same base64, where the program gave them
    # (``cloudinit.rendered``): the plan takes them instead of finding them in the text (``artifacts``).
    write_files: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def secret_values(self) -> set[str]:
        """The values the mocks handed out that the real providers mark secret (keys, passwords, random bytes)."""
        return self.monitor.mocks.secret_values

    def of_type(self, typ: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == typ]

    def node_scale_sets(self) -> list[Registration]:
        """The node pools' scale sets: every scale set but the apiservers' (the one with a machine role tag)."""
        return [r for r in self.of_type(SCALE_SET) if tags.MACHINE_ROLE not in (r.inputs.get("tags") or {})]

    def named(self, name: str, typ: str | None = None) -> Registration:
        """The one resource with this logical name (and type, when names are shared)."""
        found = [r for r in self.registrations if r.name == name and (typ is None or r.type == typ)]
        if len(found) != 1:
            raise KeyError(f"{len(found)} resources named {name!r}" + (f" of type {typ}" if typ else ""))
        return found[0]


SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"
# What the offline plan takes the apiserver scale set's rollout to be (below): no rolling upgrade under way,
# no instance behind its model.
ROLLOUT_FINISHED = RollingUpgrade(latest=None, latest_model_applied=())


def own_stack_name(stack: str) -> str:
    """The fully qualified name the program reads its last deploy's outputs under
    (``components.stack_config.previous_outputs``)."""
    return f"{ORGANIZATION}/{PROJECT}/{stack}"


def encode_config(values: dict[str, Any]) -> dict[str, str]:
    """What the CLI puts in PULUMI_CONFIG: strings, with objects and lists as JSON."""
    encoded = {}
    for key, value in values.items():
        if isinstance(value, (dict, list)):
            encoded[key] = json.dumps(value)
        elif isinstance(value, bool):
            encoded[key] = "true" if value else "false"
        else:
            encoded[key] = "" if value is None else str(value)
    return encoded


def run_program(
    stack: str,
    config: dict[str, Any],
    stack_outputs: dict[str, dict[str, Any]] | None = None,
    rolling_upgrade: RollingUpgrade = ROLLOUT_FINISHED,
) -> ProgramRun:
    """Runs ``__main__.py`` once; raises ``ConfigError`` for bad config, as the program does.

    The offline plan cannot ask Azure where the apiserver scale set's rollout stands (a real deploy does,
    components/stack_config.py): it takes ``rolling_upgrade``, by default finished (every instance on the
    last deploy's model).

    A StackReference the caller gives no outputs for (the hub of ``network.hub.stack``) is answered
    with example outputs that satisfy its contract, and the run says so (``example_stacks``)."""
    program = PROJECT_DIR / "__main__.py"
    examples = {
        name: outputs for name, outputs in example_stack_outputs(config).items() if name not in (stack_outputs or {})
    }
    # Run as `runpy.run_path(program, run_name="__main__")` runs it (as the Pulumi language host does), but
    # called straight from the run's thread frame (``run_declarations``): runpy's three frames and a lambda's would
    # otherwise be recorded with every resource's call stack (see run_declarations). The program reads no
    # __file__ and imports no __main__, the two things runpy adds.
    stack_config.rolling_upgrade_reader = lambda resource_group, scale_set: rolling_upgrade
    code = compile(program.read_bytes(), str(program), "exec")
    namespace = {"__name__": "__main__", "__file__": str(program), "__builtins__": builtins}
    run = run_declarations(
        functools.partial(exec, code, namespace),
        stack=stack,
        config=config,
        stack_outputs={**examples, **(stack_outputs or {})},
    )
    run.example_stacks = tuple(sorted(examples))
    return run


def example_stack_outputs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Example outputs for the hub stack the config names, if any (see ``infra.network.hub``)."""
    network = config.get(f"{NAMESPACE}:network")
    if isinstance(network, str):
        network = json.loads(network)
    if not isinstance(network, dict) or not isinstance(network.get("hub"), dict):
        return {}
    hub_stack = network["hub"].get("stack")
    try:
        return (
            {hub_stack: example_hub_outputs(network["addressSpace"], network["serviceCidr"])}
            if isinstance(hub_stack, str)
            else {}
        )
    except (KeyError, TypeError, ValueError, StopIteration):
        return {}  # the program's own validation names the bad key


def run_declarations(
    declare: Callable[[], Any],
    *,
    stack: str = "test",
    config: dict[str, Any] | None = None,
    stack_outputs: dict[str, dict[str, Any]] | None = None,
) -> ProgramRun:
    """Runs ``declare`` (the program, or one component in a test) under fresh mocks and waits for every
    registration, so assertions see finished resources and no ``apply`` callback is left unrun.

    The run gets a thread of its own: the SDK records the Python call stack of every resource it
    registers (``traceback.extract_stack``), and a caller's frames (a test runner's dozens) would be
    walked again for each one, a sixth of a dev plan's time under pytest. A bare ``_thread`` thread:
    ``threading.Thread`` would add three frames of its own to every resource's recorded stack."""
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        # The program's body is called from this, the thread's first frame, with nothing between: the SDK
        # turns every frame below a resource's constructor into a source position, for every resource
        # (``_finish``), so each frame of the harness here costs a 30,000-node plan about 0.01 s of CPU (1,611 frames).
        try:
            loop, monitor, declared, cloud_inits = _prepare(stack, config or {}, stack_outputs)
            stacks = _RecordedStacks()
            try:
                with _cyclic_gc_paused():
                    try:
                        declare()
                    except BaseException as error:  # noqa: BLE001 - re-raised by run_pulumi_func (_finish)
                        body_error: BaseException | None = error
                    else:
                        body_error = None
                    outcome["run"] = _finish(loop, monitor, declared, cloud_inits, stack, config or {}, body_error)
            finally:
                loop.close()
                asyncio.set_event_loop(None)
                stacks.restore()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread, unchanged
            outcome["error"] = error
        finally:
            finished.set()

    _thread.start_new_thread(run, ())
    if not finished.wait(PROGRAM_TIMEOUT_SECONDS):
        raise ProgramHung(
            f"the program did not finish within {PROGRAM_TIMEOUT_SECONDS} s (a registration or output never "
            "resolved); nothing was written"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["run"]


def _prepare(
    stack: str,
    config: dict[str, Any],
    stack_outputs: dict[str, dict[str, Any]] | None,
) -> tuple[
    asyncio.AbstractEventLoop,
    RecordingMonitor,
    dict[tuple[str, str], int],
    tuple[dict[str, str], dict[str, tuple[str, ...]]],
]:
    """This thread's event loop and fresh mocks; returns the loop, the monitor, where the order in which the
    program declares its resources is kept, and where the texts of the customData it encodes and their
    write_files items are (``ProgramRun.encoded``, ``ProgramRun.write_files``)."""
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_quiet_config_errors)
    asyncio.set_event_loop(loop)
    settings.set_root_resource(None)  # type: ignore[arg-type]
    plan_mocks = PlanMocks(stack_outputs)
    monitor = RecordingMonitor(plan_mocks)
    pulumi.runtime.set_mocks(
        plan_mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor, organization=ORGANIZATION
    )
    pulumi.runtime.set_all_config(encode_config(config))
    declared: dict[tuple[str, str], int] = {}
    encoded: dict[str, str] = {}
    write_files: dict[str, tuple[str, ...]] = {}
    pulumi.runtime.register_stack_transformation(_recorder(declared, encoded, write_files))
    settings.SETTINGS.rpc_manager.clear()
    settings.SETTINGS.outputs.clear()
    return loop, monitor, declared, (encoded, write_files)


def _finish(
    loop: asyncio.AbstractEventLoop,
    monitor: RecordingMonitor,
    declared: dict[tuple[str, str], int],
    cloud_inits: tuple[dict[str, str], dict[str, tuple[str, ...]]],
    stack: str,
    config: dict[str, Any],
    body_error: BaseException | None,
) -> ProgramRun:
    """Waits for every registration the program's body started, and re-raises what the body raised.

    The body ran first, straight from the run's thread frame, before the event loop ran: inside the SDK's
    ``run_pulumi_func`` it sat below six frames of the SDK's and the event loop's (from ``_sync_await`` down to
    ``run_pulumi_func``), turned into source positions for every resource (``traceback.extract_stack``, then a
    file URI per frame). Nothing is lost by running it first: the body is synchronous (no registration runs
    before it returns either way; a synchronous invoke pumps the loop as ``_sync_await`` does in a running
    one), the tasks it creates run when ``run_pulumi_func`` waits for every RPC, and ``_raise`` hands
    ``run_pulumi_func`` the body's error, which it re-raises once those have settled, as it does its
    ``func``'s."""
    try:
        _sync_await(run_pulumi_func(functools.partial(_raise, body_error)))
        outputs = _sync_await(_resolve_outputs())
    except Exception as error:  # noqa: BLE001 - only re-raised, as the ConfigError it wraps if it wraps one
        _finish_pending(loop)
        cause = _config_error_in(error)
        if cause is not None:
            raise cause from None
        raise
    # Monitor calls run on worker threads and may arrive in any order; declaration order does not.
    ordered = sorted(monitor.registrations, key=lambda r: declared.get((r.type, r.name), len(declared)))
    return ProgramRun(stack, config, ordered, outputs, monitor, encoded=cloud_inits[0], write_files=cloud_inits[1])


def _raise(error: BaseException | None) -> None:
    if error is not None:
        raise error


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the program registers resources.

    A run allocates hundreds of thousands of long-lived objects (an Output, with its futures, per
    property of every resource) on top of the SDK modules' own, and CPython's full collections
    rescan all of them: a quarter of the CPU of a large plan, for almost no garbage (a 30,000-node
    plan peaks 4 MB higher without them). Reference counting still frees everything else; the
    cycles a run leaves are collected as usual once it returns."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _finish_pending(loop: asyncio.AbstractEventLoop) -> None:
    """A failed program leaves registrations waiting on the one that failed, and futures whose errors nobody
    retrieved. Cancel and finalise them now: left to the garbage collector they log ("Task was destroyed but
    it is pending!") from inside whatever runs next, and under CPython 3.11 that can fail an unrelated
    compile() ("AST constructor recursion depth mismatch")."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    # The error is the caller's now. The SDK keeps every failed output in its set of outputs, which outlives the
    # run (pulumi._utils.ContextProperty keeps the first value a context sets as the default of every other): let
    # it go now, and let the futures that held the error go without logging it again ("Future exception was never
    # retrieved", once printed at the fast suite's worker exit; tests/plan/test_failed_run.py).
    loop.set_exception_handler(_quiet_after_failure)
    with settings.SETTINGS.lock:
        settings.SETTINGS.outputs.clear()
    gc.collect()


def _quiet_after_failure(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A failed run's loop: an error a future still holds is the run's, already raised; anything else is logged."""
    if context.get("exception") is None:
        loop.default_exception_handler(context)


def _config_error_in(error: BaseException) -> ConfigError | None:
    """The ConfigError behind ``error``: raised by validation (wrapped in a RunError), or inside an apply
    and carried by the RunError the component raised (``config_error``, e.g. a broken hub contract)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ConfigError):
            return current
        if isinstance(getattr(current, "config_error", None), ConfigError):
            return current.config_error  # type: ignore[attr-defined]
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _quiet_config_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Every output that depended on a failed apply holds its error; the one line we print is enough."""
    exception = context.get("exception")
    if exception is None or _config_error_in(exception) is None:
        loop.default_exception_handler(context)


def _recorder(declared: dict[tuple[str, str], int], encoded: dict[str, str], write_files: dict[str, tuple[str, ...]]):
    """A stack transformation that notes the order in which the program declares resources and, in ``encoded``,
    the text behind a VM's or scale set's customData where the program passes it as encoded
    (``cloudinit.CustomData``), with the ``write_files`` items it was joined from in ``write_files``. It changes
    nothing the resource registers."""

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        declared.setdefault((args.type_, args.name), len(declared))
        path = VM_TYPES.get(args.type_)
        if path is not None:
            value: Any = args.props
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if isinstance(value, CustomData):
                encoded[value] = value.text
                if value.write_files:
                    write_files[value] = value.write_files
        return None

    return record


class _RecordedStacks:
    """For the length of a run, the stack the SDK records with each resource is read from the frames themselves,
    each frame's source position made once per file and line, each whole stack once per distinct stack; ``restore``
    puts the SDK's own function back.

    With every resource the SDK records the frames below the resource's third ``__init__`` (the concrete class's
    constructor: ``pulumi.runtime.resource._get_stack_trace``). It extracts the whole stack first
    (``traceback.extract_stack``: a ``FrameSummary`` per frame, each frame's source line read through linecache and
    every file on the stack ``os.stat``-ed to see whether it changed) and makes each frame's position afresh (a
    ``pathlib`` URI of its file), where it needs only each frame's file, line and name: about 30 µs a resource in
    a plan, 1,615 resources at 30,000 nodes from a few hundred lines. ``stack_trace`` walks the same frames, finds
    the same constructor and makes the same message (the SDK's own function makes each new position), so what the
    engine receives is the same bytes (``tests/stacks/test_performance.py`` compares them); a message made for one
    stack is handed out again for the same stack, as the SDK copies it into the request."""

    def __init__(self) -> None:
        self._original = sdk_resource._get_stack_trace
        position_of = sdk_resource._get_source_position_for_frame
        frames: dict[tuple[str, int | None, str], source_pb2.StackFrame] = {}
        traces: dict[tuple[tuple[str, int | None, str], ...], source_pb2.StackTrace] = {}

        def stack_trace() -> source_pb2.StackTrace:
            frame = sys._getframe(1)
            constructors = 0
            while frame is not None:
                if frame.f_code.co_name == "__init__":
                    constructors += 1
                    if constructors == 3:
                        break
                frame = frame.f_back
            below = frame.f_back if frame is not None else None
            if below is None:  # no third constructor, or nothing below it: as the SDK, an empty trace
                return source_pb2.StackTrace()
            lines = []
            while below is not None:
                lines.append((below.f_code.co_filename, below.f_lineno, below.f_code.co_name))
                below = below.f_back
            key = tuple(lines)
            trace = traces.get(key)
            if trace is None:
                for line in key:
                    if line not in frames:
                        summary = traceback.FrameSummary(line[0], line[1], line[2], lookup_line=False)
                        frames[line] = source_pb2.StackFrame(pc=position_of(summary))
                trace = traces[key] = source_pb2.StackTrace(frames=[frames[line] for line in key])
            return trace

        sdk_resource._get_stack_trace = stack_trace

    def restore(self) -> None:
        sdk_resource._get_stack_trace = self._original


async def _resolve_outputs() -> dict[str, Any]:
    from pulumi.runtime import rpc

    root = settings.get_root_resource()
    exported = getattr(root, "outputs", {}) or {}
    return plain(struct_value(await rpc.serialize_properties(exported, {})))
