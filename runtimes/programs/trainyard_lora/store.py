"""Where the program reads and writes, and the digests it checks and records.

A ``Store`` is a directory or an S3 prefix, each object written whole (S3 PUT; a file by temp + rename).
``directory_digest`` is a base model's content digest; ``program_digest`` the program's own code (every file
of it, as ``sha256sum lora_peft.py trainyard_lora/*.py | sha256sum`` lists them in the programs directory).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from trainyard_lora.settings import LabError


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise LabError(f"{uri!r} is not an s3://bucket/key URI")
    return bucket, key


def s3_client() -> Any:
    import boto3  # AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / ... from the object-store Secret (envFrom)

    return boto3.client("s3")


class Store:
    """Objects under a root: ``put`` replaces an object whole, so a reader sees the old or the new, never half."""

    def __init__(self, uri: str) -> None:
        self.uri = uri if uri.endswith("/") else uri + "/"
        if uri.startswith("s3://"):
            self.bucket, self.prefix = split_s3(self.uri)
            self.s3 = s3_client()
        else:
            self.root = Path(uri)
            self.root.mkdir(parents=True, exist_ok=True)

    def put(self, key: str, data: bytes) -> None:
        if hasattr(self, "s3"):
            self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
            return
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)

    def get(self, key: str) -> bytes:
        if hasattr(self, "s3"):
            return bytes(self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read())
        return (self.root / key).read_bytes()

    def list_keys(self) -> list[str]:
        if hasattr(self, "s3"):
            out: list[str] = []
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                out += [o["Key"][len(self.prefix):] for o in page.get("Contents", [])]
            return out
        return [str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()]

    def delete(self, keys: list[str]) -> None:
        if hasattr(self, "s3"):
            for start in range(0, len(keys), 1000):
                chunk = [{"Key": self.prefix + k} for k in keys[start:start + 1000]]
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})
            return
        for key in keys:
            (self.root / key).unlink(missing_ok=True)
            if not any((self.root / key).parent.iterdir()):
                (self.root / key).parent.rmdir()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def directory_digest(root: Path) -> str:
    """sha256 over ``<sha256>  <relative path>`` lines of every file, sorted: the content identity of a model dir."""
    lines = [f"{sha256_hex(p.read_bytes())}  {p.relative_to(root)}"
             for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")]
    if not lines:
        raise LabError(f"{root}: empty (did the model initializer run?)")
    return "sha256:" + sha256_hex("\n".join(lines).encode())


PROGRAMS = Path(__file__).resolve().parents[1]  # lora_peft.py and this package (/opt/trainyard/programs in the image)


def program_files(root: Path = PROGRAMS) -> list[Path]:
    """The program's code: the entry point and every module of this package, in the order ``ls`` sorts them."""
    return [root / "lora_peft.py", *sorted((root / "trainyard_lora").glob("*.py"))]


def program_digest(root: Path = PROGRAMS) -> str:
    """sha256 of the program's ``sha256sum`` listing: in the programs directory, what
    ``sha256sum lora_peft.py trainyard_lora/*.py | sha256sum`` prints (LC_ALL=C)."""
    listing = "".join(f"{sha256_hex(p.read_bytes())}  {p.relative_to(root).as_posix()}\n" for p in program_files(root))
    return sha256_hex(listing.encode())
