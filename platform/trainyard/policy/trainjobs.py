"""Rules on what tenants submit: a TrainJob uses an approved runtime, its namespace's queue, an allowed priority.

These are the rules a tenant's pull request is held to, and the same ones the admission
policies in ``manifests/admission.py`` enforce when the TrainJob reaches the API server. They read a
TrainJob as the API server stores it: ``trainyard check`` first adds the labels the cluster adds on
create (``manifests/trainjob_defaults.py``), so only a label that is missing where nothing adds it, or
present and wrong, is a finding.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from trainyard.manifests import trainjob_resources
from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Manifest
from trainyard.policy.model import Context, object_rule, stack_rule
from trainyard.policy.pods import as_dict, as_list, containers, dig

TRAINER_GROUP = "trainer.kubeflow.org"


def _labels(obj: Manifest) -> dict[str, object]:
    return as_dict(as_dict(obj.get("metadata")).get("labels"))


def _namespace(obj: Manifest) -> str:
    return str(as_dict(obj.get("metadata")).get("namespace") or "")


def own_runtimes_allowed(ctx: Context, obj: Manifest) -> bool:
    tenant = ctx.tenant_of(obj)
    return tenant is not None and tenant.name in ctx.config.security.admission.training_runtime_tenants


@object_rule("trainjob-approved-runtime", "A TrainJob references an approved ClusterTrainingRuntime.",
             "Set spec.runtimeRef to one of runtimes.approved (kind ClusterTrainingRuntime); ask the platform team "
             "to review a new runtime into runtimes/.",
             admission="trainyard-trainjob-runtime")
def trainjob_approved_runtime(obj: Manifest, ctx: Context) -> Iterator[str]:
    if obj.get("kind") != "TrainJob":
        return
    ref = as_dict(dig(obj, "spec", "runtimeRef"))
    kind, name = ref.get("kind") or "ClusterTrainingRuntime", ref.get("name")
    group = ref.get("apiGroup") or TRAINER_GROUP
    approved = ctx.config.runtimes.approved
    if group != TRAINER_GROUP:
        yield f"spec.runtimeRef.apiGroup {group!r} is not {TRAINER_GROUP}"
    elif kind == "TrainingRuntime" and own_runtimes_allowed(ctx, obj):
        return
    elif kind != "ClusterTrainingRuntime":
        yield f"spec.runtimeRef names a {kind}; only approved ClusterTrainingRuntimes ({', '.join(approved)}) may be used"
    elif name not in approved:
        yield f"spec.runtimeRef.name {name!r} is not an approved runtime ({', '.join(approved)})"


@stack_rule("trainjob-queue-label", f"A TrainJob carries {QUEUE_NAME_LABEL} naming a LocalQueue of its namespace "
            "(in a tenant namespace Kueue's LocalQueue defaulting adds it).",
            f"Leave the label out in a tenant namespace (Kueue adds {QUEUE_NAME_LABEL}: default), or set it to default "
            "(the tenant's LocalQueue); submit to a tenant namespace.",
            admission="trainyard-trainjob-queue")
def trainjob_queue_label(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    queues = {(_namespace(o), str(dig(o, "metadata", "name"))) for o in objects if o.get("kind") == "LocalQueue"}
    for obj in objects:
        if obj.get("kind") != "TrainJob":
            continue
        queue, namespace = _labels(obj).get(QUEUE_NAME_LABEL), _namespace(obj)
        if queue is None:
            yield obj, (f"has no {QUEUE_NAME_LABEL} label, and Kueue adds none in namespace {namespace!r} (it defaults "
                        f"the queue only in a namespace it manages with a LocalQueue named {DEFAULT_LOCAL_QUEUE!r})")
        elif (namespace, queue) not in queues:
            yield obj, f"{QUEUE_NAME_LABEL} {queue!r} is not a LocalQueue of namespace {namespace!r}"


@object_rule("trainjob-priority-class", f"A TrainJob names, with {PRIORITY_CLASS_LABEL}, a priority class its tenant may use "
             "(trainyard-trainjob-default-priority adds the tenant's default where it names none).",
             f"Set the label {PRIORITY_CLASS_LABEL} to one of the tenant's priority_classes, or leave it out for the "
             "tenant's default_priority_class.")
def trainjob_priority_class(obj: Manifest, ctx: Context) -> Iterator[str]:
    tenant = ctx.tenant_of(obj)
    if obj.get("kind") != "TrainJob" or tenant is None or not tenant.priority_classes:
        return  # outside tenant namespaces the queue rule already reports the TrainJob
    allowed = ", ".join(tenant.priority_classes)
    priority = _labels(obj).get(PRIORITY_CLASS_LABEL)
    if priority is None:
        yield (f"has no {PRIORITY_CLASS_LABEL} label, and no admission policy of the stack adds a default for tenant "
               f"{tenant.name} (it may use: {allowed})")
    elif priority not in tenant.priority_classes:
        yield f"priority class {priority!r} is not allowed for tenant {tenant.name} (allowed: {allowed})"


@object_rule("training-runtime-allowed", "Tenants define TrainingRuntimes only where the stack allows it.",
             "Use an approved ClusterTrainingRuntime, or have the platform team add the tenant to "
             "security.admission.training_runtime_tenants.",
             admission="trainyard-training-runtimes")
def training_runtime_allowed(obj: Manifest, ctx: Context) -> Iterator[str]:
    tenant = ctx.tenant_of(obj)
    if obj.get("kind") == "TrainingRuntime" and tenant is not None and not own_runtimes_allowed(ctx, obj):
        yield f"tenant {tenant.name} may not define TrainingRuntimes"


RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


@object_rule("runtime-claim-retention", "A training runtime's volumeClaimPolicies spell out their retentionPolicy.",
             "Add retentionPolicy (e.g. whenDeleted: Delete) to every spec.template.spec.volumeClaimPolicies entry.")
def runtime_claim_retention(obj: Manifest, ctx: Context) -> Iterator[str]:
    """JobSet v0.12.0 defaults ``retentionPolicy`` only on CREATE (its mutating webhook has no UPDATE rule)
    and its CRD makes ``volumeClaimPolicies`` immutable; Trainer v2.3.0 re-applies the JobSet without the
    default when Kueue resumes a preempted TrainJob, JobSet refuses the update, and the job never starts
    again. Found on the rehearsal (docs/rehearsal.md). Ref: jobset v0.12.0 pkg/webhooks/jobset_webhook.go."""
    if obj.get("kind") not in RUNTIME_KINDS:
        return
    for i, policy in enumerate(as_list(dig(obj, "spec", "template", "spec", "volumeClaimPolicies"))):
        if not as_dict(policy).get("retentionPolicy"):
            yield (f"spec.template.spec.volumeClaimPolicies[{i}] sets no retentionPolicy: JobSet v0.12.0 would refuse "
                   "the update when Kueue resumes a preempted TrainJob, which then never starts again")


@object_rule("runtime-depends-on-earlier-jobs", "A training runtime's replicated jobs depend only on jobs listed before them.",
             "Order spec.template.spec.replicatedJobs so that each dependsOn names an earlier job (the first has none).")
def runtime_depends_on_earlier_jobs(obj: Manifest, ctx: Context) -> Iterator[str]:
    """JobSet v0.12.0's webhook refuses a JobSet whose first replicated job has ``dependsOn`` or whose ``dependsOn``
    names a job listed later; Trainer creates the JobSet only after Kueue admitted the TrainJob, so such a runtime
    holds quota and never starts anything. Ref: jobset v0.12.0 pkg/webhooks/jobset_webhook.go (ValidateCreate)."""
    if obj.get("kind") not in RUNTIME_KINDS:
        return
    earlier: set[str] = set()
    for i, job in enumerate(as_list(dig(obj, "spec", "template", "spec", "replicatedJobs"))):
        name = str(as_dict(job).get("name"))
        for dependency in as_list(as_dict(job).get("dependsOn")):
            wanted = str(as_dict(dependency).get("name"))
            if wanted not in earlier:
                yield (f"spec.template.spec.replicatedJobs[{i}] ({name}) depends on {wanted}, which is not listed before "
                       "it: JobSet refuses the JobSet, and every TrainJob on this runtime holds its quota and never starts")
        earlier.add(name)


@object_rule("runtime-pods-request-resources", "Every container of a training runtime requests CPU and memory.",
             "Set resources.requests (or limits) for cpu and memory on every container of the runtime, initializers "
             "included; spec.trainer.resourcesPerNode replaces the trainer's.")
def runtime_pods_request_resources(obj: Manifest, ctx: Context) -> Iterator[str]:
    """A tenant namespace's ResourceQuota limits ``requests.cpu`` and ``requests.memory``, so the API server
    refuses a pod that requests neither; a runtime's initializer pods take no resources from the TrainJob,
    so the runtime is the only place they can come from. Found on the rehearsal with the SDK (docs/rehearsal.md)."""
    if obj.get("kind") not in RUNTIME_KINDS:
        return
    for c in containers(obj):
        resources = as_dict(c.container.get("resources"))
        given = set(as_dict(resources.get("requests"))) | set(as_dict(resources.get("limits")))
        missing = [name for name in ("cpu", "memory") if name not in given]
        if missing:
            yield (f"{c.path} requests no {' or '.join(missing)}: the tenant ResourceQuota refuses its pods "
                   "(requests.cpu/memory are limited in tenant namespaces)")


def _node_resources(value: object) -> trainjob_resources.NodeResources:
    resources = as_dict(value)
    return trainjob_resources.NodeResources(
        {str(k): str(v) for k, v in as_dict(resources.get("requests")).items()},
        {str(k): str(v) for k, v in as_dict(resources.get("limits")).items()})


@stack_rule("trainjob-resources", "A TrainJob's resources per node make pods that can run on a flavor of its queue.",
            "Give each resource in spec.trainer.resourcesPerNode one figure (limits alone is enough: it is also the "
            "request), within one node of a flavor your queue offers, and no more torch processes per node than GPUs; "
            "docs/lab.md (\"Sizing a TrainJob\") shows the forms that work.",
            admission=trainjob_resources.POLICY)
def trainjob_resources_fit(objects: Sequence[Manifest], ctx: Context) -> Iterator[tuple[Manifest | None, str]]:
    """The rules of ``trainyard-trainjob-resources`` (manifests/trainjob_resources.py), on the TrainJob as the
    mutating policy completes it: what the API server would admit is what review passes."""
    shapes = trainjob_resources.runtime_shapes(objects)
    flavors = trainjob_resources.tenant_flavors(ctx.config)
    for obj in objects:
        tenant = ctx.tenant_of(obj)
        if obj.get("kind") != "TrainJob" or tenant is None:
            continue
        ref = as_dict(dig(obj, "spec", "runtimeRef"))
        own = (ref.get("kind") or "ClusterTrainingRuntime") != "ClusterTrainingRuntime"
        shape = None if own else shapes.get(str(ref.get("name")))
        known = shape is not None
        if shape is None:
            shape = trainjob_resources.RuntimeShape(trainjob_resources.NONE, torch=False)
        trainer = as_dict(dig(obj, "spec", "trainer"))
        given = trainer.get("resourcesPerNode")
        resources = (trainjob_resources.complete(shape.resources, _node_resources(given), runtime_known=known)
                     if given is not None else shape.resources)
        num_proc = trainer.get("numProcPerNode")
        for message in trainjob_resources.refusals(resources, flavors.get(tenant.namespace_name, []), shape.torch,
                                                   num_proc if isinstance(num_proc, int) else None):
            yield obj, message


RULES = (trainjob_approved_runtime, trainjob_queue_label, trainjob_priority_class, training_runtime_allowed,
         runtime_claim_retention, runtime_depends_on_earlier_jobs, runtime_pods_request_resources, trainjob_resources_fit)
