"""One approver copy decides at a time (the holder of its Lease), so a burst of joining nodes costs Resource
Manager one copy's reads, not one per apiserver; and a copy that stops renewing hands over. The program's own
``Leadership`` against a fake apiserver and clock; the rendered Lease, its settings and its RBAC agree. Against
the real apiservers: tests/e2e/test_node_labels.py."""

from __future__ import annotations

import io
import json
import urllib.error

import pytest

from infra.control_plane import cluster_objects, csr_approval, leader_election
from tests.helpers import parsed
from tests.infra.control_plane_files import approver_program, files, machines

SETTINGS = csr_approval.lease_settings()
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{SETTINGS['namespace']}/leases/{SETTINGS['name']}"


@pytest.fixture(scope="module")
def approver():
    return approver_program()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeApiserver:
    """The Lease as the apiserver keeps it: a GET returns it, a PUT at a stale resourceVersion is a 409."""

    def __init__(self, spec: dict | None = None, exists: bool = True):
        self.lease = {"metadata": {"name": SETTINGS["name"], "resourceVersion": "1"}, "spec": spec or {}}
        self.exists = exists
        self.puts: list[dict] = []
        self.stale: dict | None = None  # what the next GET answers instead, once (``answer_next_read``)

    def _error(self, code):
        return urllib.error.HTTPError(PATH, code, "", {}, io.BytesIO())  # type: ignore[arg-type]

    def answer_next_read(self, lease: dict) -> None:
        """The next GET answers ``lease``, an earlier state: a read made before another copy's write landed."""
        self.stale = lease

    def get(self, path):
        assert path == PATH
        if not self.exists:
            raise self._error(404)
        answer, self.stale = self.stale or self.lease, None
        return json.loads(json.dumps(answer))

    def call(self, method, path, body=None):
        assert (method, path) == ("PUT", PATH)
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise self._error(409)
        self.puts.append(body)
        version = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        return io.BytesIO(b"{}")

    def renewed_by(self, holder: str) -> None:
        """Another copy renews: a new renewTime and resourceVersion."""
        version = str(int(self.lease["metadata"]["resourceVersion"]) + 1)
        renewals = int(self.lease["spec"].get("renewTime", "0").rsplit(".", 1)[-1].rstrip("Z") or 0) + 1
        self.lease = {
            "metadata": {**self.lease["metadata"], "resourceVersion": version},
            "spec": {"holderIdentity": holder, "renewTime": f"2026-11-27T00:00:00.{renewals:06d}Z"},
        }


def _copy(approver, name="apiserver-0", clock=None):
    return approver.Leadership(SETTINGS, name, clock or Clock())


def test_a_lease_nobody_holds_is_taken_and_the_copy_decides(approver):
    apiserver, copy = FakeApiserver(), _copy(approver)
    assert not copy.leads()
    assert "apiserver-0 holds" in copy.attempt(apiserver)
    assert copy.leads()
    spec = apiserver.lease["spec"]
    assert spec["holderIdentity"] == "apiserver-0"
    assert spec["leaseDurationSeconds"] == leader_election.LEASE_DURATION_S
    assert spec["leaseTransitions"] == 1


def test_a_copy_stands_by_while_another_renews_and_takes_over_once_renewals_stop(approver):
    clock = Clock()
    apiserver, copy = FakeApiserver(), _copy(approver, "apiserver-1", clock)
    apiserver.renewed_by("apiserver-0")
    copy.attempt(apiserver)
    assert not copy.leads()
    for _ in range(30):  # renewed every retry period, for longer than a lease: this copy never takes it
        clock.now += SETTINGS["retry_seconds"]
        apiserver.renewed_by("apiserver-0")
        copy.attempt(apiserver)
        assert not copy.leads() and not apiserver.puts
    clock.now += SETTINGS["duration_seconds"] - 1  # the last renewal is not yet a lease old
    copy.attempt(apiserver)
    assert not copy.leads()
    clock.now += 1
    copy.attempt(apiserver)
    assert copy.leads() and apiserver.lease["spec"]["holderIdentity"] == "apiserver-1"


def test_the_holder_stops_deciding_before_another_copy_may_take_over(approver):
    """Its own renewals stop (its apiserver unreachable): it decides for the renew deadline, which ends before the
    lease duration after which a standby takes the Lease."""
    clock = Clock()
    apiserver, holder = FakeApiserver(), _copy(approver, "apiserver-0", clock)
    holder.attempt(apiserver)
    assert SETTINGS["renew_deadline_seconds"] < SETTINGS["duration_seconds"]
    clock.now += SETTINGS["renew_deadline_seconds"] - 0.1
    assert holder.leads()
    clock.now += 0.1
    assert not holder.leads()


