"""The Kubernetes manifests run: each Deployment's pod spec applied to the image by Docker (``make deploy-test``).

Why: tests/test_kubernetes.py validates the manifests against the schemas, but a pod that is well formed can
still fail on the image: a read-only root the worker writes to, an emptyDir the non-root user cannot write, a
Secret's key the process never reads, a Service name the worker's preview URL does not match, a sandbox whose
capabilities or AppArmor profile cannot make its namespaces. No cluster runs here, so Docker stands in for the
kubelet (tests/support/kubelet.py): every pod is ready by its own readiness probe, runs as its securityContext
says, and a research run through the API server reaches its report with token previews, its coder's Python
run by the sandbox pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kubelet import (
    NETWORK,
    PREFIX,
    S3_ENDPOINT,
    SEARCH_ATTRIBUTES,
    TOKENS,
    applied,
    docker,
    run_args,
    succeeds,
)
from tests.support.runs import QUESTION

pytestmark = [
    pytest.mark.skipif(os.environ.get("DEERFLOW_DEPLOY_TEST") != "1",
                       reason="needs Docker and the images `make deploy-test` builds; run `make deploy-test`"),
    pytest.mark.timeout(1200),
]
READY_SECONDS = 300
RUN_SECONDS = 300
# Run inside the API pod (its own loopback): a research run to its report, counting the page's preview events.
CLIENT = """
import json, sys, urllib.request
token, question = sys.argv[1], sys.argv[2]
def call(method, path, body=None):
    request = urllib.request.Request("http://127.0.0.1:8000" + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=float(sys.argv[3]))
run = json.loads(call("POST", "/api/runs", {"question": question, "auto_accept_plan": True}).read())["id"]
events = call("GET", "/api/runs/" + run + "/events")  # until the run ends
previews = sum(line.startswith(b"data:") and b'"preview"' in line for line in events)
shown = json.loads(call("GET", "/api/runs/" + run).read())
print(json.dumps({"id": run, "status": shown["status"], "report": (shown.get("result") or {}).get("report") or "",
                  "previews": previews}))
"""


def deployments() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in applied() if doc["kind"] == "Deployment"}


def down() -> None:
    for container in docker("ps", "-aq", "--filter", f"name={PREFIX}-").split():
        docker("rm", "-f", container)
    docker("network", "rm", NETWORK, check=False)


def start_services(settings: dict[str, str]) -> None:
    """Temporal at settings.yaml's frontend address, and the S3 stand-in with the payload bucket."""
    docker("network", "create", "--internal", NETWORK)
    flags = [part for attribute in SEARCH_ATTRIBUTES for part in ("--search-attribute", attribute)]
    docker("run", "-d", "--name", f"{PREFIX}-temporal", "--network", NETWORK, "--dns", "127.0.0.1",
           "--network-alias", settings["TEMPORAL_ADDRESS"].rsplit(":", 1)[0], "deerflow-temporal-server:offline",
           "server", "start-dev", "--ip", "0.0.0.0", "--port", "7233", "--headless", "--namespace", "default", *flags,
           "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
           "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")
    docker("run", "-d", "--name", f"{PREFIX}-minio", "--network", NETWORK, "--dns", "127.0.0.1",
           "--network-alias", "minio", "deerflow-s3-standin:offline")
    create = ("import boto3, sys, time\nfor _ in range(120):\n    try:\n        boto3.client('s3', endpoint_url="
              "'http://127.0.0.1:9000', region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='x')"
              ".create_bucket(Bucket=sys.argv[1]); break\n    except Exception:\n        time.sleep(1)\n"
              "else:\n    sys.exit('no S3 stand-in')")
    docker("exec", f"{PREFIX}-minio", "/opt/s3/bin/python", "-c", create, settings["DEERFLOW_S3_BUCKET"])


def probe_port(deployment: dict[str, Any]) -> tuple[str, int]:
    """The readiness probe's path and container port (a named port resolved)."""
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    probe = container["readinessProbe"]["httpGet"]
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    return probe["path"], ports.get(probe["port"], probe["port"])


