"""Static checks of the deployment files; there is no Docker engine to run them here.

Why: a compose file that does not validate, or a worker that does not reach Temporal or that
has a key pasted into it, is only noticed at deploy time otherwise. ``check-jsonschema`` ships
the compose-spec schema, so validation needs no network.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.settings import load_settings
from runtime.embedded import DEV_SERVER_QUEUE_FLAGS
from runtime.search_attributes import dev_server_flags as search_attribute_flags
from workflows.contracts.research import TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PASS_THROUGH = ("OPENAI_API_KEY", "TAVILY_API_KEY")  # the keys; the models and search come from deerflow.env
SECRET_NAME = re.compile(r"KEY|SECRET|PASSWORD|PASSWD|PWD|TOKEN", re.IGNORECASE)
# What the isolated sandbox uses (sandbox/bootstrap.py), and no more.
SANDBOX_CAPABILITIES = ("SYS_ADMIN", "SYS_CHROOT", "SETUID", "SETGID", "KILL")
SECRET_VALUE = re.compile(r"^(sk-|tvly-)|[A-Za-z0-9_\-]{32,}")
# MinIO's credentials: the operator's variables, the passwords required (no default to deploy with).
# Each service has a MinIO user of its own (minio-setup); only the CLI (`blobs gc` deletes) has the root's.
MINIO_ROOT = {"AWS_ACCESS_KEY_ID": "MINIO_ROOT_USER", "AWS_SECRET_ACCESS_KEY": "MINIO_ROOT_PASSWORD"}
SANDBOX_READER = {"AWS_ACCESS_KEY_ID": "SANDBOX_S3_USER", "AWS_SECRET_ACCESS_KEY": "SANDBOX_S3_PASSWORD"}
STORE_USERS = {service: {"AWS_ACCESS_KEY_ID": f"{service.upper()}_S3_USER",
                         "AWS_SECRET_ACCESS_KEY": f"{service.upper()}_S3_PASSWORD"}
               for service in ("worker", "api", "codec", "sandbox")}
STORE_USERS["cli"] = MINIO_ROOT
REQUIRED = ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "SANDBOX_S3_PASSWORD", "WORKER_S3_PASSWORD", "API_S3_PASSWORD",
            "CODEC_S3_PASSWORD", "DEERFLOW_TOKEN_STREAM_TOKEN")
# Every service that reads payloads, and the settings that must be the same in all of them.
PAYLOAD_READERS = ("worker", "sandbox", "api", "codec", "cli")
# One-shot jobs and the scratch-image collector have no probe to run (the collector's image has no shell
# or client); every other service has a healthcheck.
NO_HEALTHCHECK = {"temporal-data", "minio-setup", "cli", "otel-collector"}
VARIABLE = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:[-?])?(?P<arg>[^}]*)\}$")
STORE_SETTINGS = ("DEERFLOW_PAYLOAD_STORE", "DEERFLOW_S3_ENDPOINT_URL", "DEERFLOW_S3_BUCKET", "DEERFLOW_S3_REGION",
                  "DEERFLOW_S3_KEY_PREFIX", "DEERFLOW_S3_PATH_STYLE")


def check_jsonschema() -> str:
    """The executable next to this interpreter's scripts, else on PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / "check-jsonschema"
    found = str(candidate) if candidate.is_file() else shutil.which("check-jsonschema")
    assert found, "check-jsonschema is not installed (pip install -e '.[test]')"
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def variable(value: str) -> tuple[str, str | None]:
    """The operator's variable a value is (``${NAME:?…}`` or ``${NAME:-default}``), and its op."""
    match = VARIABLE.match(value)
    assert match, f"{value!r} is not one variable"
    return match["name"], match["op"]


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the "NAME=value" list form
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return {name: "" if value is None else str(value) for name, value in env.items()}


@pytest.fixture(scope="module")
def worker_env(compose: dict[str, Any]) -> dict[str, str]:
    return service_env(compose["services"]["worker"])


