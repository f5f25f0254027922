"""Reconcile MLflow basic-auth users: one per tenant, with the password Trainyard generated for it.

Runs as a sidecar of the MLflow server (the server's own image, so no further image to approve)
and talks to the server on localhost. Every INTERVAL seconds it reads one file per tenant from
TENANT_DIR (file name = MLflow user name, content = password; a mounted Secret, so a rotated
password appears here without a restart), creates users that are missing and sets every
tenant's password. Both calls are idempotent, so a restart or a second replica does no harm.
INTERVAL=0 runs once and exits non-zero on any failure (used by the dataplane tests).

Only the standard library is used. Ref: MLflow basic-auth REST API (mlflow/server/auth/routes.py):
POST /api/2.0/mlflow/users/create, PATCH /api/2.0/mlflow/users/update-password, GET /api/2.0/mlflow/users/get.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def _call(url: str, method: str, path: str, auth: tuple[str, str], body: dict[str, str] | None = None) -> int:
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method,  # noqa: S310 - the server's own URL
                                     headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def sync_once(url: str, admin: tuple[str, str], tenant_dir: Path) -> list[str]:
    """Create missing tenant users and set their passwords; the list of failures (empty: all done)."""
    failures = []
    for file in sorted(p for p in tenant_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        user, password = file.name, file.read_text(encoding="utf-8").strip()
        exists = _call(url, "GET", "/api/2.0/mlflow/users/get?" + urllib.parse.urlencode({"username": user}), admin)
        if exists == 404:
            status = _call(url, "POST", "/api/2.0/mlflow/users/create", admin, {"username": user, "password": password})
            action = "created"
        elif exists == 200:
            status = _call(url, "PATCH", "/api/2.0/mlflow/users/update-password", admin,
                           {"username": user, "password": password})
            action = "password set"
        else:
            status, action = exists, "lookup"
        if status == 200:
            print(f"tenant user {user}: {action}", flush=True)
        else:
            failures.append(f"tenant user {user}: {action} failed with HTTP {status}")
    return failures


def main() -> int:
    url = os.environ.get("MLFLOW_URL", "http://127.0.0.1:5000").rstrip("/")
    admin = (os.environ["ADMIN_USERNAME"], os.environ["ADMIN_PASSWORD"])
    tenant_dir = Path(os.environ.get("TENANT_DIR", "/etc/mlflow/tenants"))
    interval = int(os.environ.get("INTERVAL", "300"))
    while True:
        try:
            failures = sync_once(url, admin, tenant_dir)
        except OSError as exc:  # server not up yet, or the Secret volume not mounted yet
            failures = [f"cannot reach {url}: {exc}"]
        for failure in failures:
            print(failure, file=sys.stderr, flush=True)
        if interval == 0:
            return 1 if failures else 0
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
