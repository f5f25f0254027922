"""Supply chain: what a stack pulls, and the digests its mirror serves.

- ``reference``: image references (registry, repository, tag, digest), parsed and printed.
- ``lock``: the committed image lock (``images.lock.yaml``): reference -> digest in the mirror.
- ``registry``: a small OCI distribution client that asks a registry for a manifest digest.
- ``chart_images``: the images inside each chart release, as its templates compose them.
- ``bom``: the bill of materials of a stack (images, charts, CRD files) and its sync list.
- ``cli``: ``trainyard bom``, ``trainyard images lock`` and ``trainyard images verify``.

``reference`` and ``lock`` import nothing from ``manifests``: the builders use them to pin
images. ``bom`` reads rendered manifests, like ``review`` does.
"""
