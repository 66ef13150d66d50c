"""The test's own hosts: one network namespace per machine of the plan, on a bridge with no way out.

Every host holds its machine's own address from the plan and its own host name (nothing in a rendered file is
rewritten), hangs off one bridge that lives in a namespace of the test's own (the "switch"),
and has no default route: a packet to a plan address reaches a test host or nobody. Processes
run inside a host through ``ip netns exec``, which also gives each one a private mount namespace
(a real node's processes share one instead: ``share_mounts``);
there the machine's own directories (``/etc/kubernetes``, ``/var/lib/etcd``, ...) are bind-mounted
from the machine's folder, so two machines' files at the same path never meet. Everything is torn
down by ``close()``: processes stopped (TERM, then KILL), namespaces deleted.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Paths a machine owns: bind-mounted from its folder inside its own mount namespace. The mount
# points are created on the host when missing (empty directories) and left there: another box
# booted at the same time may be using them.
MACHINE_PATHS = (
    "etc/kubernetes",
    "etc/etcd",
    "etc/supercluster",
    "usr/local/sbin",
    "var/lib/etcd",
    "var/lib/kubelet",
    "var/log/kubernetes",
    "run/etcd",
    "run/kubernetes",
    "run/containerd",
    # A real node's (tests/e2e/runtime.py): containerd's config and root (on the local SSD's mount),
    # the CNI plugins, their configuration and host-local's allocations, pod logs, the machine
    # image's archives, and the resolver file kubelet's rendered resolvConf names.
    "etc/containerd",
    "etc/cni",
    "opt/cni/bin",
    "var/lib/cni",
    "var/lib/local-ssd",
    "var/log/pods",
    "var/lib/supercluster",
    "run/systemd/resolve",
    "run/netns",  # containerd's pods' network namespaces
)
BINARIES_PATH = "/usr/local/bin"  # where the rendered units expect the binaries
RESTARTED = "; restarting in "  # what the restart loop prints each time the unit exits
# systemd replaces ``${NAME}`` in a unit's command line from its environment (systemd.service, "Command lines"). A
# word still holding one was not started as systemd starts the unit (``cluster.unit_argv`` does): the binary would
# get the literal, as two benchmarks' schedulers and apiservers once did with ``${MACHINE_ADDRESS}``.
SYSTEMD_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
# Every network open in this process, so the harness can watch all of their processes (tests/e2e/restarts.py).
OPEN_NETWORKS: list[TestNetwork] = []


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


@dataclass
class Host:
    name: str  # the machine's name, e.g. dev-etcd-0
    namespace: str
    addresses: tuple[str, ...]  # "ip/prefix"
    root: Path  # the machine's folder: its files at their machine paths
    # A process holding the host's one mount namespace, which every later process joins (share_mounts):
    # a real node's kubelet mounts pod volumes that containerd and runc must see.
    mount_holder: int | None = None
    # The binaries at /usr/local/bin when not the network's: a machine replaced onto another release's
    # machine image (the staged upgrade, tests/e2e/test_upgrade.py).
    binaries: Path | None = None

    @property
    def ip(self) -> str:
        return self.addresses[0].split("/")[0]


@dataclass
class Process:
    host: Host
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen
    log_offset: int = 0  # where this run's output starts in the log (a unit started again appends)
    log_end: int | None = None  # where it ends, once the unit was started again (None: the end of the file)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def restarts(self) -> int:
        """How many times the restart loop has run the unit again since this process started."""
        return self.output().count(RESTARTED)

    def stop(self, timeout: float = 10) -> None:
        """TERM to the whole process group (the restart loop and what it runs), KILL after ``timeout``;
        returns once no process of the group is left."""
        group = self.popen.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and _group_alive(group):
                self.popen.poll()  # reap the leader so the group can empty
                time.sleep(0.05)
            if not _group_alive(group):
                break
        self.popen.wait(timeout=timeout)

    def output(self) -> str:
        """This run's output (not an earlier run's of the same unit)."""
        if not self.log.exists():
            return ""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            size = -1 if self.log_end is None else self.log_end - self.log_offset
            return log.read(size).decode(errors="replace")


@dataclass
class TestNetwork:
    """A switch namespace with a bridge, and the hosts on it."""

    prefix: str  # namespace names start with it: unique per run
    workdir: Path
    binaries: Path
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-switch"

    def open(self) -> TestNetwork:
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "set", "lo", "up")
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for relative in (*MACHINE_PATHS, BINARIES_PATH.lstrip("/")):
            mount_point = Path("/") / relative
            mount_point.mkdir(parents=True, exist_ok=True)
        OPEN_NETWORKS.append(self)
        return self

    def add_host(self, name: str, addresses: list[str]) -> Host:
        """A namespace holding ``addresses`` (``ip/prefix``) on eth0, wired to the switch."""
        index = len(self.hosts)
        namespace = f"{self.prefix}-h{index}"
        _run("ip", "netns", "add", namespace)
        _run(
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            namespace,
            "type",
            "veth",
            "peer",
            "name",
            f"p{index}",
            "netns",
            self.switch,
        )
        _run("ip", "-n", self.switch, "link", "set", f"p{index}", "master", "br0", "up")
        for address in addresses:
            _run("ip", "-n", namespace, "addr", "add", address, "dev", "eth0")
        _run("ip", "-n", namespace, "link", "set", "eth0", "up")
        _run("ip", "-n", namespace, "link", "set", "lo", "up")
        root = self.workdir / "machines" / name
        for relative in MACHINE_PATHS:
            (root / relative).mkdir(parents=True, exist_ok=True)
        host = Host(name, namespace, tuple(addresses), root)
        self.hosts[name] = host
        return host

    def share_mounts(self, host: Host, setup: list[str] = ()) -> None:
        """From now on every process on ``host`` runs in one mount namespace (a process started here holds
        it, after running the shell commands ``setup`` there), as on a machine, instead of a private one each."""
        holder = self.start(host, "mount-namespace", ["sh", "-c", " && ".join([*setup, "exec sleep infinity"])])
        # `ip netns exec`, `unshare` and `sh` each exec the next: once the binds are made, the process
        # started is `sleep` itself, in the namespace every later process joins.
        comm = Path(f"/proc/{holder.popen.pid}/comm")
        wait_for(
            f"{host.name}'s mount namespace", lambda: comm.read_text().strip() == "sleep", timeout=10, interval=0.05
        )
        host.mount_holder = holder.popen.pid

    def _wrapped(
        self, host: Host, argv: list[str], restart_sec: float | None = None, pre: Sequence[list[str]] = ()
    ) -> list[str]:
        unexpanded = [word for command in (argv, *pre) for word in command if SYSTEMD_VARIABLE.search(word)]
        if unexpanded:
            word = unexpanded[0]
            raise ValueError(f"{host.name}: {word!r} holds a variable systemd would have replaced: use unit_argv")
        first = "".join(f"{shlex.join(command)} && " for command in pre)  # systemd's ExecStartPre=, before each start
        if restart_sec is None:
            run = f'{first}exec "$@"'
        else:  # systemd's Restart=: run it again after RestartSec whenever it exits
            run = f'while :; do {first}"$@"; echo "exited $?{RESTARTED}{restart_sec:g} s"; sleep {restart_sec:g}; done'
        if host.mount_holder is not None:
            target = str(host.mount_holder)
            return ["nsenter", "-t", target, "-m", "-u", "-n", "sh", "-c", run, "sh", *argv]
        binds = [f"mkdir -p /{p} && mount --bind {shlex.quote(str(host.root / p))} /{p}" for p in MACHINE_PATHS]
        binds.append(f"mount --bind {shlex.quote(str(host.binaries or self.binaries))} {BINARIES_PATH}")
        # Its own host name too (a UTS namespace): components name themselves after it (each apiserver's
        # identity Lease, the kubelet's node name), and on Azure every VM has its own.
        script = " && ".join([f"hostname {shlex.quote(host.name)}", *binds]) + " && " + run
        return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c", script, "sh", *argv]

    def start(
        self,
        host: Host,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        restart_sec: float | None = None,
        pre: Sequence[list[str]] = (),
    ) -> Process:
        """Starts ``argv`` on ``host`` in the background, output to ``logs/<host>-<name>.log``;
        with ``restart_sec``, started again that long after every exit (systemd's ``Restart=``); each
        start preceded by the commands in ``pre``, which must succeed (systemd's ``ExecStartPre=``)."""
        log = self.workdir / "logs" / f"{host.name}-{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            offset = out.tell()
            for earlier in self.processes:  # an earlier run of the unit (killed, or stopped) ends here
                if earlier.log == log and earlier.log_end is None:
                    earlier.log_end = offset
            popen = subprocess.Popen(
                self._wrapped(host, argv, restart_sec, pre),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        process = Process(host, name, argv, log, popen, offset)
        self.processes.append(process)
        return process

    def run(
        self, host: Host, argv: list[str], timeout: float = 60, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """Runs ``argv`` on ``host`` to completion (bounded by ``timeout``)."""
        result = subprocess.run(
            self._wrapped(host, argv), capture_output=True, text=True, errors="replace", timeout=timeout, input=input
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{host.name}: {shlex.join(argv)} exited {result.returncode}: "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    def close(self, timeout: float = 5) -> None:
        """Stops every process (TERM to all at once, KILL to what is left after ``timeout``), then
        deletes the namespaces."""
        groups = [p.popen.pid for p in self.processes if p.popen.poll() is None]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for group in groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
                for process in self.processes:
                    process.popen.poll()
                time.sleep(0.1)
        for process in self.processes:
            process.popen.wait(timeout=timeout)
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True, timeout=30)
        OPEN_NETWORKS[:] = [network for network in OPEN_NETWORKS if network is not self]


def wait_for(what: str, check, timeout: float, interval: float = 0.5, on_timeout=None):
    """Polls ``check()`` until it returns something truthy; fails with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # noqa: BLE001 - retried until the deadline, then reported
            last_error = error
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    extra = f"\n{on_timeout()}" if on_timeout else ""
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}{extra}")
