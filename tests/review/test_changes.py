"""The change model: objects matched by identity, fields by path, secrets never shown."""

from __future__ import annotations

import random

from trainyard.review.changes import (
    ABSENT,
    INSTALLS,
    NETWORK,
    QUEUES,
    RUNTIMES,
    TENANTS,
    FieldChange,
    concern_of,
    diff_objects,
    diff_values,
)
from trainyard.review.render import REDACTED


def cluster_queue(name: str, gpus: int, *, tenant: str | None = None) -> dict:
    labels = {"trainyard.dev/tenant": tenant or name}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": labels},
        "spec": {"resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
        }]},
    }


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"trainyard.dev/tenant": name}}}


def test_an_object_only_in_head_is_added_and_only_in_base_removed() -> None:
    changes, unchanged = diff_objects([namespace("team-a"), namespace("team-b")], [namespace("team-a"), namespace("team-c")])
    assert [(c.action, c.id) for c in changes] == [("added", "Namespace/team-c"), ("removed", "Namespace/team-b")]
    assert unchanged == 1


def test_a_changed_field_reads_path_old_new_with_named_list_items() -> None:
    changes, _ = diff_objects([cluster_queue("team-a", 16)], [cluster_queue("team-a", 24)])
    (change,) = changes
    assert change.action == "changed" and change.tenant == "team-a" and change.concern == QUEUES
    assert change.fields == (FieldChange(
        "spec.resourceGroups[0].flavors[h100].resources[nvidia.com/gpu].nominalQuota", 16, 24),)


def test_reordering_named_items_is_not_a_change() -> None:
    old = {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}
    new = {"containers": [{"name": "b", "image": "y"}, {"name": "a", "image": "x"}]}
    assert diff_values(old, new) == []


def test_unnamed_list_items_compare_by_position_and_added_structures_list_their_leaves() -> None:
    old = {"spec": {"egress": [{"ports": [{"port": 53}]}]}}
    new = {"spec": {"egress": [{"ports": [{"port": 53}, {"port": 9000, "protocol": "TCP"}]}]}}
    assert diff_values(old, new) == [
        FieldChange("spec.egress[0].ports[1].port", ABSENT, 9000),
        FieldChange("spec.egress[0].ports[1].protocol", ABSENT, "TCP"),
    ]


def test_scalar_lists_read_whole_and_dotted_keys_are_bracketed() -> None:
    old = {"verbs": ["get"], "labels": {"trainyard.dev/tenant": "a"}}
    new = {"verbs": ["get", "list"], "labels": {"trainyard.dev/tenant": "b"}}
    assert diff_values(old, new) == [
        FieldChange("labels[trainyard.dev/tenant]", "a", "b"),
        FieldChange("verbs", ["get"], ["get", "list"]),
    ]


def test_embedded_yaml_is_diffed_by_field() -> None:
    old = {"values": {"config": "waitForPodsReady:\n  timeout: 10m\nfairSharing: {}\n"}}
    new = {"values": {"config": "waitForPodsReady:\n  timeout: 15m\nfairSharing: {}\n"}}
    assert diff_values(old, new) == [FieldChange("values.config(yaml).waitForPodsReady.timeout", "10m", "15m")]


def test_embedded_json_is_diffed_by_field_as_yaml_would_be_and_bad_json_falls_back_to_yaml() -> None:
    """The object store's plan is JSON (read by ``json``, not the slower YAML constructor): same changes."""
    import json

    plan = {"backend": "minio", "buckets": [{"name": "a-models", "versioning": True}]}
    grown = {**plan, "buckets": [*plan["buckets"], {"name": "b-models", "versioning": False}]}
    old, new = ({"data": {"plan.json": json.dumps(p, indent=2)}} for p in (plan, grown))
    assert diff_values(old, new) == [FieldChange("data[plan.json](yaml).buckets[b-models].versioning", ABSENT, False)]
    # Not JSON (a YAML flow mapping with a comment), but YAML: still diffed by field.
    old = {"values": {"config": "{a: 1}\n# one\n"}}
    new = {"values": {"config": "{a: 2}\n# one\n"}}
    assert diff_values(old, new) == [FieldChange("values.config(yaml).a", 1, 2)]


def test_secret_data_changes_are_reported_but_never_shown() -> None:
    old = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "mlflow"},
           "data": {"password": "c2VjcmV0LTE=", "user": "bWxmbG93"}}
    new = {**old, "data": {"password": "c2VjcmV0LTI=", "user": "bWxmbG93", "extra": "eA=="}}
    (change,) = diff_objects([old], [new])[0]
    assert change.concern == NETWORK
    assert change.fields == (FieldChange("data.extra", ABSENT, REDACTED), FieldChange("data.password", REDACTED, REDACTED))
    assert "c2VjcmV0" not in repr(change)


def test_credential_like_keys_are_redacted_anywhere_but_booleans_under_them_stay_visible() -> None:
    old = {"values": {"db": {"password": "hunter2"}}, "automountServiceAccountToken": False}
    new = {"values": {"db": {"password": "hunter3"}}, "automountServiceAccountToken": True}
    assert diff_values(old, new) == [
        FieldChange("automountServiceAccountToken", False, True),
        FieldChange("values.db.password", REDACTED, REDACTED),
    ]
    added = diff_values({}, {"auth": {"accessKey": "AKIA123", "region": "eu"}})
    assert FieldChange("auth.accessKey", ABSENT, REDACTED) in added
    assert "AKIA123" not in repr(added)


def test_pulumi_secret_placeholder_is_shown_redacted() -> None:
    assert diff_values({"token": "a"}, {"token": "[secret]"}) == [FieldChange("token", REDACTED, REDACTED)]
    assert diff_values({"x": 1}, {"x": "[secret]"}) == [FieldChange("x", 1, REDACTED)]


def test_result_does_not_depend_on_object_order() -> None:
    base = [cluster_queue(f"t{i}", i) for i in range(12)] + [namespace(f"t{i}") for i in range(12)]
    head = [cluster_queue(f"t{i}", i + (i % 3)) for i in range(2, 14)] + [namespace(f"t{i}") for i in range(1, 13)]
    expected = diff_objects(base, head)
    for seed in range(5):
        rng = random.Random(seed)
        shuffled_base, shuffled_head = base[:], head[:]
        rng.shuffle(shuffled_base)
        rng.shuffle(shuffled_head)
        assert diff_objects(shuffled_base, shuffled_head) == expected


def test_concerns_follow_what_an_admin_reviews() -> None:
    assert concern_of("kueue.x-k8s.io", "LocalQueue", {"trainyard.dev/tenant": "a"}) == QUEUES
    assert concern_of("core", "ResourceQuota") == QUEUES
    assert concern_of("trainer.kubeflow.org", "ClusterTrainingRuntime") == RUNTIMES
    assert concern_of("networking.k8s.io", "NetworkPolicy", {"trainyard.dev/tenant": "a"}) == NETWORK
    assert concern_of("rbac.authorization.k8s.io", "RoleBinding") == NETWORK
    assert concern_of("core", "Namespace", {"trainyard.dev/tenant": "a"}) == TENANTS
    assert concern_of("apiextensions.k8s.io", "CustomResourceDefinition") == INSTALLS
    assert concern_of("helm.sh", "Chart") == INSTALLS
