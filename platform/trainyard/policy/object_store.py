"""Rules on object storage: each tenant has its own credentials and only its own buckets, nothing is public,
and no access key is ever written inline.

Grants are read from what the object store applies: SeaweedFS's identities file (a Secret key
``seaweedfs_s3_config``) or the provisioning plan's AWS policy documents (MinIO, external). An
identity named ``anonymous`` is how SeaweedFS grants unauthenticated access
(weed/s3api/auth_credentials.go), and a policy with ``Principal: *`` is how S3 does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from trainyard.config.object_store import PURPOSES
from trainyard.manifests import object_store
from trainyard.manifests.meta import OBJECT_STORE_SECRET, Manifest
from trainyard.policy.model import Context, object_rule, stack_rule
from trainyard.policy.pods import as_dict, as_list, env_lists
from trainyard.policy.tenancy import tenant_namespaces

SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")
# AWS access key ids (AKIA... long-term, ASIA... temporary) and the shape of a secret access key.
# Ref: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids
AWS_ACCESS_KEY_ID = re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")
# Env names that carry object-store keys: the AWS SDK's, and the Trainer initializers' (S3 ACCESS_KEY_ID,
# SECRET_ACCESS_KEY: pkg/initializers/types/types.py of kubeflow/trainer).
KEY_ENV_NAMES = re.compile(r"(^|_)(ACCESS_KEY_ID|SECRET_ACCESS_KEY|SECRET_KEY|ACCESS_KEY)$", re.IGNORECASE)
GENERATED = re.compile(r"\$\{generated:[^}]+\}")


def _meta(obj: Manifest) -> dict[str, Any]:
    return as_dict(obj.get("metadata"))


def _secret_values(obj: Manifest) -> dict[str, Any]:
    return {**as_dict(obj.get("data")), **as_dict(obj.get("stringData"))}


def seaweedfs_identity_files(objects: Sequence[Manifest]) -> Iterator[tuple[Manifest, list[dict[str, Any]]]]:
    for obj in objects:
        if obj.get("kind") == "Secret":
            text = _secret_values(obj).get(object_store.SEAWEEDFS_IDENTITIES_KEY)
            if isinstance(text, str):
                try:
                    parsed = json.loads(text)
                except json.JSONDecodeError:
                    parsed = {}
                yield obj, [as_dict(i) for i in as_list(as_dict(parsed).get("identities"))]


def provisioning_plans(objects: Sequence[Manifest]) -> Iterator[tuple[Manifest, dict[str, Any]]]:
    for obj in objects:
        if obj.get("kind") == "ConfigMap" and isinstance(as_dict(obj.get("data")).get("plan.json"), str):
            try:
                yield obj, as_dict(json.loads(as_dict(obj.get("data"))["plan.json"]))
            except json.JSONDecodeError:
                yield obj, {}


def _seaweedfs_buckets(identity: dict[str, Any]) -> tuple[set[str], list[str]]:
    """(buckets the identity's actions name, actions that name no bucket at all)."""
    scoped, unscoped = set(), []
    for action in as_list(identity.get("actions")):
        _, sep, resource = str(action).partition(":")
        if sep:
            scoped.add(resource.split("/", 1)[0])
        else:
            unscoped.append(str(action))
    return scoped, unscoped


def _policy_buckets(policy: dict[str, Any]) -> tuple[set[str], list[str]]:
    scoped, unscoped = set(), []
    for statement in as_list(policy.get("Statement")):
        for resource in as_list(as_dict(statement).get("Resource")):
            name = str(resource).removeprefix("arn:aws:s3:::").split("/", 1)[0]
            if "*" in name or not name:
                unscoped.append(str(resource))
            else:
                scoped.add(name)
    return scoped, unscoped


def grants(objects: Sequence[Manifest]) -> dict[str, tuple[Manifest, set[str], list[str]]]:
    """Identity name -> (object granting it, buckets it may use, grants not limited to a bucket)."""
    out: dict[str, tuple[Manifest, set[str], list[str]]] = {}
    for obj, identities in seaweedfs_identity_files(objects):
        for identity in identities:
            out[str(identity.get("name"))] = (obj, *_seaweedfs_buckets(identity))
    for obj, plan in provisioning_plans(objects):
        for identity in as_list(plan.get("identities")):
            entry = as_dict(identity)
            out[str(entry.get("name"))] = (obj, *_policy_buckets(as_dict(entry.get("policy"))))
    return out


@stack_rule("object-store-tenant-credentials",
            "Every tenant has its own object-store credentials Secret and an identity limited to its own buckets.",
            f"Keep the Secret {OBJECT_STORE_SECRET} and the tenant identities that manifests/object_store.py renders; "
            "never share a key pair between tenants.")
def object_store_tenant_credentials(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    if ctx.config.object_store is None:
        return
    secrets = {str(_meta(o).get("namespace")): o for o in objects
               if o.get("kind") == "Secret" and _meta(o).get("name") == OBJECT_STORE_SECRET}
    tenants = ctx.tenants_by_namespace
    granted = grants(objects)
    for ns_name, namespace in tenant_namespaces(objects, ctx).items():
        secret = secrets.get(ns_name)
        if secret is None:
            yield namespace, f"tenant namespace {ns_name} has no Secret {OBJECT_STORE_SECRET}"
            continue
        missing = [k for k in SECRET_KEYS if k not in _secret_values(secret)]
        if missing:
            yield secret, f"lacks {', '.join(missing)}"
        tenant = tenants.get(ns_name)
        if tenant is None:
            continue
        identity = object_store.tenant_identity(ctx.config, tenant)
        if _secret_values(secret).get("AWS_ACCESS_KEY_ID") != identity.access_key.placeholder:
            yield secret, f"does not carry tenant {tenant.name}'s own access key ({identity.access_key.placeholder})"
        own = {object_store.bucket_name(ctx.config, tenant, p) for p in PURPOSES}
        if identity.name not in granted:
            yield None, f"tenant {tenant.name} has no object-store identity ({identity.name}) and so no bucket policy"
            continue
        source, buckets, unscoped = granted[identity.name]
        if unscoped:
            yield source, f"identity {identity.name} has grants not limited to a bucket: {', '.join(unscoped)}"
        foreign = sorted(buckets - own)
        if foreign:
            yield source, f"identity {identity.name} reaches buckets that are not tenant {tenant.name}'s: {', '.join(foreign)}"


@object_rule("object-store-no-public-buckets", "No bucket is readable or writable without credentials.",
             "Remove the 'anonymous' identity or the Principal '*' statement; give the reader an identity instead.")
def object_store_no_public_buckets(obj: Manifest, ctx: Context) -> Iterator[str]:
    for _, identities in seaweedfs_identity_files([obj]):
        for identity in identities:
            if identity.get("name") == "anonymous":
                actions = ", ".join(map(str, as_list(identity.get("actions"))))
                yield f"grants unauthenticated access (identity 'anonymous': {actions})"
    for _, plan in provisioning_plans([obj]):
        for bucket in as_list(plan.get("buckets")):
            entry = as_dict(bucket)
            if entry.get("anonymousRead") or entry.get("public"):
                yield f"bucket {entry.get('name')} is marked public"
            for statement in as_list(as_dict(entry.get("policy")).get("Statement")):
                principal = as_dict(statement).get("Principal")
                if principal == "*" or (isinstance(principal, dict) and "*" in as_list(principal.get("AWS"))):
                    yield f"bucket {entry.get('name')} has a policy statement for Principal '*'"


def _looks_like_key(name: str, value: str) -> bool:
    bare = GENERATED.sub("", value)
    if AWS_ACCESS_KEY_ID.search(bare):
        return True
    return bool(KEY_ENV_NAMES.search(name)) and bool(bare.strip()) and not bare.startswith("<")


@object_rule("no-inline-object-store-keys",
             "No object-store key is written inline: not in env (containers, TrainJob trainer and initializers), "
             "not in ConfigMaps.",
             f"Leave keys unset: the approved runtimes envFrom the Secret {OBJECT_STORE_SECRET} (the Kubeflow SDK writes "
             "keys it is given into the TrainJob as plain env).")
def no_inline_object_store_keys(obj: Manifest, ctx: Context) -> Iterator[str]:
    for path, env in env_lists(obj):
        for i, item in enumerate(env):
            var = as_dict(item)
            value = var.get("value")
            if isinstance(value, str) and _looks_like_key(str(var.get("name", "")), value):
                yield f"{path}[{i}] ({var.get('name')}) carries an object-store key inline"
    if obj.get("kind") == "ConfigMap":
        for key, value in as_dict(obj.get("data")).items():
            if isinstance(value, str) and AWS_ACCESS_KEY_ID.search(GENERATED.sub("", value)):
                yield f"data.{key} contains an AWS access key id"


RULES = (object_store_tenant_credentials, object_store_no_public_buckets, no_inline_object_store_keys)