def test_a_restarted_copy_renews_its_own_claim_at_once(approver):
    apiserver = FakeApiserver()
    _copy(approver, "apiserver-0").attempt(apiserver)
    again = _copy(approver, "apiserver-0")  # the same VM's next process
    again.attempt(apiserver)
    assert again.leads() and apiserver.lease["spec"]["leaseTransitions"] == 1


def test_two_copies_claiming_at_once_get_one_holder(approver):
    """Both copies read the free Lease at once; the first's claim lands, then the second claims on what it read
    before that (a stale resourceVersion): the apiserver refuses it (409), and only the first decides."""
    apiserver = FakeApiserver()
    first, second = _copy(approver, "apiserver-0"), _copy(approver, "apiserver-1")
    read_at_once = apiserver.get(PATH)
    first.attempt(apiserver)
    apiserver.answer_next_read(read_at_once)  # the second's read, made before the first's claim landed
    second.attempt(apiserver)
    assert first.leads() and not second.leads()
    assert [put["spec"]["holderIdentity"] for put in apiserver.puts] == ["apiserver-0"]


def test_without_its_lease_every_copy_decides(approver):
    """Someone deleted the Lease: nodes keep joining, each copy deciding as before the Lease (the next
    ``pulumi up`` declares it again)."""
    copy = _copy(approver)
    assert "every copy decides" in copy.attempt(FakeApiserver(exists=False))
    assert copy.leads()


def test_a_standby_copy_makes_no_resource_manager_read(approver):
    config = {**json.loads(files(machines("prod")[0])[csr_approval.CONFIG])}
    program = approver.Approver(config)

    class Unreachable:
        def __getattr__(self, name):
            raise AssertionError(f"a standby copy asked Azure ({name})")

    program.azure_api = Unreachable()
    csr = {"metadata": {"name": "csr-1"}, "spec": {"signerName": config["signer"], "username": "system:node:x"}}
    with pytest.raises(approver.Standby):
        program.consider(None, csr)


def test_the_rendered_lease_is_the_one_every_copy_claims_and_may_update():
    rendered = {json.dumps(json.loads(files(m)[csr_approval.CONFIG])["lease"]) for m in machines("prod")}
    (settings,) = [json.loads(r) for r in rendered]
    objects = cluster_objects.cluster_objects(parsed("prod"))
    (lease,) = [o for o in objects if o["kind"] == "Lease" and o["metadata"]["name"] == settings["name"]]
    assert lease["metadata"]["namespace"] == settings["namespace"] and "spec" not in lease
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == cluster_objects.CSR_APPROVER_ROLE]
    assert role["metadata"]["namespace"] == settings["namespace"]
    assert role["rules"][0]["resourceNames"] == [settings["name"]]
    assert (settings["duration_seconds"], settings["renew_deadline_seconds"], settings["retry_seconds"]) == (
        leader_election.LEASE_DURATION_S,
        leader_election.RENEW_DEADLINE_S,
        leader_election.RETRY_PERIOD_S,
    )


def test_a_scale_set_instances_nics_are_read_page_by_page_from_resource_manager_only(approver):
    """Resource Manager pages a list (``nextLink``): every page's NICs count, and a link anywhere else is refused
    before any token is sent to it."""
    config = json.loads(files(machines("prod")[0])[csr_approval.CONFIG])
    endpoint = config["arm_endpoint"]
    vm = {
        "id": (
            "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/p/virtualMachines/0"
        )
    }
    pages = {
        f"{endpoint}{vm['id']}/networkInterfaces": {"value": [{"name": "nic0"}], "nextLink": f"{endpoint}/page2"},
        f"{endpoint}/page2": {"value": [{"name": "nic1"}]},
    }
    azure = approver.Azure(config)
    azure.bearer = lambda: "token"
    azure.get = lambda url, headers, context=None: pages[url.split("?")[0]]
    assert [n["name"] for n in azure.nics(vm)] == ["nic0", "nic1"]
    pages[f"{endpoint}/page2"]["nextLink"] = "https://elsewhere.example/page3"
    with pytest.raises(ValueError, match="not Resource Manager's"):
        azure.nics(vm)
