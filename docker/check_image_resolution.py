"""Check, without Docker, that installing the project on the GPU base image keeps the image's SGLang stack.

pip's own resolver runs over what docker/Dockerfile installs (`-c base-image-constraints.txt -r
requirements-image.txt`, plus cleaner and code-judge), together with every package the image owns, so the
dependencies of SGLang, torch and the rest are resolved against the project's pins too:

    pip install --dry-run --ignore-installed --report ... --no-index --find-links <stand-in wheels>

The stand-in wheels carry only metadata (no code): the image's packages from base-image-snapshot.json, the
project's pins from this venv's installed distributions (`make setup` installs exactly them), cleaner and
code-judge from their pyproject.toml. Markers are evaluated for the image's Python 3.12 on x86_64 Linux. Nothing
is downloaded. The check fails when pip cannot resolve, or when the resolution changes a package the image owns
(other than the documented overrides) or leaves alone (protobuf, grpcio).

    python docker/check_image_resolution.py [--requirements FILE] [--report FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import tomllib
from base_image import (
    CONSTRAINTS,
    IMAGE_MARKER_ENVIRONMENT,
    IMAGE_PYTHON,
    LEFT_ALONE,
    OVERRIDES,
    SNAPSHOT,
    PackageMetadata,
    Snapshot,
    pinned_version,
    read_constraints,
    read_snapshot,
)
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
IMAGE_REQUIREMENTS = REPO / "docker" / "requirements-image.txt"
PROJECTS = (REPO / "pyproject.toml", REPO / "code-judge" / "pyproject.toml")
PIP_TIMEOUT_S = 300
PIP_PROGRESS = ("Processing ", "Looking in links", "Would install")
EXTRA_IN_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*extra""")


class CheckError(Exception):
    """The check cannot run as asked (bad input, missing metadata); the message names the problem."""


@dataclass
class Verdict:
    kept: dict[str, str] = field(default_factory=dict)  # owned or left-alone name -> the image's version
    overridden: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (image's, installed)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # must-keep name -> (image's, resolved)
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)  # other image package -> (image's, pin)
    added: list[str] = field(default_factory=list)  # resolved packages the image does not have


def requirements_for_image(requires_dist: tuple[str, ...]) -> list[str]:
    """Requires-Dist entries with their environment markers evaluated for the image; `extra == ...` markers stay.

    A requirement whose marker names extras is kept once per extra for which the rest of its marker holds."""
    kept = []
    for text in requires_dist:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None:
            kept.append(text)
            continue
        requirement.marker = None
        extras = sorted({a or b for a, b in EXTRA_IN_MARKER.findall(str(marker))})
        if not extras:
            if marker.evaluate({**IMAGE_MARKER_ENVIRONMENT, "extra": ""}):
                kept.append(str(requirement))
            continue
        for extra in extras:
            if marker.evaluate({**IMAGE_MARKER_ENVIRONMENT, "extra": extra}):
                kept.append(f'{requirement}; extra == "{extra}"')
    return kept


