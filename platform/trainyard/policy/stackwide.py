"""Rules on the stack as a whole: data survives a destroy, security settings point at real tenants.

Protection: deleting a CRD deletes every object of its kind cluster-wide, deleting a namespace
deletes its volumes. The components always retain such objects on delete and Pulumi-protect
them where ``lifecycle.protect_data`` says so; this rule checks the outcome. Offline it reads the
stack's lifecycle settings; in the CrossGuard pack it reads each resource's ``protect`` option
(the Python policy SDK does not expose ``retainOnDelete``). Objects the stack does not declare
(a tenant's manifests in a pull request) are not the stack's to protect.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard.manifests.lifecycle import holds_data
from trainyard.manifests.meta import Manifest
from trainyard.policy.model import Context, object_rule, stack_rule


@object_rule("data-protected", "CRDs and data-holding resources are Pulumi-protected.",
             "Set lifecycle.protect_data: true (disable this rule only on disposable rehearsal stacks).")
def data_protected(obj: Manifest, ctx: Context) -> Iterator[str]:
    if holds_data(obj) and ctx.protection(obj) is False:
        yield (f"holds data ({obj.get('kind')}) but is not Pulumi-protected: destroy and replacements "
               "go ahead without an explicit unprotect")


@stack_rule("security-references-exist", "Security settings name tenants that exist.",
            "Fix the tenant name in security.admission.training_runtime_tenants.")
def security_references_exist(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    tenants = {t.name for t in ctx.config.tenants}
    for i, name in enumerate(ctx.config.security.admission.training_runtime_tenants):
        if name not in tenants:
            yield None, f"security.admission.training_runtime_tenants[{i}]: {name!r} is not a tenant"


RULES = (data_protected, security_references_exist)
