"""What a Trainyard cluster writes into a new TrainJob before any validation: the labels a tenant need not write.

Two mutating steps of a Trainyard stack label a TrainJob on CREATE, before the validating admission policies
(and long before Kueue queues it) see it:

- **Kueue's LocalQueue defaulting.** Kueue's TrainJob webhook (``mtrainjob.kb.io``, CREATE) gives a TrainJob whose
  ``kueue.x-k8s.io/queue-name`` label is missing or empty the value ``default`` when its namespace has a LocalQueue
  named ``default``, the namespace matches the Configuration's ``managedJobsNamespaceSelector``, and no controller
  owner of the TrainJob is a kind Kueue manages. It is always on in v0.19: the ``LocalQueueDefaulting`` gate went GA
  (locked on) in v0.17 and was removed in v0.19. Every tenant namespace has that LocalQueue (``kueue.local_queue_for``)
  and the tenant label the selector asks for (``kueue.controller_configuration``).
  Ref: kueue v0.19.2 pkg/controller/jobs/trainjob/trainjob_webhook.go (Default);
  pkg/controller/jobframework/defaults.go (ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector,
  defaultLocalQueueApplies); utils.go (QueueNameForObject, namespaceMatchesSelector); integrationmanager.go
  (IsOwnerManagedByKueueForObject); v0.18.0 pkg/features/kube_features.go (LocalQueueDefaulting GA, "remove in 0.19").
- **Trainyard's default priority.** The MutatingAdmissionPolicy ``trainyard-trainjob-default-priority``
  (``admission.default_priority_policy``) gives a TrainJob without a ``kueue.x-k8s.io/priority-class`` label (an
  empty value is a label, and is kept) its tenant's ``default_priority_class``, in the namespaces its binding selects.

``trainyard check`` applies exactly these to the TrainJobs it is given, reading the same sources the cluster's
objects are rendered from (the LocalQueues, Namespaces and admission objects of the stack, Kueue's rendered
Configuration, ``admission.default_priority_classes``), and says what it assumed. A label the job sets is kept, so
a wrong one is still refused by the rules with their reason.

Kueue's other defaulting, ``WorkloadPriorityClassDefaulting`` (alpha, off, a class named ``default``), is not
enabled by any Trainyard stack (the rendered Configuration sets no feature gates) and is not assumed.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainyard.config.model import PlatformConfig
from trainyard.manifests import admission, kueue
from trainyard.manifests.meta import DEFAULT_LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL, Manifest

TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
KUEUE = "Kueue"


@dataclass(frozen=True)
class AddedLabel:
    """A label the cluster adds to a TrainJob on create, and who adds it."""

    key: str
    value: str
    added_by: str  # "Kueue", or the name of Trainyard's MutatingAdmissionPolicy
    why: str

    def describe(self) -> str:
        """``queue: default (added by Kueue: ...)``, as ``trainyard check`` prints it."""
        what = {QUEUE_NAME_LABEL: "queue", PRIORITY_CLASS_LABEL: "priority class"}.get(self.key, self.key)
        return f"{what}: {self.value} (added by {self.added_by}: {self.why})"


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels: a missing selector matches everything, as Kueue reads
    ``managedJobsNamespaceSelector`` and the API server a binding's ``namespaceSelector``.
    Ref: k8s.io/apimachinery pkg/apis/meta/v1 LabelSelector (matchLabels ANDed with matchExpressions)."""
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if ((operator == "In" and not (present and labels[key] in values))
                or (operator == "NotIn" and present and labels[key] in values)
                or (operator == "Exists" and not present) or (operator == "DoesNotExist" and present)):
            return False
    return True


def _meta(obj: Manifest) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _labels(obj: Manifest) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _named(objects: Sequence[Manifest], kind: str, name: str) -> Manifest | None:
    return next((o for o in objects if o.get("kind") == kind and _meta(o).get("name") == name), None)


