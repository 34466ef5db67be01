"""Traces, metrics, probes, model prices and logging."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from config.groups.base import SettingsGroup
from config.model_prices import LIST_SOURCE, OPERATOR_SOURCE, ModelPrice, default_price
from workflows.contracts.usage import PriceQuote

SERVICE_NAME = "deerflow-temporal"  # the traces' service.name unless OTEL_SERVICE_NAME gives one


class TelemetrySettings(SettingsGroup):
    """What the worker and the servers export about themselves (runtime/tracing.py, metrics.py, logs.py)."""

    # Traces and metrics (runtime/tracing.py, runtime/metrics.py). Traces are exported over OTLP
    # only when the standard OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the other
    # OTEL_* variables itself); unset, no tracing code is even imported. The worker serves
    # Prometheus metrics (the SDK's and ours) on DEERFLOW_METRICS_ADDRESS (host:port) when set.
    # DEERFLOW_MODEL_PRICES: USD per million tokens, JSON {"model": {"input": 0.5, "output": 1.5,
    # "cached_input": 0.25}}, merged over the defaults in config/model_prices.py; a model in neither
    # has its tokens counted and no cost (the run's usage and the cost metric say it is unpriced).
    otel_exporter_otlp_endpoint: str | None = Field(default=None, alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """OTLP trace export; unset, no tracing code is loaded (see Metrics and traces)."""
    # OTLP's transport: http/protobuf (the default) or grpc; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins.
    # The exporters read the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates)
    # and the SDK OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER(_ARG) themselves.
    otel_exporter_otlp_protocol: Literal["http/protobuf", "grpc"] = Field(default="http/protobuf",
                                                                        alias="OTEL_EXPORTER_OTLP_PROTOCOL")
    """`http/protobuf` or `grpc`."""
    otel_exporter_otlp_traces_protocol: Literal["http/protobuf", "grpc"] | None = Field(
        default=None, alias="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    """The same, for traces; wins. Unset: `OTEL_EXPORTER_OTLP_PROTOCOL`."""
    # The traces' service.name. A setting (not left to the SDK's own reading of the environment) so
    # that .env and conf.yaml name it like every other value.
    otel_service_name: str = Field(default=SERVICE_NAME, min_length=1, alias="OTEL_SERVICE_NAME")
    """The traces' `service.name`."""
    metrics_address: str | None = Field(default=None, pattern=r"^\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}$",
                                        alias="DEERFLOW_METRICS_ADDRESS")
    """host:port of the worker's Prometheus `/metrics`."""
    # The worker's liveness and readiness probes (runtime/health.py), host:port; unset: none.
    health_address: str | None = Field(default=None, pattern=r"^\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}$",
                                       alias="DEERFLOW_HEALTH_ADDRESS")
    """host:port of the worker's `/healthz` and `/readyz` probes."""
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict, alias="DEERFLOW_MODEL_PRICES")
    """USD per million tokens, JSON `{"model": {"input": 0.5, "output": 1.5, "cached_input": 0.25}}` (`cached_input`
    defaults to `input`), over the defaults; prices each call's cost for the run's budget, result and metric. Unset:
    the list prices in `config/model_prices.py`.
    """
    # Logging of the worker, API server and codec server (runtime/logs.py): level, and text or one JSON
    # object per line with the run's ids.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(default="INFO", alias="LOG_LEVEL")
    """Logging level of the worker and servers (DeerFlow's `DEBUG=True` means `DEBUG`)."""
    log_format: Literal["text", "json"] = Field(default="text", alias="LOG_FORMAT")
    """`text`, or `json`: one object per line with the run's ids (compose's settings files set it)."""

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        return value.strip().upper() if info.field_name == "log_level" else value.strip().lower()

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_model_prices(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def price_quote(self, model: str) -> PriceQuote | None:
        """The operator's price for ``model``, else the default table's, naming the table it came
        from; None: unpriced."""
        if model in self.model_prices:
            return self.model_prices[model].quote(OPERATOR_SOURCE)
        price = default_price(model)
        return price.quote(LIST_SOURCE) if price is not None else None
