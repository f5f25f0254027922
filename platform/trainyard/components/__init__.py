"""Pulumi ComponentResources: the manifests, with lifecycle.

Builders decide *what* exists; components decide *how* Pulumi manages it: which provider,
what waits for what (CRDs first, namespaces before their contents), and what is protected.
"""

from trainyard.components.platform import Platform

__all__ = ["Platform"]
