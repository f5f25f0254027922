"""Deploying a stack to a site's own cluster, state backend and secrets provider (docs/operators.md).

``stack_init``: ``trainyard stack init`` (the Pulumi stack in the site's backend, its secrets provider,
without hand-editing the reviewed stack file) and ``trainyard stack preflight`` (what ``pulumi preview``
needs: the CLI, the provider plugin, the kubeconfig context, a backend and secrets provider fit for the
stack). The local rehearsal has its own engine wrapper (``trainyard.rehearsal.engine``).
"""
