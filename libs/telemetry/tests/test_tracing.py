"""Tracing is configured from OTEL_* variables only, with clear errors for bad values."""

import pytest

from knowsphere_telemetry.tracing import TelemetryConfigError, configure_tracing, selected_exporters


def test_no_exporter_by_default_and_otlp_when_an_endpoint_is_set():
    assert selected_exporters({}) == ()
    assert selected_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) == ("otlp",)
    assert selected_exporters({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}) == ("otlp",)


def test_explicit_exporter_list_wins_and_none_means_nothing():
    env = {"OTEL_TRACES_EXPORTER": "console,otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert selected_exporters(env) == ("console", "otlp")
    assert selected_exporters({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) == ()


def test_unknown_exporter_is_rejected_with_the_variable_named():
    with pytest.raises(TelemetryConfigError, match="OTEL_TRACES_EXPORTER='jaeger'"):
        selected_exporters({"OTEL_TRACES_EXPORTER": "jaeger"})


def test_bad_protocol_is_rejected():
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}
    with pytest.raises(TelemetryConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        configure_tracing("demo", env)


def test_sdk_disabled_installs_nothing():
    handle = configure_tracing("demo", {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})
    assert handle.provider is None
    assert handle.exporters == ()


def test_service_name_defaults_to_the_short_name_unless_otel_service_name_is_set(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    handle = configure_tracing("retrieval", {})
    assert handle.provider is not None
    assert handle.provider.resource.attributes["service.name"] == "retrieval"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "retrieval-eu")
    handle = configure_tracing("retrieval", {"OTEL_SERVICE_NAME": "retrieval-eu"})
    assert handle.provider is not None
    assert handle.provider.resource.attributes["service.name"] == "retrieval-eu"
