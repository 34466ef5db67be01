"""deploy/kubernetes's Deployments run by Docker as a kubelet would run them (tests/test_kubernetes_pods.py).

There is no cluster here, and kubernetes-validate (tests/test_kubernetes.py) says only that the manifests are
well formed, not that the image works under them. Each Deployment becomes one container of the image, with
what its pod spec says: env and envFrom from the ConfigMaps and the Secrets (secrets.example.yaml's names,
test values), the pod's and the container's securityContext (user, read-only root, capabilities, no privilege
escalation, AppArmor), emptyDirs as tmpfs (owned by the pod's fsGroup, as the kubelet makes them), the conf
ConfigMap mounted read-only and each Service's name as a network alias. Temporal (the offline image) answers
for the Helm chart's frontend at settings.yaml's address; the S3 stand-in for MinIO in the cluster (the doc's
step 2: DEERFLOW_S3_ENDPOINT_URL). Everything is on one internal network: nothing leaves the machine, and the
test reaches the pods only through ``docker exec``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
PREFIX = "deerflow-k8s-test"
NETWORK = PREFIX
S3_ENDPOINT = "http://minio:9000"
TOKENS = [{"name": "ann", "token": "k8s-test-ann-token-00000", "role": "admin"}]
# secrets.example.yaml's Secrets, with test values; deerflow-temporal (Temporal Cloud's key) is left out, as
# for a cluster of one's own (its references are optional).
SECRETS: dict[str, dict[str, str]] = {
    "deerflow-provider-keys": {},
    "deerflow-web": {"DEERFLOW_WEB_TOKENS": json.dumps(TOKENS),
                     "DEERFLOW_TOKEN_STREAM_TOKEN": "k8s-test-stream-secret"},
    "deerflow-codec": {"DEERFLOW_CODEC_TOKEN": "k8s-test-codec-token-000"},
    **{f"deerflow-s3-{name}": {"AWS_ACCESS_KEY_ID": f"k8s-test-{name}", "AWS_SECRET_ACCESS_KEY": f"k8s-test-{name}-key"}
       for name in ("worker", "api", "codec", "sandbox")},
}
# What the Helm chart's operator registers once (docs/deploying/temporal.md), given to the dev server here.
SEARCH_ATTRIBUTES = ("DeerFlowPhase=Keyword", "DeerFlowAwaiting=Keyword", "DeerFlowReportStyle=Keyword",
                     "DeerFlowForkedFrom=Keyword", "DeerFlowStartedBy=Keyword", "DeerFlowQuestion=Text")


def docker(*args: str, check: bool = True, timeout: float = 300, stdin: str | None = None) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=stdin,
                            check=False)
    assert result.returncode == 0 or not check, f"docker {' '.join(args[:3])}: {result.stdout}{result.stderr}"
    return result.stdout.strip()


def succeeds(*args: str, timeout: float = 60) -> bool:
    return subprocess.run(["docker", *args], capture_output=True, timeout=timeout, check=False).returncode == 0


def applied() -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/kubernetes` applies (kustomization.yaml's resources, no transforms)."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text(encoding="utf-8"))
    return [doc for name in kustomization["resources"]
            for doc in yaml.safe_load_all((MANIFESTS / name).read_text(encoding="utf-8")) if doc]


def container_env(container: dict[str, Any], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom in order, then env, which wins."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(config_maps[source["configMapRef"]["name"]])
        else:
            env.update(SECRETS[source["secretRef"]["name"]])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        reference = item["valueFrom"]["secretKeyRef"]
        value = SECRETS.get(reference["name"], {}).get(reference["key"])
        assert value is not None or reference.get("optional"), f"{item['name']}: no Secret {reference}"
        if value is not None:
            env[item["name"]] = value
    return env


def security_args(pod: dict[str, Any], container: dict[str, Any]) -> tuple[list[str], str | None]:
    """docker run's options for the pod's and the container's securityContext, and the emptyDirs' owner."""
    pod_context, context = pod.get("securityContext", {}), container.get("securityContext", {})
    user = context.get("runAsUser", pod_context.get("runAsUser"))
    group = context.get("runAsGroup", pod_context.get("runAsGroup", user))
    args = ["--user", f"{user}:{group}"] if user is not None else []
    if pod_context.get("fsGroup") is not None:
        args += ["--group-add", str(pod_context["fsGroup"])]
    if context.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    args += [part for cap in context.get("capabilities", {}).get("drop", []) for part in ("--cap-drop", cap)]
    args += [part for cap in context.get("capabilities", {}).get("add", []) for part in ("--cap-add", cap)]
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges:true"]
    if context.get("appArmorProfile", {}).get("type") == "Unconfined":
        args += ["--security-opt", "apparmor=unconfined"]
    # An emptyDir belongs to the pod's fsGroup, else anyone may write it (Docker would keep the mode of the
    # image's directory at that path instead).
    owner = f"uid={user},gid={pod_context['fsGroup']}" if pod_context.get("fsGroup") is not None else "mode=1777"
    return args, owner


def run_args(deployment: dict[str, Any], docs: list[dict[str, Any]], config_maps: dict[str, dict[str, str]],
             conf_dir: Path) -> list[str]:
    """`docker run` of the Deployment's one container, as its pod spec says."""
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    name = deployment["metadata"]["name"]
    args = ["run", "-d", "--name", f"{PREFIX}-{name}", "--network", NETWORK, "--dns", "127.0.0.1"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    args += [part for doc in docs if doc["kind"] == "Service" and doc["spec"]["selector"] == selector
             for part in ("--network-alias", doc["metadata"]["name"])]
    security, owner = security_args(pod, container)
    args += security
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            args += ["--tmpfs", f"{mount['mountPath']}:rw,{owner}"]
        else:
            assert volume["configMap"]["name"] == "deerflow-conf" and mount.get("readOnly"), volume
            args += ["-v", f"{conf_dir}:{mount['mountPath']}:ro"]
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    if limit:
        args += ["--memory", limit.replace("Gi", "g").replace("Mi", "m")]
    for key, value in container_env(container, config_maps).items():
        args += ["-e", f"{key}={value}"]
    return [*args, "--entrypoint", container["command"][0], container["image"], *container["command"][1:]]
