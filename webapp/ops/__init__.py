"""Operations endpoints: /healthz (readiness and liveness) and a Prometheus /metrics exposition."""
