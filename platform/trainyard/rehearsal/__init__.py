"""The local rehearsal: real Kueue, JobSet and Trainer controllers, kube-scheduler and kwok on a loopback control plane.

One package, used by ``trainyard cluster``/``trainyard rehearse``, ``make up`` and ``tests/cluster``:

- ``cluster``: settings (state dir, ports), certificates, processes, the control plane;
- ``controllers``: the controllers' configuration (Kueue's is the stack's own, overlaid), webhook
  registration, readiness, teardown;
- ``kwok``: the fake kubelet and its stages;
- ``stack``: the rehearsal overlay that makes any stack deployable here;
- ``scenario``: typed scenario files; ``report``: what Kueue decided, checked against expectations;
- ``session``: ``Rehearsal``, the object that ties them together; ``kube``: a thin kubectl client.

See docs/rehearsal.md.
"""
