"""The shipped docker-compose.yml run by Docker (``make deploy-test``, tests/test_deploy_stack.py).

A stack of the repository's compose file plus deploy/offline/docker-compose.offline.yml (the images this
machine cannot pull, built locally), under a project name of its own, with an operator's ``.env`` and
settings folder written for the test. Its networks are internal (the override): no container has a route
off the machine, and no port is published, so the host reaches the API server and Temporal at their
addresses on the stack's own bridge (``Stack.address``); nothing of another stack or an embedded dev server
on 127.0.0.1 is in the way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIND = "127.0.0.43"  # DEERFLOW_BIND: where the ports would be published, were the networks not internal
PROJECT = "deerflow-deploy-test"
IMAGE = "deerflow-temporal-worker:latest"
# What an operator puts in .env: every required secret, and the API's named tokens with roles.
TOKENS = {"ann": ("deploy-test-ann-token-000", "admin"), "rita": ("deploy-test-rita-token-00", "reviewer")}
SECRETS = {
    "MINIO_ROOT_USER": "deploy-test-admin", "MINIO_ROOT_PASSWORD": "deploy-test-admin-password",
    "WORKER_S3_PASSWORD": "deploy-test-worker-password", "API_S3_PASSWORD": "deploy-test-api-password",
    "CODEC_S3_PASSWORD": "deploy-test-codec-password", "SANDBOX_S3_PASSWORD": "deploy-test-sandbox-password",
    "DEERFLOW_TOKEN_STREAM_TOKEN": "deploy-test-token-stream-secret",
}
# The team's settings: each model call takes as long as a real provider's short reply, so a stop lands
# mid-call; a model (no key: still the offline demo), a budget, prices and a speech endpoint, which the
# worker gets from its env_file only.
TEAM_SETTINGS = {"DEERFLOW_OFFLINE_MODEL_LATENCY": "1.5", "BASIC_MODEL": "team-model",
                 "DEERFLOW_RUN_TOKEN_BUDGET": "2000000",
                 "DEERFLOW_MODEL_PRICES": '{"team-model": {"input": 0.5, "output": 1.5}}',
                 "DEERFLOW_TTS_URL": "https://api.openai.com/v1/audio/speech"}
# A variable each settings file of the test's folder sets to its own name: a container's environment shows
# which file compose gave it (env_file).
SETTINGS_FILE_MARKER = "DEPLOY_TEST_SETTINGS_FILE"
# The team's conf.yaml: an MCP server, which the worker gets from the mounted file only (a run uses it only
# when its request names it, so none of these runs reaches for it).
CONF_YAML = ("MCP_SERVERS:\n  team-docs:\n    transport: streamable_http\n    url: https://mcp.example.com/mcp\n"
             "    enabled_tools: [search]\n")
HEALTHY_SECONDS = 300


@dataclass
class Stack:
    """One compose project of the shipped file; ``compose(...)`` runs docker-compose on it."""

    workdir: Path
    docker: str = os.environ.get("DOCKER", "docker")
    compose_command: str = os.environ.get("DOCKER_COMPOSE", "docker-compose")
    addresses: dict[str, str] = field(default_factory=dict)  # service -> its IP, until the next `down`

    def write_operator_files(self) -> None:
        settings = self.workdir / "settings"
        settings.mkdir(parents=True, exist_ok=True)
        (settings / "deerflow.env").write_text("".join(f"{k}={v}\n" for k, v in TEAM_SETTINGS.items()))
        for shipped in sorted((ROOT / "deploy" / "compose").glob("*.env")):
            if shipped.name != "deerflow.env":
                shutil.copy(shipped, settings / shipped.name)
        for file in settings.glob("*.env"):  # which file a container read: it carries the file's name
            file.write_text(f"{file.read_text()}{SETTINGS_FILE_MARKER}={file.name}\n")
        (settings / "conf.yaml").write_text(CONF_YAML)
        tokens = [{"name": name, "token": token, "role": role} for name, (token, role) in TOKENS.items()]
        env = {**SECRETS, "COMPOSE_PROJECT_NAME": PROJECT, "DEERFLOW_BIND": BIND,
               "DEERFLOW_CODEC_PUBLIC_URL": f"http://{BIND}:8081", "DEERFLOW_SETTINGS_DIR": str(settings),
               "DEERFLOW_WEB_TOKENS": json.dumps(tokens)}
        (self.workdir / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [ROOT / "docker-compose.yml", ROOT / "deploy" / "offline" / "docker-compose.offline.yml"]
        command = [self.compose_command, "-p", PROJECT, "--env-file", str(self.workdir / ".env"),
                   *[part for path in files for part in ("-f", str(path))], *args]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        assert result.returncode == 0 or not check, f"{' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    def up(self) -> None:
        """``up -d`` of the built images, once the merged files make every network internal (the guard of
        this machine's rule: no traffic off it)."""
        networks = yaml.safe_load(self.compose("config").stdout)["networks"]
        assert {name: network.get("internal") for name, network in networks.items()} == \
            {"default": True, "sandbox": True}, networks
        self.compose("up", "-d", "--no-build")

    def run_docker(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=timeout, check=False)
        assert result.returncode == 0 or not check, f"docker {' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    def container(self, service: str) -> str:
        ids = self.containers(service)
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def containers(self, service: str) -> list[str]:
        """The full ids of the service's running containers."""
        return [self.inspect(short)["Id"] for short in self.compose("ps", "-q", service).stdout.split()
                if self.inspect(short)["State"]["Running"]]

    def address(self, service: str) -> str:
        """The service's IP address on the stack's default network (a bridge of this machine's)."""
        if service not in self.addresses:
            networks = self.inspect(self.containers(service)[0])["NetworkSettings"]["Networks"]
            self.addresses[service] = networks[f"{PROJECT}_default"]["IPAddress"]
        return self.addresses[service]

    def inspect(self, container: str) -> dict[str, Any]:
        return json.loads(self.run_docker("inspect", container).stdout)[0]

    def states(self) -> dict[str, str]:
        """Each service's state: its health where it has a healthcheck, else running / exited N."""
        out = {}
        for container in self.compose("ps", "-q", "-a").stdout.split():
            info = self.inspect(container)
            service = info["Config"]["Labels"]["com.docker.compose.service"]
            state = info["State"]
            out[service] = (state.get("Health") or {}).get("Status") if state["Running"] and state.get("Health") \
                else "running" if state["Running"] else f"exited {state['ExitCode']}"
        return out

    def wait_healthy(self, services: set[str], one_shots: set[str], timeout: float = HEALTHY_SECONDS) -> float:
        """Until every service with a healthcheck is healthy and every one-shot exited 0; seconds taken."""
        began = time.monotonic()
        while True:
            states = self.states()
            if all(states.get(name) == "healthy" for name in services) and \
                    all(states.get(name) == "exited 0" for name in one_shots):
                return time.monotonic() - began
            failed = {name: state for name, state in states.items()
                      if name in one_shots and state.startswith("exited") and state != "exited 0"}
            assert not failed, f"{failed}\n{self.logs(*failed)}"
            assert time.monotonic() - began < timeout, f"not healthy in {timeout} s: {states}\n{self.logs()}"
            time.sleep(2)

    def logs(self, *services: str) -> str:
        return self.compose("logs", "--no-color", "--tail", "40", *services, check=False).stdout[-8000:]

    def api(self, method: str, path: str, body: Any = None, who: str = "ann") -> Any:
        """The API server as a client on the host reaches it, with ``who``'s bearer token."""
        request = urllib.request.Request(f"http://{self.address('api')}:8000{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {TOKENS[who][0]}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def down(self, volumes: bool = False) -> None:
        self.addresses.clear()
        self.compose("down", *(["-v"] if volumes else []), "--remove-orphans", timeout=900)
