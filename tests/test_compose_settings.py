"""docker-compose.yml carries a team's settings (issue #43 §2), read statically; ``make deploy-test`` runs it.

Why: the compose file could not carry a team's settings: no service read an env file, the API took one
token, conf.yaml (models, MCP servers) never reached the worker, token previews went nowhere (the worker and
the API server had different homes and no sink URL), and every service held MinIO's root credentials.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.settings import is_secret, load_settings
from runtime.token_stream_format import PATH as TOKEN_STREAM_PATH
from tests.support.image_replay import env_file_values

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_DIR = "${DEERFLOW_SETTINGS_DIR:-./deploy/compose}"
SHIPPED = ROOT / "deploy" / "compose"
TEAM = ("worker", "api", "codec", "cli")
# What each service may do on the payload bucket: the worker and the API server store payloads, the
# codec server and the sandbox only read them.
POLICIES = {"WORKER": "deerflow-payload-writer", "API": "deerflow-payload-writer",
            "CODEC": "deerflow-payload-reader", "SANDBOX": "deerflow-payload-reader"}
ACTIONS = {"deerflow-payload-reader": {"s3:GetObject", "s3:ListBucket"},
           "deerflow-payload-writer": {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}}
# What a service of ours may set in its `environment:` besides .env's secrets: this stack's own wiring (where
# Temporal, MinIO, the probes, conf.yaml and the API's preview sink are inside it, and each service's MinIO
# user and name), the sandbox's containment (its mode, a read-only store user), which its settings file must
# never loosen, and the collector's endpoint, which the observability profile's command line gives.
WIRING = {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "DEERFLOW_PAYLOAD_STORE", "DEERFLOW_S3_ENDPOINT_URL",
          "DEERFLOW_S3_BUCKET", "DEERFLOW_S3_REGION", "AWS_EC2_METADATA_DISABLED", "AWS_ACCESS_KEY_ID", "DEERFLOW_HOME",
          "DEERFLOW_CONF", "DEERFLOW_HEALTH_ADDRESS", "DEERFLOW_METRICS_ADDRESS", "DEERFLOW_TOKEN_STREAM_URL",
          "OTEL_SERVICE_NAME", "OTEL_EXPORTER_OTLP_ENDPOINT", "DEERFLOW_SANDBOX_MODE", "DEERFLOW_SUBTREES",
          "DEERFLOW_PAYLOAD_THRESHOLD_BYTES"}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"]


def test_every_service_of_ours_reads_the_teams_settings_file(services: dict[str, Any]) -> None:
    for name in TEAM:
        assert services[name]["env_file"] == [f"{SETTINGS_DIR}/deerflow.env"], name
    # The shipped files are what a fresh clone runs with: valid settings, and no secret among them
    # (keys go in .env, which compose hands only to the services that need each).
    for file in ("deerflow.env", "sandbox.env"):
        values = env_file_values(SHIPPED / file)
        assert not [name for name in values if is_secret(name)], file
        load_settings(values)
    examples = [line.lstrip("# ").split("=", 1)[0] for line in (SHIPPED / "deerflow.env").read_text().splitlines()
                if re.match(r"# [A-Z_]+=", line)]
    assert {"DEERFLOW_RUN_TOKEN_BUDGET", "DEERFLOW_MODEL_PRICES", "DEERFLOW_TTS_URL"} <= set(examples)
    assert not [name for name in examples if is_secret(name)]


def test_every_service_reads_a_settings_file_of_the_shipped_folder(services: dict[str, Any]) -> None:
    """Every service, one-shots and profiles included, takes a team's settings from a file of the settings
    folder (env_file): the shipped folder has each, a fresh clone runs with it, and none holds a secret."""
    files = {name: service.get("env_file") for name, service in services.items()}
    assert not [name for name, read in files.items() if not read], files
    for name, read in files.items():
        for path in read:
            folder, _, file = path.rpartition("/")
            assert folder == SETTINGS_DIR, (name, path)
            values = env_file_values(SHIPPED / file)
            assert not [variable for variable in values if is_secret(variable)], file
    # Third-party services read their own file, never the team's (which the keyed services read).
    assert {name for name, read in files.items() if f"{SETTINGS_DIR}/deerflow.env" in read} == set(TEAM)
    commented = [line for line in (SHIPPED / "minio.env").read_text(encoding="utf-8").splitlines()
                 if re.match(r"# MINIO_[A-Z_]+=", line)]
    assert commented and not [line for line in commented if "PASSWORD" in line or "ROOT_USER" in line]


def test_no_service_environment_overrides_its_settings_file(services: dict[str, Any]) -> None:
    """A setting in a settings file reaches the service as written. compose's ``environment:`` wins over
    ``env_file``, and a ``${NAME:-default}`` there is always set: the worker's ``BASIC_MODEL`` and
    ``SEARCH_API``, every service's ``LOG_LEVEL`` and ``LOG_FORMAT`` and the API's origins replaced the team's
    deerflow.env with .env's value or the default, silently. Only this stack's wiring and .env's secrets may
    be set there."""
    for name, service in services.items():
        files = [Path(path).name for path in service.get("env_file") or []]
        if not {"deerflow.env", "sandbox.env"} & set(files):
            continue  # third-party services: their files hold their own images' settings
        overridden = sorted(variable for variable in service.get("environment") or {}
                            if variable not in WIRING and not is_secret(variable))
        assert not overridden, f"{name}: its environment replaces {overridden} of its settings file"
    # Every setting the shipped file offers is one a service would take from it.
    examples = {line.lstrip("# ").split("=", 1)[0] for line in (SHIPPED / "deerflow.env").read_text().splitlines()
                if re.match(r"#? ?[A-Z_]+=", line)}
    assert {"BASIC_MODEL", "SEARCH_API", "LOG_LEVEL", "LOG_FORMAT", "DEERFLOW_WEB_ALLOWED_ORIGINS"} <= examples
    assert not examples & WIRING


def test_the_worker_mounts_conf_yaml_read_only_and_reads_it(services: dict[str, Any], tmp_path: Path) -> None:
    worker = services["worker"]
    target = worker["environment"]["DEERFLOW_CONF"]
    assert f"{SETTINGS_DIR}/conf.yaml:{target}:ro" in worker["volumes"]
    assert load_settings({"DEERFLOW_CONF": str(SHIPPED / "conf.yaml")})  # the shipped one loads as it is
    # A team's conf.yaml with MCP servers and a model whose key is the worker's variable.
    conf = tmp_path / "conf.yaml"
    conf.write_text(yaml.safe_dump({
        "BASIC_MODEL": {"base_url": "http://127.0.0.1:9/v1", "model": "team-model", "api_key": "$OPENAI_API_KEY"},
        "MCP_SERVERS": {"docs": {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"}}}))
    loaded = load_settings({"DEERFLOW_CONF": str(conf), "OPENAI_API_KEY": "sk-team"})
    assert loaded.basic_model == "team-model" and list(loaded.mcp_servers) == ["docs"]
    assert worker["environment"]["OPENAI_API_KEY"] == "${OPENAI_API_KEY:-}"


def test_token_previews_go_from_the_worker_to_the_api_server(services: dict[str, Any]) -> None:
    worker, api = services["worker"]["environment"], services["api"]["environment"]
    port = services["api"]["command"][services["api"]["command"].index("--port") + 1]
    assert worker["DEERFLOW_TOKEN_STREAM_URL"] == f"http://api:{port}{TOKEN_STREAM_PATH}"
    secret = "${DEERFLOW_TOKEN_STREAM_TOKEN:?"
    assert worker["DEERFLOW_TOKEN_STREAM_TOKEN"].startswith(secret) and api["DEERFLOW_TOKEN_STREAM_TOKEN"] == \
        worker["DEERFLOW_TOKEN_STREAM_TOKEN"]
    assert "worker" in [name for name, service in services.items() if "default" in (service.get("networks") or
                                                                                        ["default"])]


def test_each_service_has_a_minio_user_with_the_least_it_needs(services: dict[str, Any]) -> None:
    script = services["minio-setup"]["command"][0]
    policies = {}
    for document, name in re.findall(r"printf '(\{.*?\})' .*?> /tmp/(\w+)\.json", script):
        statements = json.loads(document.replace("%s", "arn:aws:s3:::bucket"))["Statement"]
        policies[f"deerflow-payload-{name}"] = statements
    assert set(policies) == set(ACTIONS)
    for policy, statements in policies.items():
        assert {action for s in statements for action in s["Action"]} == ACTIONS[policy], policy
        assert all(s["Effect"] == "Allow" and set(s["Resource"]) <= {"arn:aws:s3:::bucket", "arn:aws:s3:::bucket/*"}
                   for s in statements), policy
    granted = dict(re.findall(r'grant "\$\$(\w+)_S3_USER" "\$\$\1_S3_PASSWORD" (deerflow-payload-\w+)', script))
    assert granted == POLICIES
    setup = services["minio-setup"]["environment"]
    for prefix in POLICIES:
        service = services[prefix.lower()]["environment"]
        assert service["AWS_ACCESS_KEY_ID"] == setup[f"{prefix}_S3_USER"], prefix
        assert service["AWS_SECRET_ACCESS_KEY"] == setup[f"{prefix}_S3_PASSWORD"], prefix
    # The root user: MinIO itself, its set-up and the operator's CLI, nothing else.
    holders = sorted(name for name, service in services.items()
                     if "MINIO_ROOT_PASSWORD" in json.dumps(service.get("environment") or {}))
    assert holders == ["cli", "minio", "minio-setup"]