def test_compose_file_matches_the_compose_spec() -> None:
    result = subprocess.run(
        [check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_worker_reaches_temporal_on_the_research_queue(compose: dict[str, Any], worker_env: dict[str, str]) -> None:
    assert worker_env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert worker_env.get("TEMPORAL_TASK_QUEUE", TASK_QUEUE) == TASK_QUEUE
    worker = compose["services"]["worker"]
    assert worker["depends_on"]["temporal"]["condition"] == "service_healthy"
    assert worker["build"]["dockerfile"] == "Dockerfile"


def test_worker_environment_hardcodes_no_secret(worker_env: dict[str, str]) -> None:
    for name in PASS_THROUGH:
        assert re.fullmatch(rf"\$\{{{name}(:-[^}}$]*)?\}}", worker_env[name]), f"{name} is not passed through"
    for name, value in worker_env.items():
        if name in STORE_USERS["worker"]:
            assert variable(value)[0] == STORE_USERS["worker"][name], name
        elif SECRET_NAME.search(name) and not name.endswith("_URL"):
            assert variable(value)[0] == name and (value == f"${{{name}:-}}" or variable(value)[1] == ":?"), \
                f"{name} must come from the environment"
        assert not SECRET_VALUE.search(value), f"{name} looks like a pasted secret"


def test_temporal_keeps_its_database_on_a_volume_and_its_ui_reads_through_the_codec_server(
        compose: dict[str, Any]) -> None:
    services = compose["services"]
    temporal = services["temporal"]
    assert temporal["image"].startswith("${TEMPORAL_IMAGE:-temporalio/temporal:")
    assert not [name for name, service in services.items() if "auto-setup" in str(service.get("image"))]
    command = temporal["command"]
    assert command[:2] == ["server", "start-dev"]
    database = command[command.index("--db-filename") + 1]
    assert f"temporal-data:{Path(database).parent}" in temporal["volumes"]
    assert services["temporal-data"]["volumes"] == temporal["volumes"]  # the one-shot owns it for uid 1000
    # The dev server's flags for its search attributes are the embedded default's.
    flags = [part for index, part in enumerate(command) if "--search-attribute" in command[index - 1:index + 1]]
    assert flags == search_attribute_flags()
    # Every queue one partition, as the embedded default: the model queue's rate limit needs it.
    assert all(flag in " ".join(command) for flag in DEV_SERVER_QUEUE_FLAGS if "=" in flag)
    # The UI (in the host's browser) reads payloads through the codec server where the host reaches it.
    endpoint = command[command.index("--ui-codec-endpoint") + 1]
    assert endpoint == "${DEERFLOW_CODEC_PUBLIC_URL:-http://127.0.0.1:8081}"
    assert "${DEERFLOW_BIND:-127.0.0.1}:8081:8081" in services["codec"]["ports"]


def test_ports_are_published_on_loopback_unless_the_operator_opts_in(compose: dict[str, Any]) -> None:
    published = {name: service["ports"] for name, service in compose["services"].items() if "ports" in service}
    assert set(published) == {"temporal", "minio", "api", "codec", "prometheus"}
    for name, ports in published.items():
        for port in ports:
            assert port.startswith("${DEERFLOW_BIND:-127.0.0.1}:"), (name, port)


def test_the_operator_sets_every_credential(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    for name in REQUIRED:
        uses = re.findall(rf"\$\{{{name}(:[-?])?[^}}]*\}}", text)
        assert uses and set(uses) == {":?"}, f"{name} must be required wherever it is used, never defaulted"
    assert not re.search(r"PASSWORD:-", text) and "local-only" not in text


def test_every_service_has_a_healthcheck_and_ours_use_the_probes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert ("healthcheck" in service) is (name not in NO_HEALTHCHECK), name
    # Our image's services: the readiness probe on the port each one serves it on.
    probes = {"worker": service_env(services["worker"])["DEERFLOW_HEALTH_ADDRESS"],
              "sandbox": service_env(services["sandbox"])["DEERFLOW_HEALTH_ADDRESS"],
              "codec": "127.0.0.1:" + services["codec"]["command"][services["codec"]["command"].index("--port") + 1],
              "api": "127.0.0.1:" + services["api"]["command"][services["api"]["command"].index("--port") + 1]}
    for name, address in probes.items():
        test = services[name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "-c"] and test[-1] == f"http://{address}/readyz", (name, test)
    # Nothing of ours starts before Temporal and the store are ready.
    for name in ("worker", "sandbox", "api"):
        assert services[name]["depends_on"]["temporal"]["condition"] == "service_healthy", name


def test_the_api_server_serves_the_page_with_its_token(compose: dict[str, Any]) -> None:
    """Its tokens are the operator's: named ones with roles, and/or the single admin token. Bound beyond
    loopback, the server refuses to start with neither (server/security.py: check_bind)."""
    api = compose["services"]["api"]
    assert api["command"] == ["python", "starter.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
    for name in ("DEERFLOW_WEB_TOKENS", "DEERFLOW_WEB_TOKEN"):
        assert service_env(api)[name] == f"${{{name}:-}}", name
    assert api["cap_drop"] == ["ALL"] and api["read_only"] is True and "user" not in api


def test_main_worker_has_no_privilege_and_no_sandbox_queue(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert worker["command"] == ["python", "worker.py", "--queues", "keyed"]
    assert worker["cap_drop"] == ["ALL"] and "cap_add" not in worker
    assert "no-new-privileges:true" in worker["security_opt"]
    assert worker.get("user", "10001") not in ("0", "root") and not str(worker.get("user", "")).startswith("0:")
    assert not worker.get("privileged")
    assert re.search(r"^USER deerflow$", DOCKERFILE.read_text(encoding="utf-8"), re.MULTILINE)


def test_sandbox_worker_holds_only_a_read_only_store_key_and_the_namespace_privileges(
        compose: dict[str, Any]) -> None:
    sandbox = compose["services"]["sandbox"]
    assert sandbox["command"] == ["python", "worker.py", "--queues", "sandbox"]
    env = service_env(sandbox)
    keys = {name: value for name, value in env.items() if SECRET_NAME.search(name) or name in PASS_THROUGH}
    keys = {name: variable(value)[0] for name, value in keys.items()}
    assert keys == SANDBOX_READER, env  # MinIO's read-only user, never its root or a provider key
    # Its own settings file only (never the team's, which the keyed services read), and no secrets.
    assert sandbox["env_file"] == ["${DEERFLOW_SETTINGS_DIR:-./deploy/compose}/sandbox.env"]
    assert "secrets" not in sandbox
    assert env["DEERFLOW_SANDBOX_MODE"] == "isolated"  # never plain: refuse rather than run uncontained
    assert env["DEERFLOW_SUBTREES"] == "false"  # a read-only store user: reads subtrees, writes none
    assert sandbox["cap_drop"] == ["ALL"]
    assert sorted(sandbox["cap_add"]) == sorted(SANDBOX_CAPABILITIES)
    assert not sandbox.get("privileged")
    assert {"apparmor=unconfined", "no-new-privileges:true"} <= set(sandbox["security_opt"])
    assert not any(opt.startswith("seccomp") for opt in sandbox["security_opt"])  # Docker's default stays
    assert sandbox["read_only"] is True and "volumes" not in sandbox  # none of the worker's state
    assert "ports" not in sandbox
    # On a network with Temporal and MinIO only: not PostgreSQL, not the main worker.
    assert sandbox["networks"] == ["sandbox"]
    others = [name for name, service in compose["services"].items()
              if name != "sandbox" and "sandbox" in (service.get("networks") or [])]
    assert sorted(others) == ["minio", "temporal"]
    assert compose["networks"]["sandbox"] == {"internal": True}  # and no route out of it


def test_every_payload_reader_shares_one_store_in_minio(compose: dict[str, Any]) -> None:
    services = compose["services"]
    envs = {name: service_env(services[name]) for name in PAYLOAD_READERS}
    stores = {name: {key: env.get(key) for key in STORE_SETTINGS} for name, env in envs.items()}
    assert all(store == stores["worker"] for store in stores.values()), stores
    assert stores["worker"]["DEERFLOW_PAYLOAD_STORE"] == "s3"
    assert stores["worker"]["DEERFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert "${DEERFLOW_BIND:-127.0.0.1}:9000:9000" in services["minio"]["ports"]
    setup = service_env(services["minio-setup"])
    assert setup["DEERFLOW_S3_BUCKET"] == stores["worker"]["DEERFLOW_S3_BUCKET"]
    for name in PAYLOAD_READERS:
        assert envs[name]["AWS_EC2_METADATA_DISABLED"] == "true", name
        assert envs[name]["TEMPORAL_ADDRESS"] == "temporal:7233", name
        assert services[name].get("image") == services["worker"]["image"], name
    # Each holds its own MinIO user (the CLI the root's, the very variables MinIO is started with).
    minio = service_env(services["minio"])
    for name in PAYLOAD_READERS:
        assert {key: variable(envs[name][key])[0] for key in MINIO_ROOT} == STORE_USERS[name], name
    assert {"AWS_ACCESS_KEY_ID": variable(minio["MINIO_ROOT_USER"])[0],
            "AWS_SECRET_ACCESS_KEY": variable(minio["MINIO_ROOT_PASSWORD"])[0]} == MINIO_ROOT
    # The sandbox's read-only user is the one minio-setup creates.
    assert {"AWS_ACCESS_KEY_ID": variable(setup["SANDBOX_S3_USER"])[0],
            "AWS_SECRET_ACCESS_KEY": variable(setup["SANDBOX_S3_PASSWORD"])[0]} == SANDBOX_READER
    assert services["minio-setup"]["depends_on"]["minio"]["condition"] == "service_healthy"
    for name in ("worker", "sandbox", "api", "codec"):
        assert services[name]["depends_on"]["minio-setup"]["condition"] == "service_completed_successfully"


def test_codec_server_and_cli_run_our_image(compose: dict[str, Any]) -> None:
    codec, cli = compose["services"]["codec"], compose["services"]["cli"]
    assert codec["command"] == ["python", "starter.py", "codec-server", "--host", "0.0.0.0", "--port", "8081",
                                "--no-token-on-private-network"]
    assert codec["ports"] == ["${DEERFLOW_BIND:-127.0.0.1}:8081:8081"]  # the host's loopback unless opted in
    assert cli["entrypoint"] == ["python", "starter.py"] and cli["profiles"] == ["tools"]
    for service in (codec, cli):
        assert service["cap_drop"] == ["ALL"] and "no-new-privileges:true" in service["security_opt"]
        assert "ports" not in service or service is codec


def test_observability_profile_scrapes_the_worker_and_receives_its_traces(
    compose: dict[str, Any], worker_env: dict[str, str]
) -> None:
    services = compose["services"]
    collector, prometheus = services["otel-collector"], services["prometheus"]
    assert collector["profiles"] == prometheus["profiles"] == ["observability"]
    # A plain `docker compose up` needs neither: no always-on service depends on them.
    for name, service in services.items():
        if not service.get("profiles"):
            assert not {"otel-collector", "prometheus"} & set(service.get("depends_on") or {}), name
    # Prometheus scrapes the port the worker serves its metrics on, and the worker accepts that address.
    settings = load_settings({"DEERFLOW_METRICS_ADDRESS": worker_env["DEERFLOW_METRICS_ADDRESS"]})
    assert settings.metrics_address
    port = settings.metrics_address.rpartition(":")[2]
    scrape = yaml.safe_load(mounted(prometheus, "/etc/prometheus/prometheus.yml").read_text(encoding="utf-8"))
    targets = [target for job in scrape["scrape_configs"] for config in job["static_configs"]
               for target in config["targets"]]
    assert targets == [f"worker:{port}"]
    assert prometheus["ports"] == ["${DEERFLOW_BIND:-127.0.0.1}:9090:9090"]
    # Traces: opt-in pass-through, and the collector listens where the documented endpoint points.
    assert worker_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318" in COMPOSE.read_text(encoding="utf-8")
    config_path = collector["command"][0].removeprefix("--config=")
    config = yaml.safe_load(mounted(collector, config_path).read_text(encoding="utf-8"))
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    assert "otlp" in config["service"]["pipelines"]["traces"]["receivers"]
    # The sandbox keeps its network to itself: neither joins it, and it holds no telemetry setting.
    assert "networks" not in collector and "networks" not in prometheus
    assert not [name for name in service_env(services["sandbox"]) if name.startswith(("OTEL_", "DEERFLOW_METRICS"))]


def mounted(service: dict[str, Any], target: str) -> Path:
    """The repository file ``service`` mounts (read-only) at ``target``."""
    for volume in service["volumes"]:
        source, _, rest = volume.partition(":")
        if rest == f"{target}:ro":
            path = ROOT / source
            assert path.is_file(), f"{source} is missing"
            return path
    raise AssertionError(f"nothing is mounted read-only at {target}")


def compose_seconds(duration: str) -> float:
    """A compose duration (``320s``, ``5m20s``, ``1h``) in seconds."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", duration)
    assert match and duration, f"not a compose duration: {duration!r}"
    hours, minutes, seconds = (float(part or 0) for part in match.groups())
    return hours * 3600 + minutes * 60 + seconds


# Between the worker's grace ending (its calls cancelled) and the process leaving: the cancellations
# reach the server, the journal is closed, the process exits.
STOP_MARGIN_SECONDS = 10.0
GRACE = "DEERFLOW_WORKER_SHUTDOWN_GRACE"


def test_workers_get_their_grace_to_finish_calls_before_sigkill(compose: dict[str, Any]) -> None:
    """A deploy stops a worker with SIGTERM and SIGKILLs it after stop_grace_period (Docker's default:
    10 s); shorter than the worker's grace, a model call in flight would be killed and paid twice."""
    workers = {name: service for name, service in compose["services"].items()
               if "worker.py" in (service.get("command") or [])}
    assert set(workers) == {"worker", "sandbox"}
    for name, service in workers.items():
        env = {key: value for key, value in service_env(service).items() if key == GRACE}
        grace = load_settings(env).worker_shutdown_grace
        assert grace >= 60, f"{name}: a grace of {grace} s cuts normal model calls short"
        period = compose_seconds(str(service.get("stop_grace_period", "10s")))
        assert grace + STOP_MARGIN_SECONDS <= period <= grace + 60, (name, grace, period)


def test_the_offline_override_keeps_the_stack_on_the_machine(compose: dict[str, Any]) -> None:
    """make deploy-test's override (deploy/offline/): every network of the stack internal (no route off the
    machine) and every service resolving names on the compose networks only, whatever services the shipped
    file gains."""
    override = yaml.safe_load((ROOT / "deploy" / "offline" / "docker-compose.offline.yml").read_text(encoding="utf-8"))
    assert set(override["networks"]) == set(compose["networks"])
    assert all(network == {"internal": True} for network in override["networks"].values()), override["networks"]
    services = override["services"]
    assert set(services) == set(compose["services"]) - {"otel-collector", "prometheus"}  # profiles it never runs
    assert {name for name, service in services.items() if service.get("dns") != ["127.0.0.1"]} == set()


def test_the_offline_override_builds_on_the_offline_base(compose: dict[str, Any]) -> None:
    """`up --build` with the override (an operator's upgrade where no registry is reached) builds every image
    the shipped file builds on the offline base: on the Dockerfile's public default it tried to pull it, and
    failed before recreating anything."""
    override = yaml.safe_load((ROOT / "deploy" / "offline" / "docker-compose.offline.yml").read_text(encoding="utf-8"))
    built = {name for name, service in compose["services"].items() if "build" in service}
    assert built == {"worker", "sandbox"}
    for name in built:
        build = override["services"][name].get("build") or {}
        assert {key: build.get(key) for key in ("context", "dockerfile")} == compose["services"][name]["build"], name
        assert build["args"]["BASE_IMAGE"] == "${OFFLINE_BASE_IMAGE:-deerflow-base:bookworm-python3.11}", name
