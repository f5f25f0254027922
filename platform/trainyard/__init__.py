"""Trainyard: a sovereign LLM training platform on Kubernetes, declared as Python Pulumi code.

The package is layered so that everything except ``components`` is plain Python:

- ``config``: the typed stack configuration (one frozen pydantic model per environment);
- ``manifests``: pure builders from that config to plain manifest dicts;
- ``components``: Pulumi ComponentResources that declare those manifests with lifecycle
  (provider, ordering, protection);
- ``policy`` and ``review``: offline checks and reports over the rendered manifests.
"""

__version__ = "0.1.0"
