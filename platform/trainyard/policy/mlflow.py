"""Rules for MLflow: the server authenticates, and no workload carries MLflow credentials of its own.

Tenants' pods get their MLflow identity from the platform's ``trainyard-mlflow`` Secret
(``envFrom`` in the approved runtimes). A TrainJob that sets MLflow credentials itself either
leaks a password into git and the API server, or speaks as someone else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from trainyard.manifests.meta import MLFLOW_SECRET, Manifest
from trainyard.policy.model import Context, object_rule, stack_rule
from trainyard.policy.pods import as_dict, as_list, containers, env_lists

# Client variables that carry an MLflow identity. Ref: mlflow/environment_variables.py
# (MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN).
CREDENTIAL_VARIABLES = frozenset({"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"})
URI_WITH_CREDENTIALS = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s]+@", re.IGNORECASE)
# `--app-name basic-auth` (or another auth app) is what turns authentication on in `mlflow server`.
# Ref: mlflow/cli.py server --app-name; the chart renders --app-name={{ .Values.auth.appName }}.
_APP_NAME = re.compile(r"^--app-name(=|$)")


@stack_rule("mlflow-auth-on", "MLflow requires authentication: the stack's server and any other `mlflow server`.",
            "Keep mlflow.auth: true (basic-auth); run no `mlflow server` without --app-name.")
def mlflow_auth_on(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    if ctx.config.mlflow.enabled and not ctx.config.mlflow.auth:
        yield None, "mlflow.auth is false: the tracking server would accept anonymous requests"
    for obj in objects:
        for c in containers(obj):
            words = [str(w) for w in as_list(c.container.get("command")) + as_list(c.container.get("args"))]
            if _runs_mlflow_server(words) and not any(_APP_NAME.match(w) for w in words):
                yield obj, f"{c.path} runs `mlflow server` without --app-name (no authentication)"


def _runs_mlflow_server(words: list[str]) -> bool:
    return any(w.rsplit("/", 1)[-1] == "mlflow" and i + 1 < len(words) and words[i + 1] == "server"
               for i, w in enumerate(words))


@object_rule("no-inline-mlflow-credentials", "Workloads take their MLflow identity only from the platform Secret.",
             f"Remove MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN from the job (and credentials from the URI); the "
             f"approved runtimes read them from the {MLFLOW_SECRET!r} Secret of the tenant's namespace.")
def no_inline_mlflow_credentials(obj: Manifest, ctx: Context) -> Iterator[str]:
    for path, env in env_lists(obj):
        for i, item in enumerate(env):
            var = as_dict(item)
            name, value = str(var.get("name", "")), var.get("value")
            ref = as_dict(as_dict(var.get("valueFrom")).get("secretKeyRef"))
            if name in CREDENTIAL_VARIABLES and value is not None:
                yield f"{path}[{i}] sets {name} inline"
            elif name in CREDENTIAL_VARIABLES and ref and ref.get("name") != MLFLOW_SECRET:
                yield f"{path}[{i}] takes {name} from Secret {ref.get('name')!r}, not the platform's {MLFLOW_SECRET!r}"
            elif name == "MLFLOW_TRACKING_URI" and isinstance(value, str) and URI_WITH_CREDENTIALS.match(value):
                yield f"{path}[{i}] MLFLOW_TRACKING_URI carries credentials"


RULES = (mlflow_auth_on, no_inline_mlflow_credentials)