def write_stand_in_wheel(directory: Path, package: PackageMetadata) -> Path:
    """A py3-none-any wheel holding only `package`'s metadata, which is all pip's resolver reads."""
    stem = f"{package.key.replace('-', '_')}-{package.version}"
    lines = ["Metadata-Version: 2.1", f"Name: {package.name}", f"Version: {package.version}"]
    if package.requires_python:
        lines.append(f"Requires-Python: {package.requires_python}")
    lines += [f"Provides-Extra: {extra}" for extra in package.provides_extra]
    lines += [f"Requires-Dist: {requirement}" for requirement in package.requires_dist]
    files = {
        f"{stem}.dist-info/METADATA": "\n".join(lines) + "\n",
        f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: check_image_resolution\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{stem}.dist-info/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{stem}.dist-info/RECORD,,\n"
    path = directory / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def read_pins(path: Path) -> dict[str, str]:
    """Canonical name -> version of a requirements file made of `name==version` lines."""
    pins = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        version = pinned_version(requirement)
        if version is None or requirement.marker or requirement.extras:
            raise CheckError(f"{path}:{number}: {line!r} is not an exact `name==version` pin")
        pins[canonicalize_name(requirement.name)] = version
    return pins


def installed_metadata(name: str, version: str) -> PackageMetadata:
    try:
        dist = distribution(name)
    except PackageNotFoundError as exc:
        raise CheckError(
            f"no metadata for {name}=={version}: neither the image snapshot nor this environment "
            "has it (run `make setup`)"
        ) from exc
    if dist.version != version:
        raise CheckError(
            f"no metadata for {name}=={version}: this environment has {dist.version} "
            "(run `make setup`, or docker/freeze_requirements.py after a dependency change)"
        )
    return PackageMetadata(
        name=dist.metadata["Name"],
        version=dist.version,
        requires_dist=tuple(dist.requires or ()),
        requires_python=dist.metadata["Requires-Python"],
        provides_extra=tuple(dist.metadata.get_all("Provides-Extra") or ()),
    )


def project_metadata(pyproject: Path) -> PackageMetadata:
    project = tomllib.loads(pyproject.read_text())["project"]
    return PackageMetadata(
        project["name"], project["version"], tuple(project["dependencies"]), project.get("requires-python")
    )


def constraint_problems(constraints: dict[str, Requirement], snapshot: Snapshot) -> list[str]:
    """Where the constraints file and the snapshot disagree about the image (each would make the check moot)."""
    problems = []
    for key, requirement in constraints.items():
        if key in OVERRIDES:
            override = snapshot.overrides.get(key)
            if override is None or override.version != pinned_version(requirement):
                problems.append(
                    f"{requirement} overrides the image, but the snapshot's override metadata is "
                    f"for {override.version if override else 'nothing'}"
                )
        elif key not in snapshot.packages:
            problems.append(f"{requirement}: the snapshot has no {requirement.name}")
        elif not requirement.specifier.contains(snapshot.packages[key].version, prereleases=True):
            problems.append(f"{requirement}: the snapshot's image has {snapshot.packages[key].version}")
    return problems


def stand_in_packages(snapshot: Snapshot, pins: dict[str, str]) -> tuple[list[PackageMetadata], list[str]]:
    """Every distribution the stand-in index offers, its requirements evaluated for the image, and the image
    requirements dropped for the overrides."""
    packages = {(key, package.version): package for key, package in snapshot.packages.items()}
    packages.update({(key, package.version): package for key, package in snapshot.overrides.items()})
    for key, version in pins.items():
        if (key, version) not in packages:
            packages[(key, version)] = installed_metadata(key, version)
    for pyproject in PROJECTS:
        project = project_metadata(pyproject)
        packages[(project.key, project.version)] = project
    # An image package that needs another version of an overridden package gets the override anyway: that
    # requirement is dropped from its stand-in and reported. (One behind an extra stays: nothing asks for it.)
    dropped = []
    result = []
    for package in packages.values():
        requires = []
        for text in requirements_for_image(package.requires_dist):
            requirement = Requirement(text)
            override = snapshot.overrides.get(canonicalize_name(requirement.name))
            if (
                package.key in snapshot.packages
                and override is not None
                and requirement.marker is None
                and not requirement.specifier.contains(override.version, prereleases=True)
            ):
                dropped.append(f"{package.name} {package.version} requires {text}")
                continue
            requires.append(text)
        result.append(
            PackageMetadata(
                package.name, package.version, tuple(requires), package.requires_python, package.provides_extra
            )
        )
    return result, sorted(set(dropped))


def run_pip(index: Path, requirements: Path, constraints: Path, requests: list[str], report: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the machine's pip config (wheel folders, indexes, caps) must not leak in
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-index",
        "--find-links",
        str(index),
        "--python-version",
        IMAGE_PYTHON,
        "--only-binary",
        ":all:",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--report",
        str(report),
        "-c",
        str(constraints),
        "-r",
        str(requirements),
        *requests,
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PIP_TIMEOUT_S)
    if result.returncode != 0:
        # stdout holds the conflict's explanation among one line per stand-in wheel pip looked at.
        explanation = [line for line in result.stdout.splitlines() if not line.startswith(PIP_PROGRESS)]
        raise CheckError(
            f"pip cannot install {requirements.name} on the image:\n"
            + "\n".join(explanation).strip()
            + "\n"
            + result.stderr.strip()
        )


def judge(report: dict, snapshot: Snapshot, constraints: dict[str, Requirement]) -> Verdict:
    resolved = {
        canonicalize_name(entry["metadata"]["name"]): entry["metadata"]["version"] for entry in report["install"]
    }
    verdict = Verdict()
    for key in sorted(set(constraints) | LEFT_ALONE):
        if key not in resolved or key not in snapshot.packages:
            continue
        image_version, version = snapshot.packages[key].version, resolved[key]
        if key in OVERRIDES:
            verdict.overridden[key] = (image_version, version)
        elif version == image_version:
            verdict.kept[key] = version
        else:
            verdict.changed[key] = (image_version, version)
    for key, version in sorted(resolved.items()):
        if key in verdict.kept or key in verdict.overridden or key in verdict.changed:
            continue
        if key not in snapshot.packages:
            verdict.added.append(f"{key}=={version}")
        elif snapshot.packages[key].version != version:
            verdict.moved[key] = (snapshot.packages[key].version, version)
    return verdict


def check(requirements: Path, constraints_path: Path, snapshot_path: Path, report_path: Path) -> Verdict:
    constraints = read_constraints(constraints_path)
    snapshot = read_snapshot(snapshot_path)
    problems = constraint_problems(constraints, snapshot)
    if problems:
        raise CheckError(f"{constraints_path.name} and {snapshot_path.name} disagree:\n  " + "\n  ".join(problems))
    packages, dropped = stand_in_packages(snapshot, read_pins(requirements))
    for line in dropped:
        print(f"accepted override: {line}")
    projects = [project_metadata(pyproject) for pyproject in PROJECTS]
    requests = [f"{project.name}=={project.version}" for project in projects] + sorted(constraints)
    with tempfile.TemporaryDirectory(prefix="image-stand-in-") as index:
        for package in packages:
            write_stand_in_wheel(Path(index), package)
        run_pip(Path(index), requirements, constraints_path, requests, report_path)
    return judge(json.loads(report_path.read_text()), snapshot, constraints)


def print_verdict(verdict: Verdict) -> None:
    print("kept at the image's version: " + ", ".join(f"{k} {v}" for k, v in verdict.kept.items()))
    for key, (image_version, version) in verdict.overridden.items():
        print(f"overridden: {key} {image_version} -> {version} ({OVERRIDES[key]})")
    print(
        "moved to the project's pins: "
        + (", ".join(f"{k} {a} -> {b}" for k, (a, b) in verdict.moved.items()) or "none")
    )
    print(f"added: {len(verdict.added)} packages the image does not have")
    for key, (image_version, version) in verdict.changed.items():
        print(f"CHANGED: {key} {image_version} -> {version}: the image's {key} would be replaced")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requirements", type=Path, default=IMAGE_REQUIREMENTS, help="exact pins to install")
    parser.add_argument("--constraints", type=Path, default=CONSTRAINTS)
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument("--report", type=Path, help="keep pip's installation report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        report = args.report or Path(scratch) / "report.json"
        try:
            verdict = check(args.requirements, args.constraints, args.snapshot, report)
        except CheckError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print_verdict(verdict)
    if verdict.changed:
        print(
            f"FAILED: installing {args.requirements.name} would change the image's " + ", ".join(verdict.changed),
            file=sys.stderr,
        )
        return 1
    print(f"OK: {args.requirements.name} installs on the image and keeps its SGLang stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
