"""Serving workflows that run against live systems: promotion from the model registry to KServe."""