def ready(name: str, deployment: dict[str, Any]) -> bool:
    """What the kubelet's readiness probe would see: 200 from the probe's path and port."""
    path, port = probe_port(deployment)
    url = f"http://127.0.0.1:{port}{path}"
    check = f"import sys, urllib.request as u; sys.exit(u.urlopen({url!r}, timeout=4).status != 200)"
    return succeeds("exec", f"{PREFIX}-{name}", "python", "-c", check)


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    docs = applied()
    config_maps = {doc["metadata"]["name"]: dict(doc["data"]) for doc in docs if doc["kind"] == "ConfigMap"}
    config_maps["deerflow-settings"]["DEERFLOW_S3_ENDPOINT_URL"] = S3_ENDPOINT  # MinIO in the cluster
    conf_dir = tmp_path_factory.mktemp("conf")
    for key, value in config_maps["deerflow-conf"].items():
        (conf_dir / key).write_text(value, encoding="utf-8")
        (conf_dir / key).chmod(0o644)
    conf_dir.chmod(0o755)  # a ConfigMap volume is readable by the pod's user
    down()
    try:
        start_services(config_maps["deerflow-settings"])
        for deployment in deployments().values():
            docker(*run_args(deployment, docs, config_maps, conf_dir))
        began, waiting = time.monotonic(), dict(deployments())
        while waiting := {name: d for name, d in waiting.items() if not ready(name, d)}:
            logs = {name: docker("logs", "--tail", "20", f"{PREFIX}-{name}", check=False) for name in waiting}
            assert time.monotonic() - began < READY_SECONDS, f"not ready: {sorted(waiting)}\n{logs}"
            time.sleep(3)
        print(f"every pod ready by its readiness probe after {time.monotonic() - began:.0f} s")
        yield deployments()
    finally:
        if os.environ.get("DEERFLOW_DEPLOY_KEEP") != "1":
            down()


def test_every_pod_runs_as_its_security_context_says(pods: dict[str, dict[str, Any]]) -> None:
    for name, deployment in pods.items():
        pod = deployment["spec"]["template"]["spec"]
        [container] = pod["containers"]
        user = container["securityContext"].get("runAsUser", pod.get("securityContext", {}).get("runAsUser"))
        shown = docker("exec", f"{PREFIX}-{name}", "sh", "-c", "id -u; touch /app/written 2>/dev/null && echo rw; true")
        assert shown.split() == [str(user)], (name, shown)  # its uid, and the root file system read-only
        # Whatever it writes (the worker's in-flight journal in DEERFLOW_HOME, scratch in /tmp) has a volume: a
        # write it cannot make is only logged (the worker then runs on without its journal).
        shown_logs = subprocess.run(["docker", "logs", f"{PREFIX}-{name}"], capture_output=True, text=True,
                                    timeout=60, check=False)
        logs = shown_logs.stdout + shown_logs.stderr
        assert not [line for line in logs.splitlines() if "Permission denied" in line or "Read-only file" in line], name


def test_a_research_run_reaches_its_report_with_previews_and_the_sandbox_pod_runs_its_code(
        pods: dict[str, dict[str, Any]]) -> None:
    shown = json.loads(docker("exec", "-i", f"{PREFIX}-deerflow-api", "python", "-", TOKENS[0]["token"], QUESTION,
                              str(RUN_SECONDS), stdin=CLIENT, timeout=RUN_SECONDS + 60))
    assert shown["status"] == "completed" and shown["report"].strip(), shown
    assert shown["previews"], "no token preview reached the API pod: the worker's DEERFLOW_TOKEN_STREAM_URL"
    history = json.loads(docker("exec", f"{PREFIX}-temporal", "/temporal", "workflow", "show", "-w", shown["id"],
                                "--address", "127.0.0.1:7233", "-o", "json"))["events"]
    scheduled = {event["eventId"]: event["activityTaskScheduledEventAttributes"] for event in history
                 if event["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"}
    ran = [scheduled[str(event["activityTaskCompletedEventAttributes"]["scheduledEventId"])] for event in history
           if event["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED"]
    coder = [(a["activityType"]["name"], a["taskQueue"]["name"]) for a in ran if a["activityType"]["name"] ==
             "python_repl_tool"]
    assert coder and set(coder) == {("python_repl_tool", "deep-research-sandbox")}, ran
    sandbox_user = docker("exec", f"{PREFIX}-deerflow-sandbox", "id", "-u")
    print(f"run {shown['id']}: report of {len(shown['report'])} characters, {shown['previews']} previews, "
          f"{len(coder)} python_repl_tool call(s) on the sandbox pod (uid {sandbox_user})")
