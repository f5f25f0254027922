"""The factory's Python 3 base: Debian bookworm's CPython 3.11 laid out as distroless ``python3-debian12``.

Trainyard's own Python images (the object store's provisioner first; MLflow's server and the lab's torch image are to
follow on the same base) are built here, where no registry can be pulled from and nothing runs a container build. The
base is what ``gcr.io/distroless/python3-debian12`` is, from the same Debian packages, pinned by version and sha256
(``debian.py``), read in GoogleContainerTools/distroless@11eeda5:

- ``static:nonroot``'s files: the controller images' base layer (``base_layer.py``: passwd, group, /tmp, /home/nonroot,
  CA certificates, nsswitch.conf, time zones), the same blob;
- ``base`` + ``cc`` (base/config.bzl ``BASE_PACKAGES["debian12"]``: libc6, libssl3; cc/config.bzl
  ``CC_PACKAGES["debian12"]``: libgomp1, libstdc++6, libgcc-s1, gcc-12-base): glibc and the C/C++ runtime that C
  extensions (and torch) link against; one layer;
- python3/python.bzl ``python3_image``: the 24 packages of CPython 3.11 and the libraries its modules load (bz2, lzma,
  sqlite3, ssl through libssl3, ctypes through libffi, readline, uuid, crypt, nis/gssapi...), the links
  ``/usr/bin/python`` and ``/usr/bin/python3`` -> ``python3.11``, and ``LANG=C.UTF-8``; one layer, with the empty
  ``/usr/local/lib/python3.11/dist-packages`` where wheels go (``wheels.py``; Debian's ``site.py`` puts it on
  ``sys.path``).

No maintainer script runs (as in distroless): no ``ld.so.cache`` (the loader's built-in paths include Debian's
multiarch directories), no byte code (``py3compile`` is a postinst step): modules compile in memory at import.
Not there, as in distroless: ``libmpdec3`` (``decimal`` falls back to ``_pydecimal``), ``media-types``
(``mimetypes`` uses its built-in table), ``netbase``, a shell.

An image on this base adds its own layers (wheels, a program) and its own config: ``python_config`` gives the base's
environment.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from trainyard.rehearsal import base_layer
from trainyard.rehearsal.debian import DebianPin, package_layer, pins_key
from trainyard.rehearsal.image_cache import layer_key
from trainyard.rehearsal.images import Entry, ImageError, Layer
from trainyard.rehearsal.wheels import Target, lock

PYTHON = "3.11"
INTERPRETER = f"/usr/bin/python{PYTHON}"
# The libc of the base (libc6 2.36): wheels up to manylinux_2_36 run on it.
WHEEL_TARGET = Target(PYTHON, INTERPRETER, (2, 36))
ENV = (*base_layer.ENV, "LANG=C.UTF-8")

# distroless base/config.bzl + cc/config.bzl (debian12). Versions and sha256: `python -m trainyard.rehearsal.debian NAME...`
# (apt-cache policy/show on bookworm, bookworm-updates and bookworm-security), 2026-12-05.
RUNTIME_PINS = (
    DebianPin("libc6", "2.36-9+deb12u14", "ba4f88f73dbc3ae9055f3c20f4523bfdbaf1ad13ff95e258924f77d20b4fbedf"),
    DebianPin("libssl3", "3.0.22-1~deb12u2", "cb4784740daa9b3b0eaea2b444bbefa686794afbbf3d678d238c1fd9875f2efd"),
    DebianPin("gcc-12-base", "12.2.0-14+deb12u1", "1896a2aacf4ad681ff5eacc24a5b0ca4d5d9c9b9c9e4b6de5197bc1e116ea619"),
    DebianPin("libgcc-s1", "12.2.0-14+deb12u1", "3016e62cb4b7cd8038822870601f5ed131befe942774d0f745622cc77d8a88f7"),
    DebianPin("libgomp1", "12.2.0-14+deb12u1", "48fec46bda7f5b1638b9e959889bfbc20491247d402d120bb152687eb48143d7"),
    DebianPin("libstdc++6", "12.2.0-14+deb12u1", "5cd3171216d4ab0fc911cfe9c35509bf2dd8f47761c43b7f6a4296701551a24d"),
)
# distroless python3/python.bzl python3_image (debian12), in its order.
PYTHON_PINS = (
    DebianPin("libbz2-1.0", "1.0.8-5+b1", "54149da3f44b22d523b26b692033b84503d822cc5122fed606ea69cc83ca5aeb"),
    DebianPin("libdb5.3", "5.3.28+dfsg2-1", "7dc5127b8dd0da80e992ba594954c005ae4359d839a24eb65d0d8129b5235c84"),
    DebianPin("libexpat1", "2.5.0-1+deb12u5", "cae5ded666d8573dd33060bc66fbac21eea8b101a6b56e2af8bd590fcfa65d79"),
    DebianPin("liblzma5", "5.4.1-1+deb12u2", "3d8c29c8c21ec6007635e1b2591edf98b771c9572a085968f47452b33040f384"),
    DebianPin("libsqlite3-0", "3.40.1-2+deb12u2", "a8d78b40e9b4e422224aeebfe0e4dfc243f6acf3532490b0c05480d4283d41e2"),
    DebianPin("libuuid1", "2.38.1-5+deb12u3", "5fff398321da62d28a842bcbabd193d72ae21724962c029dc32b1dc6b2deaeaf"),
    DebianPin("libncursesw6", "6.4-4", "98fa7a53dc565a38b65fb70422ad08001bf5361d8fbc74255280c329996a6bec"),
    DebianPin("libtinfo6", "6.4-4", "072d908f38f51090ca28ca5afa3b46b2957dc61fe35094c0b851426859a49a51"),
    DebianPin("python3-distutils", "3.11.2-3", "a620b555f301860a08e30534c7e6f7d79818e5e1977bfec39a612e7003074318"),
    DebianPin("zlib1g", "1:1.2.13.dfsg-1+deb12u1", "ad9f1ea0537a32c9eaecc619563a9db596a5dee33afce8393b1083f22d301e1d"),
    DebianPin("libcom-err2", "1.47.0-2+b2", "a2bac7015e78fbc0c504df3e441f3a22292f1d2d77f9ccda760057f3690e22f2"),
    DebianPin("libcrypt1", "1:4.4.33-2", "f5f60a5cdfd4e4eaa9438ade5078a57741a7a78d659fcb0c701204f523e8bd29"),
    DebianPin("libgssapi-krb5-2", "1.20.1-2+deb12u5", "d8b87aea91b956b416c01a28c44ff6228315ae3b73de40acddac3dc5043607d2"),
    DebianPin("libk5crypto3", "1.20.1-2+deb12u5", "7b6e47d15c5c9cdcd456137533d8308aeba608a54cec73b28bd59bfc4b54cf06"),
    DebianPin("libkeyutils1", "1.6.3-2", "cfac89e6a7a54ff3c6a4f843310e25efeddaa771baeae470bd98bd588c373563"),
    DebianPin("libkrb5-3", "1.20.1-2+deb12u5", "c90801be09701af221b54dd502a59cb378b7284ff31e480738baca317d2f7653"),
    DebianPin("libkrb5support0", "1.20.1-2+deb12u5", "8b9c05f2d8d461a10d657b118f572af5bf8fd6c8f93dcef81e852c5ab0f428ab"),
    DebianPin("libnsl2", "1.3.0-2", "c0d83437fdb016cb289436f49f28a36be44b3e8f1f2498c7e3a095f709c0d6f8"),
    DebianPin("libreadline8", "8.2-1.3", "e02ebbd3701cf468dbf98d6d917fbe0325e881f07fe8b316150c8d2a64486e66"),
    DebianPin("libtirpc3", "1.3.3+ds-1", "2a46d5a5e9486da11ffeff5740931740d6deae4f92cd6098df060dc5dff1e1c7"),
    DebianPin("libffi8", "3.4.4-1", "6d9f6c25c30efccce6d4bceaa48ea86c329a3432abb360a141f76ac223a4c34a"),
    DebianPin("libpython3.11-minimal", "3.11.2-6+deb12u9", "69f41cfa3f4ba17284e538f843069d7529c53c207d2ae17a5b02785944870e33"),
    DebianPin("libpython3.11-stdlib", "3.11.2-6+deb12u9", "10f13e000ee757f5f2d2d3569f9e30546214a0c850acd78695feae373bfa3e53"),
    DebianPin("python3.11-minimal", "3.11.2-6+deb12u9", "b5f855ab922dfcd5d1a3223b2118c3dae13ffc7751b0cd5dc24740386323a33a"),
)


def _aliases() -> tuple[Entry, ...]:
    """distroless python3/python.bzl ``python_alias``, and the directory the wheels are installed into."""
    site = WHEEL_TARGET.site_packages
    parents = [str(p) for p in reversed(Path(site).parents) if str(p) != "."]
    return (Entry("usr/bin/python", link=f"python{PYTHON}", mode=0o777),
            Entry("usr/bin/python3", link=f"python{PYTHON}", mode=0o777),
            *(Entry(d, mode=0o755) for d in [*parents, site]))


def layers(root: Path = Path("/"), cache: Path | None = None) -> list[Layer]:
    """The base's layers, bottom first (``root``: where the shared base layer's installed packages are read)."""
    return [base_layer.base_layer(root),
            package_layer(RUNTIME_PINS, "distroless base + cc (debian12)", cache),
            package_layer(PYTHON_PINS, f"distroless python3 (debian12): CPython {PYTHON}", cache, extra=_aliases())]


def key_parts(root: Path = Path("/")) -> list[object]:
    """What the base's layers are made of, for an image's cache key (the pins stand for the packages' bytes)."""
    return [layer_key(base_layer.base_layer(root)), {"debian": pins_key(RUNTIME_PINS)},
            {"debian": pins_key(PYTHON_PINS), "extra": layer_key(Layer(_aliases(), ""))}]


def python_config(env: Sequence[str] = (), **settings: object) -> dict[str, object]:
    """An image config on this base: the base's environment and ``env``, then the image's own settings."""
    return {"Env": [*ENV, *env], **settings}


def main(argv: Sequence[str]) -> int:
    """``python -m trainyard.rehearsal.python_base lock REQUIREMENTS LOCK``: the wheel lock of an image on this base."""
    if len(argv) != 3 or argv[0] != "lock":
        print("usage: python -m trainyard.rehearsal.python_base lock REQUIREMENTS LOCK", file=sys.stderr)
        return 2
    try:
        Path(argv[2]).write_text(lock(Path(argv[1]), WHEEL_TARGET), encoding="utf-8")
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
