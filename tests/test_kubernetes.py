"""The Kubernetes manifests (deploy/kubernetes) hold to the API's schemas and to what the product needs.

Why: a manifest is only checked when a cluster rejects it or, worse, accepts it and the pod misbehaves:
probes on the wrong port restart a healthy worker, a termination grace shorter than the worker's drain
SIGKILLs a model call paid for, a secret pasted as a value leaks with the manifest. There is no cluster
here, so the manifests are validated offline against the Kubernetes schemas (``kubernetes-validate``,
strict: an unknown field is an error) and read for the rest (issue #43 §4).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from config.settings import is_secret, load_settings
from runtime.token_stream_format import PATH as TOKEN_STREAM_PATH

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"  # appArmorProfile in the security context needs 1.30 or later
SANDBOX_CAPABILITIES = {"SYS_ADMIN", "SYS_CHROOT", "SETUID", "SETGID", "KILL"}  # sandbox/bootstrap.py's, no more
COMPOSE_COMMANDS = {"deerflow-worker": "worker", "deerflow-sandbox": "sandbox", "deerflow-api": "api"}


def documents(*names: str) -> list[dict[str, Any]]:
    paths = [MANIFESTS / name for name in names] if names else sorted(MANIFESTS.glob("*.yaml"))
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def applied() -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/kubernetes` applies: kustomization.yaml's resources."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    return documents(*kustomization["resources"])


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in applied() if doc["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container(deployment).get("env", [])}


@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda path: path.name)
def test_every_manifest_matches_the_kubernetes_schemas(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if doc and doc["kind"] != "Kustomization":
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_validation_refuses_what_a_cluster_would() -> None:
    """The check itself: a misspelt field and a wrong type are errors, so a pass means something."""
    deployment = of_kind("Deployment")["deerflow-worker"]
    spelled = yaml.safe_load(yaml.safe_dump(deployment))
    spelled["spec"]["template"]["spec"]["terminationGracePeriod"] = 330
    typed = yaml.safe_load(yaml.safe_dump(deployment))
    typed["spec"]["replicas"] = "two"
    for broken in (spelled, typed):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_probes_are_the_products_on_the_port_it_serves_them() -> None:
    for name, deployment in of_kind("Deployment").items():
        main = container(deployment)
        ports = {port["name"]: port["containerPort"] for port in main["ports"]}
        command = main["command"]
        served = int(env_of(deployment)["DEERFLOW_HEALTH_ADDRESS"].rpartition(":")[2]) if "worker.py" in command \
            else int(command[command.index("--port") + 1])
        assert main["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert main["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in main:
                assert ports[main[probe]["httpGet"]["port"]] == served, (name, probe)


def test_workers_outlast_their_drain_before_kubernetes_kills_them() -> None:
    settings = of_kind("ConfigMap")["deerflow-settings"]["data"]
    grace = load_settings({"DEERFLOW_WORKER_SHUTDOWN_GRACE": settings["DEERFLOW_WORKER_SHUTDOWN_GRACE"]})
    for name in ("deerflow-worker", "deerflow-sandbox"):
        pod = of_kind("Deployment")[name]["spec"]["template"]["spec"]
        assert grace.worker_shutdown_grace + 10 <= pod["terminationGracePeriodSeconds"], name


def test_every_deployment_has_requests_and_a_disruption_budget() -> None:
    budgets = of_kind("PodDisruptionBudget")
    for name, deployment in of_kind("Deployment").items():
        assert {"cpu", "memory"} <= set(container(deployment)["resources"]["requests"]), name
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets.values() if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(covering) == 1, name
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
    assert of_kind("PodDisruptionBudget")["deerflow-worker"]["spec"]["minAvailable"] == 1
    assert of_kind("Deployment")["deerflow-worker"]["spec"]["replicas"] >= 2


def test_secrets_come_from_secrets_never_from_the_manifests() -> None:
    assert not of_kind("Secret"), "a Secret with values among the applied manifests"
    for doc in applied():
        for name in doc.get("data") or {}:
            assert not is_secret(name), (doc["metadata"]["name"], name)
    for name, deployment in of_kind("Deployment").items():
        for variable, value in env_of(deployment).items():
            if is_secret(variable):
                assert isinstance(value, dict) and "secretKeyRef" in value, (name, variable)
        refs = [ref for ref in container(deployment).get("envFrom", []) if "secretRef" in ref]
        assert refs or name == "deerflow-sandbox", name
    example = {doc["metadata"]["name"] for doc in documents("secrets.example.yaml")}
    wanted = {ref["secretRef"]["name"] for d in of_kind("Deployment").values()
              for ref in container(d).get("envFrom", []) if "secretRef" in ref}
    wanted |= {v["secretKeyRef"]["name"] for d in of_kind("Deployment").values() for v in env_of(d).values()
               if isinstance(v, dict) and "secretKeyRef" in v and not v["secretKeyRef"].get("optional")}
    assert wanted <= example, wanted - example


def test_everything_runs_as_non_root_but_the_sandbox_whose_needs_are_stated() -> None:
    for name, deployment in of_kind("Deployment").items():
        pod, main = deployment["spec"]["template"]["spec"], container(deployment)
        context = main["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert "ALL" in context["capabilities"]["drop"], name
        if name == "deerflow-sandbox":
            assert set(context["capabilities"]["add"]) == SANDBOX_CAPABILITIES
            assert context["runAsUser"] == 0 and context["appArmorProfile"]["type"] == "Unconfined"
            assert env_of(deployment)["DEERFLOW_SANDBOX_MODE"] == "isolated"
            stated = (MANIFESTS / "sandbox.yaml").read_text(encoding="utf-8")
            assert all(re.search(rf"^#.*{capability}", stated, re.MULTILINE) for capability in SANDBOX_CAPABILITIES)
        else:
            assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0, name
            assert "add" not in context["capabilities"], name


def test_the_pods_run_what_compose_runs_and_previews_reach_the_api() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    deployments = of_kind("Deployment")
    for name, service in COMPOSE_COMMANDS.items():
        assert container(deployments[name])["command"] == compose[service]["command"], name
    assert len({container(d)["image"] for d in deployments.values()}) == 1
    api_port = of_kind("Service")["deerflow-api"]["spec"]["ports"][0]["port"]
    worker = env_of(deployments["deerflow-worker"])
    assert worker["DEERFLOW_TOKEN_STREAM_URL"] == f"http://deerflow-api:{api_port}{TOKEN_STREAM_PATH}"
    assert worker["DEERFLOW_TOKEN_STREAM_TOKEN"] == env_of(deployments["deerflow-api"])["DEERFLOW_TOKEN_STREAM_TOKEN"]
    settings = of_kind("ConfigMap")["deerflow-settings"]["data"]
    load_settings(settings)  # every value there is a valid setting


# Addresses the sandbox pod must never reach: the cluster's and the node's private ranges, loopback, and the
# instance metadata service (the node's cloud credentials).
NEVER_REACHED = ("10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254", "127.0.0.1")


def reached_by(block: dict[str, Any], address: str) -> bool:
    """Whether a NetworkPolicy ipBlock admits ``address``: inside its CIDR and outside every exception."""
    ip = ipaddress.ip_address(address)
    return ip in ipaddress.ip_network(block["cidr"]) and \
        not any(ip in ipaddress.ip_network(excepted) for excepted in block.get("except", []))


def test_the_sandbox_reaches_only_dns_temporal_and_the_store_and_nothing_reaches_it() -> None:
    """The coder's Python runs in the sandbox pod: its NetworkPolicy denies every connection in and allows
    out only the cluster's DNS, Temporal's frontend on the port TEMPORAL_ADDRESS names and the store over
    HTTPS on public addresses. A rule without `to` or `ports` would allow every destination or port."""
    sandbox = of_kind("Deployment")["deerflow-sandbox"]["spec"]["template"]["metadata"]["labels"]
    selecting = {name: policy["spec"] for name, policy in of_kind("NetworkPolicy").items()
                 if policy["spec"]["podSelector"]["matchLabels"].items() <= sandbox.items()}
    [spec] = selecting.values()
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"} and not spec.get("ingress"), spec
    rules = spec["egress"]
    assert all(rule.get("to") and rule.get("ports") for rule in rules), rules
    allowed = {(port["protocol"], port["port"]) for rule in rules for port in rule["ports"]}
    settings = of_kind("ConfigMap")["deerflow-settings"]["data"]
    host, _, temporal_port = settings["TEMPORAL_ADDRESS"].rpartition(":")
    store_port = 443 if "DEERFLOW_S3_ENDPOINT_URL" not in settings else None  # AWS S3 itself: HTTPS
    assert allowed == {("UDP", 53), ("TCP", 53), ("TCP", int(temporal_port)), ("TCP", store_port)}, allowed
    # Temporal's frontend: pods of the namespace its service name is in, on its port only.
    [temporal] = [rule for rule in rules if ("TCP", int(temporal_port)) in
                  {(port["protocol"], port["port"]) for port in rule["ports"]}]
    namespace = host.split(".")[1]
    assert [peer["namespaceSelector"]["matchLabels"] for peer in temporal["to"]] == \
        [{"kubernetes.io/metadata.name": namespace}]
    assert len(temporal["ports"]) == 1
    # Address blocks (the store's) admit no private, loopback or metadata address.
    blocks = [peer["ipBlock"] for rule in rules for peer in rule["to"] if "ipBlock" in peer]
    assert blocks and not [(block, address) for block in blocks for address in NEVER_REACHED
                           if reached_by(block, address)]
    for rule in rules:  # a rule is either address blocks or selected pods, each in a namespace named
        assert all("ipBlock" in peer or "namespaceSelector" in peer for peer in rule["to"]), rule
