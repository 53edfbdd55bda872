"""The anomaly log in the product: detectors run by ingest, stored anomalies, live frames, triage, notifications."""
