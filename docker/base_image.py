"""What the GPU base image (verlai/verl:sgl0512.latest) holds, as docker/'s scripts read it.

`base-image-constraints.txt` pins the packages the image owns (its SGLang/torch stack), `pip install -c` makes a
build fail instead of replacing one of them. `base-image-snapshot.json` (docker/snapshot_base_image.py) lists the
image's SGLang stack with each package's dependency metadata, so its resolution can be checked without the image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKER = Path(__file__).resolve().parent
CONSTRAINTS = DOCKER / "base-image-constraints.txt"
SNAPSHOT = DOCKER / "base-image-snapshot.json"

# Pinned by no file of ours: the image's versions stay because nothing we install asks for others. SGLang's gRPC
# health/reflection servicer (grpcio-health-checking 1.80.0) needs protobuf<7, which the tested CPU pin (7.x) breaks.
LEFT_ALONE = frozenset({"protobuf", "grpcio", "grpcio-health-checking", "grpcio-reflection"})

# Owned packages the image runs at another version than its SGLang asks for, on purpose (name -> why).
OVERRIDES = {
    "transformers": "sglang 0.5.12 pins transformers==5.6.0, which verl 0.9.1 excludes (!=5.6.0); "
    "verl 0.9.1's own sglang extra pairs SGLang 0.5.12 with transformers==5.9.0",
}

# The image's interpreter: Python 3.12 (Ubuntu 24.04's 3.12.3) on x86_64 Linux. Dependency markers are evaluated
# for it, whatever Python runs the check.
IMAGE_PYTHON = "3.12"
IMAGE_MARKER_ENVIRONMENT = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.12.3",
    "python_version": IMAGE_PYTHON,
    "sys_platform": "linux",
}


@dataclass(frozen=True)
class PackageMetadata:
    """The parts of a distribution's core metadata that pip's resolver reads."""

    name: str
    version: str
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None
    provides_extra: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @classmethod
    def from_json(cls, data: dict) -> PackageMetadata:
        return cls(
            name=data["name"],
            version=data["version"],
            requires_dist=tuple(data.get("requires_dist") or ()),
            requires_python=data.get("requires_python"),
            provides_extra=tuple(data.get("provides_extra") or ()),
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "requires_python": self.requires_python,
            "requires_dist": list(self.requires_dist),
            "provides_extra": list(self.provides_extra),
        }


@dataclass(frozen=True)
class Snapshot:
    """The image's packages (one version each) and the metadata of the versions OVERRIDES install instead."""

    packages: dict[str, PackageMetadata]
    overrides: dict[str, PackageMetadata]


def read_constraints(path: Path = CONSTRAINTS) -> dict[str, Requirement]:
    """Canonical name -> requirement for every line of a pip constraints file (comments allowed)."""
    constraints: dict[str, Requirement] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        key = canonicalize_name(requirement.name)
        if key in constraints:
            raise ValueError(f"{path}:{number}: {requirement.name} is constrained twice")
        constraints[key] = requirement
    return constraints


def pinned_version(requirement: Requirement) -> str | None:
    """The version of an exact `name==V` requirement, None for a range."""
    specifiers = list(requirement.specifier)
    if len(specifiers) == 1 and specifiers[0].operator == "==" and "*" not in specifiers[0].version:
        return specifiers[0].version
    return None


def image_provided(path: Path = CONSTRAINTS) -> frozenset[str]:
    """Names the image brings and the project's image requirements must leave out."""
    return frozenset(read_constraints(path)) | LEFT_ALONE


def read_snapshot(path: Path = SNAPSHOT) -> Snapshot:
    data = json.loads(path.read_text())

    def by_name(entries: list[dict]) -> dict[str, PackageMetadata]:
        packages = [PackageMetadata.from_json(entry) for entry in entries]
        return {package.key: package for package in packages}

    return Snapshot(packages=by_name(data["packages"]), overrides=by_name(data["overrides"]))
