"""W3C trace context in Kafka headers, so one trace follows a job across services."""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Headers = list[tuple[str, bytes]]
_PROPAGATOR = TraceContextTextMapPropagator()


class _HeaderSetter(Setter[Headers]):
    def set(self, carrier: Headers, key: str, value: str) -> None:
        carrier.append((key, value.encode()))


class _HeaderGetter(Getter[Headers]):
    def get(self, carrier: Headers, key: str) -> list[str] | None:
        values = [v.decode(errors="replace") for k, v in carrier if k == key]
        return values or None

    def keys(self, carrier: Headers) -> list[str]:
        return [k for k, _ in carrier]


def inject(headers: Headers, ctx: otel_context.Context | None = None) -> Headers:
    """Append ``traceparent``/``tracestate`` for the current (or given) context."""
    _PROPAGATOR.inject(headers, context=ctx, setter=_HeaderSetter())
    return headers


def extract(headers: Headers | None) -> otel_context.Context:
    """The context a producer injected (an empty one when absent)."""
    return _PROPAGATOR.extract(list(headers or []), getter=_HeaderGetter())


def traceparent(headers: Headers | None) -> str | None:
    for key, value in headers or []:
        if key == "traceparent":
            return value.decode(errors="replace")
    return None