def _owned_by_a_managed_kind(trainjob: Manifest, frameworks: Sequence[str]) -> bool:
    """A controller owner of a kind whose integration Kueue enables (integrations are named ``<group>/<kind>`` in
    lower case, ``pod`` for the core group)."""
    for owner in _meta(trainjob).get("ownerReferences") or []:
        if isinstance(owner, dict) and owner.get("controller") is True:
            group, kind = str(owner.get("apiVersion", "")).rpartition("/")[0], str(owner.get("kind", "")).lower()
            if (f"{group}/{kind}" if group else kind) in frameworks:
                return True
    return False


def kueue_queue_default(config: PlatformConfig, objects: Sequence[Manifest], trainjob: Manifest) -> AddedLabel | None:
    """The queue label Kueue's LocalQueue defaulting adds to ``trainjob`` on create, if it adds one."""
    configuration = kueue.controller_configuration(config)
    frameworks = configuration["integrations"]["frameworks"]
    namespace = str(_meta(trainjob).get("namespace") or "")
    if TRAINJOB_FRAMEWORK not in frameworks or _labels(trainjob).get(QUEUE_NAME_LABEL):
        return None
    queue = next((o for o in objects if o.get("kind") == "LocalQueue" and _meta(o).get("name") == DEFAULT_LOCAL_QUEUE
                  and _meta(o).get("namespace") == namespace), None)
    ns = _named(objects, "Namespace", namespace)
    if queue is None or ns is None or _owned_by_a_managed_kind(trainjob, frameworks):
        return None
    if not selector_matches(configuration.get("managedJobsNamespaceSelector"), _labels(ns)):
        return None
    return AddedLabel(QUEUE_NAME_LABEL, DEFAULT_LOCAL_QUEUE, KUEUE,
                      f"LocalQueue defaulting, the LocalQueue {DEFAULT_LOCAL_QUEUE!r} of namespace {namespace}")


def default_priority(config: PlatformConfig, objects: Sequence[Manifest], trainjob: Manifest) -> AddedLabel | None:
    """The priority class label ``trainyard-trainjob-default-priority`` adds to ``trainjob`` on create, if any."""
    policy = _named(objects, "MutatingAdmissionPolicy", admission.DEFAULT_PRIORITY_POLICY)
    binding = _named(objects, "MutatingAdmissionPolicyBinding", admission.DEFAULT_PRIORITY_POLICY)
    labels = _meta(trainjob).get("labels")
    if policy is None or binding is None or (isinstance(labels, dict) and PRIORITY_CLASS_LABEL in labels):
        return None
    namespace = str(_meta(trainjob).get("namespace") or "")
    ns = _named(objects, "Namespace", namespace)
    selector = ((binding.get("spec") or {}).get("matchResources") or {}).get("namespaceSelector")
    default = admission.default_priority_classes(config).get(namespace)
    if ns is None or default is None or not selector_matches(selector, _labels(ns)):
        return None
    return AddedLabel(PRIORITY_CLASS_LABEL, default, admission.DEFAULT_PRIORITY_POLICY,
                      f"the default_priority_class of namespace {namespace}")


def labels_added_on_create(config: PlatformConfig, objects: Sequence[Manifest], obj: Manifest) -> tuple[AddedLabel, ...]:
    """Every label the cluster adds to ``obj`` when it is created; none for what is not a TrainJob.

    ``objects`` is what the cluster holds when it arrives: the rendered stack (and what else is checked with it)."""
    if obj.get("kind") != "TrainJob" or str(obj.get("apiVersion", "")).split("/")[0] != admission.TRAINER_GROUP:
        return ()
    return tuple(label for label in (kueue_queue_default(config, objects, obj), default_priority(config, objects, obj))
                 if label is not None)


def with_labels(obj: Manifest, added: Sequence[AddedLabel]) -> Manifest:
    """A copy of ``obj`` carrying ``added`` (the object as the API server stores it)."""
    if not added:
        return obj
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels")
    if not isinstance(labels, dict):
        labels = out["metadata"]["labels"] = {}
    labels.update({label.key: label.value for label in added})
    return out
