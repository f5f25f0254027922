"""The Kubeflow Python SDK (PyPI ``kubeflow``, pinned in the dev extras) as a tenant runs it on the rehearsal.

``TenantSdk`` is a member of one tenant: a ``TrainerClient`` on that member's own kubeconfig (a client
certificate in the tenant's groups, ``Rehearsal.tenant_kubeconfig``), so every call meets exactly the
tenant's RBAC. It submits a scenario ``Job`` the way an ML engineer would, with the SDK's own types and
options and nothing written by hand:

- no queue label: Kueue's LocalQueue defaulting labels the TrainJob with the namespace's ``default``
  LocalQueue (docs/rehearsal.md, "A TrainJob without a queue label is defaulted");
- ``Labels`` for the WorkloadPriorityClass, ``Name`` for the TrainJob name;
- ``RuntimePatch`` (the SDK's manager ``trainer.kubeflow.org/kubeflow-sdk``) for the rehearsal's pod
  settings: kwok's run time, never-ready, the pool's node selector;
- ``S3DatasetInitializer`` / ``S3ModelInitializer`` with a storage URI only: the object-store keys
  come from the runtime's ``trainyard-object-store`` Secret (runtimes/README.md), never the TrainJob.

Trainer v2.3.0 validates a TrainJob whose ``spec.trainer.command`` is ``tune run`` (what the SDK's
``BuiltinTrainer`` writes) against the runtime's *name*, which must read ``torchtune-<model>-<size>``
for one of four models (Ref: trainer v2.3.0 pkg/runtime/framework/plugins/torch/torchtune.go,
``getModelFromRuntimeRef``; pkg/constants/constants.go ``TorchTuneSupportedPretrainedModels``). A
torchtune runtime with another name (``lora-finetune``) is therefore submitted with ``trainer=None``:
the runtime's own command and per-node resources, one node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard import catalog
from trainyard.config.model import PlatformConfig
from trainyard.manifests.meta import PRIORITY_CLASS_LABEL
from trainyard.rehearsal.kwok import NEVER_READY_ANNOTATION, RUN_FOR_ANNOTATION
from trainyard.rehearsal.scenario import Job
from trainyard.rehearsal.settings import ClusterError
from trainyard.rehearsal.trainjobs import input_pins, job_pool

SDK_VERSION = "0.5.0"
SDK_LOGGERS = ("kubeflow",)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def sdk_log() -> Iterator[list[str]]:
    """Every warning (or worse) the SDK logs inside the block, as text."""
    handler = _Records()
    loggers = [logging.getLogger(name) for name in SDK_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    messages: list[str] = []
    try:
        yield messages
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        messages += [f"{r.levelname} {r.name}: {r.getMessage()}" for r in handler.records if r.levelno >= logging.WARNING]


def _import_sdk() -> Any:
    try:
        import kubeflow.trainer as trainer_sdk
    except ImportError:
        raise ClusterError(f"the Kubeflow SDK is not installed: pip install kubeflow=={SDK_VERSION} "
                           "(in the dev extras: `make setup`)") from None
    return trainer_sdk


@dataclass
class TenantSdk:
    """A ``TrainerClient`` of one tenant member; ``warnings`` holds what the SDK logged while connecting."""

    kubeconfig: Path
    namespace: str
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        _import_sdk()
        from kubeflow.common.types import KubernetesBackendConfig
        from kubeflow.trainer import TrainerClient

        with sdk_log() as messages:
            self.client = TrainerClient(KubernetesBackendConfig(namespace=self.namespace,
                                                                config_file=str(self.kubeconfig)))
        self.warnings = messages

    def runtimes(self) -> list[str]:
        """The runtime names ``TrainerClient.list_runtimes()`` returns, sorted."""
        return sorted(r.name for r in self.client.list_runtimes())

    def _replicated_jobs(self, runtime: str) -> list[str]:
        """The runtime's replicated jobs, read as the tenant (it may read the approved runtimes)."""
        from kubernetes import client as kube_client
        from kubernetes import config as kube_config

        api = kube_client.CustomObjectsApi(kube_config.new_client_from_config(config_file=str(self.kubeconfig)))
        group, version = catalog.TRAINER_API.split("/")
        obj = api.get_cluster_custom_object(group, version, "clustertrainingruntimes", runtime)
        return [j["name"] for j in obj["spec"]["template"]["spec"]["replicatedJobs"]]

    def submit_sized(self, runtime: str, name: str, num_nodes: int, resources_per_node: dict[str, Any]) -> str:
        """``TrainerClient.train(...)`` with a ``CustomTrainerContainer`` of the runtime's own image and exactly
        ``resources_per_node`` (the SDK's spelling: ``gpu``, ``mig-1g.10gb``, ``cpu``, ``memory``), nothing else:
        how a tenant sizes a job with the SDK (tests/job_shapes.py)."""
        from kubeflow.trainer.options import Name
        from kubeflow.trainer.types import types as sdk

        found = self.client.get_runtime(runtime)
        trainer = sdk.CustomTrainerContainer(image=found.trainer.image, num_nodes=num_nodes,
                                             resources_per_node=dict(resources_per_node))
        created: str = self.client.train(runtime=found, trainer=trainer, options=[Name(name)])
        return created

    def submit(self, config: PlatformConfig, job: Job) -> str:
        """``TrainerClient.train(...)`` for a scenario job; the TrainJob's name."""
        from kubeflow.trainer.options import (
            JobSetSpecPatch,
            JobSetTemplatePatch,
            JobSpecPatch,
            JobTemplatePatch,
            Labels,
            Name,
            PodSpecPatch,
            PodTemplatePatch,
            ReplicatedJobPatch,
            RuntimePatch,
            TrainingRuntimeSpecPatch,
        )
        from kubeflow.trainer.types import types as sdk

        runtime = self.client.get_runtime(job.runtime)
        pool = job_pool(config, job)
        annotations = {RUN_FOR_ANNOTATION: job.run_for}
        if job.never_ready:
            annotations[NEVER_READY_ANNOTATION] = "true"
        pod = PodTemplatePatch(metadata={"annotations": annotations},
                               spec=PodSpecPatch(node_selector=dict(pool.node_labels)) if pool else None)
        patch = RuntimePatch(training_runtime_spec=TrainingRuntimeSpecPatch(template=JobSetTemplatePatch(
            spec=JobSetSpecPatch(replicated_jobs=[
                ReplicatedJobPatch(name=name, template=JobTemplatePatch(spec=JobSpecPatch(template=pod)))
                for name in self._replicated_jobs(job.runtime)]))))
        labels = {PRIORITY_CLASS_LABEL: job.priority} if job.priority else {}
        options: list[Any] = [Name(job.name), patch, *([Labels(labels)] if labels else [])]
        trainer: Any = None
        pins = input_pins(config, job)
        if runtime.trainer.trainer_type == sdk.TrainerType.BUILTIN_TRAINER:
            if pins:
                raise ClusterError(f"job {job.name}: runtime {job.runtime} is a builtin (torchtune) runtime: the SDK "
                                   "cannot set spec.trainer.env for it (only command and args), so it cannot pin an "
                                   "approved dataset or base model; use a container runtime such as lora-peft")
            if job.nodes != 1 or job.gpus_per_node != 0:
                raise ClusterError(f"job {job.name}: runtime {job.runtime} is submitted by the SDK with its own "
                                   "resources (one node, the runtime's CPU and memory and no GPU; Trainer v2.3.0 refuses "
                                   "the SDK's BuiltinTrainer for a runtime not named torchtune-<model>-<size>): set "
                                   "nodes 1 and gpus_per_node 0")
        else:
            trainer = sdk.CustomTrainerContainer(image=runtime.trainer.image, num_nodes=job.nodes, resources_per_node={
                "gpu": job.gpus_per_node, "cpu": "1", "memory": "4Gi"}, env=pins or None)
        initializer = None
        if job.dataset or job.model:
            initializer = sdk.Initializer(
                dataset=sdk.S3DatasetInitializer(storage_uri=job.dataset) if job.dataset else None,
                model=sdk.S3ModelInitializer(storage_uri=job.model) if job.model else None)
        name: str = self.client.train(runtime=runtime, initializer=initializer, trainer=trainer, options=options)
        return name
