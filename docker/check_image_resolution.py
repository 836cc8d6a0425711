"""Check, without Docker, that installing the project on the GPU base image keeps the image's SGLang stack.

pip's resolver runs over what docker/Dockerfile installs (`-c base-image-constraints.txt -r requirements-image.txt`)
on a stand-in of the image made from base-image-snapshot.json (metadata only). The check fails when pip cannot
resolve, or when the result replaces a package the image owns or leaves alone (protobuf, grpcio), except the
documented overrides, which must land on their constrained version.

Offline (the default, run by the tests): `pip install --dry-run --ignore-installed --report ... --no-index
--find-links <stand-in wheels>` over the requirements, cleaner and code-judge, and every package the image owns, so
SGLang's and torch's own requirements are resolved against the project's pins too. The stand-in wheels: the image's
packages from the snapshot, the project's pins from this venv's installed distributions (`make setup` installs
exactly them), cleaner and code-judge from their pyproject.toml; markers are evaluated for the image's Python 3.12
on x86_64 Linux. Nothing is downloaded.

Online (`--python PY312`): the Dockerfile's own command, `pip install --dry-run -c ... -r ...`, in a Python 3.12
environment where the snapshot's packages look installed, resolved against the package index: pip reads wheel
metadata through HTTP range requests (`fast-deps`), so no CUDA wheel is downloaded.

    python docker/check_image_resolution.py [--requirements FILE] [--without-constraints] [--python PY312]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import tomllib
from base_image import (
    CONSTRAINTS,
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
from stand_in import installed_environment, requirements_for_image, write_wheel

REPO = Path(__file__).resolve().parent.parent
IMAGE_REQUIREMENTS = REPO / "docker" / "requirements-image.txt"
PROJECTS = (REPO / "pyproject.toml", REPO / "code-judge" / "pyproject.toml", REPO / "verl-cpu" / "pyproject.toml")
PIP_TIMEOUT_S = 900  # the online check resolves ~130 packages against the index
PIP_PROGRESS = ("Processing ", "Looking in links", "Would install", "Collecting ", "Obtaining ")


class CheckError(Exception):
    """The check cannot run as asked, or pip cannot resolve; the message names the problem."""


@dataclass
class Verdict:
    kept: dict[str, str] = field(default_factory=dict)  # owned or left-alone name -> the image's version
    overridden: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (image's, constrained)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # must-keep name -> (image's, resolved)
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)  # other image package -> (image's, pin)
    added: list[str] = field(default_factory=list)  # resolved packages the image does not have


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
            f"no metadata for {name}=={version}: neither the image snapshot nor this environment has it "
            "(run `make setup`)"
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
    """Every distribution the offline index offers, its requirements evaluated for the image, and the image
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


def run_pip(pip_args: list[str], what: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # the machine's pip config (wheel folders, indexes, caps) must not leak in
    command = [sys.executable, "-m", "pip", *pip_args, "--disable-pip-version-check", "--no-cache-dir"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PIP_TIMEOUT_S)
    if result.returncode != 0:
        # stdout holds the conflict's explanation among one line per distribution pip looked at.
        explanation = [line for line in result.stdout.splitlines() if not line.lstrip().startswith(PIP_PROGRESS)]
        raise CheckError(
            f"pip cannot install {what} on the image:\n" + "\n".join(explanation).strip() + "\n" + result.stderr.strip()
        )


def report_versions(report: Path) -> dict[str, str]:
    entries = json.loads(report.read_text())["install"]
    return {canonicalize_name(entry["metadata"]["name"]): entry["metadata"]["version"] for entry in entries}


def offline_resolution(
    requirements: Path,
    constraint_args: list[str],
    constraints: dict[str, Requirement],
    snapshot: Snapshot,
    report: Path,
) -> dict[str, str]:
    """Name -> version of everything pip installs on an empty Python 3.12 from the stand-in index."""
    packages, dropped = stand_in_packages(snapshot, read_pins(requirements))
    for line in dropped:
        print(f"accepted override: {line}")
    projects = [project_metadata(pyproject) for pyproject in PROJECTS]
    requests = [f"{project.name}=={project.version}" for project in projects] + sorted(constraints)
    with tempfile.TemporaryDirectory(prefix="image-stand-in-") as index:
        for package in packages:
            write_wheel(Path(index), package)
        pip_args = ["install", "--dry-run", "--ignore-installed", "--no-index", "--find-links", index]
        pip_args += ["--python-version", IMAGE_PYTHON, "--only-binary", ":all:", "--report", str(report)]
        run_pip([*pip_args, *constraint_args, "-r", str(requirements), *requests], requirements.name)
    return report_versions(report)


def python_version(python: str) -> str:
    command = [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def online_resolution(
    python: str, requirements: Path, constraint_args: list[str], snapshot: Snapshot, report: Path
) -> dict[str, str]:
    """Name -> version of the image's packages after the Dockerfile's pip command, resolved against the index."""
    if (found := python_version(python)) != IMAGE_PYTHON:
        raise CheckError(f"{python} is Python {found}; the image runs Python {IMAGE_PYTHON}")
    with tempfile.TemporaryDirectory(prefix="image-stand-in-") as venv:
        interpreter = installed_environment(python, Path(venv), list(snapshot.packages.values()))
        pip_args = ["--python", str(interpreter), "install", "--dry-run", "--use-feature=fast-deps"]
        run_pip([*pip_args, "--report", str(report), *constraint_args, "-r", str(requirements)], requirements.name)
    versions = {key: package.version for key, package in snapshot.packages.items()}
    return versions | report_versions(report)


def judge(resolved: dict[str, str], snapshot: Snapshot, constraints: dict[str, Requirement]) -> Verdict:
    verdict = Verdict()
    for key in sorted(set(constraints) | LEFT_ALONE):
        if key not in resolved or key not in snapshot.packages:
            continue
        image_version, version = snapshot.packages[key].version, resolved[key]
        if key in OVERRIDES and version == pinned_version(constraints[key]):
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


def check(args: argparse.Namespace) -> Verdict:
    constraints = read_constraints(args.constraints)
    snapshot = read_snapshot(args.snapshot)
    problems = constraint_problems(constraints, snapshot)
    if problems:
        raise CheckError(f"{args.constraints.name} and {args.snapshot.name} disagree:\n  " + "\n  ".join(problems))
    constraint_args = [] if args.without_constraints else ["-c", str(args.constraints)]
    if args.python:
        resolved = online_resolution(args.python, args.requirements, constraint_args, snapshot, args.report)
    else:
        resolved = offline_resolution(args.requirements, constraint_args, constraints, snapshot, args.report)
    return judge(resolved, snapshot, constraints)


def print_verdict(verdict: Verdict) -> None:
    print("kept at the image's version: " + ", ".join(f"{k} {v}" for k, v in verdict.kept.items()))
    for key, (image_version, version) in verdict.overridden.items():
        print(f"overridden: {key} {image_version} -> {version} ({OVERRIDES[key]})")
    moved = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in verdict.moved.items())
    print(f"moved to the project's pins: {moved or 'none'}")
    print(f"added: {len(verdict.added)} packages the image does not have")
    for key, (image_version, version) in verdict.changed.items():
        print(f"CHANGED: {key} {image_version} -> {version}: the image's {key} would be replaced")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requirements", type=Path, default=IMAGE_REQUIREMENTS, help="exact pins to install")
    parser.add_argument("--constraints", type=Path, default=CONSTRAINTS, help="what the image owns")
    parser.add_argument("--without-constraints", action="store_true", help="run pip without -c (the old Dockerfile)")
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT)
    parser.add_argument(
        "--python", help=f"online: resolve against the index in a stand-in on this Python {IMAGE_PYTHON}"
    )
    parser.add_argument("--report", type=Path, help="keep pip's installation report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        args.report = args.report or Path(scratch) / "report.json"
        try:
            verdict = check(args)
        except CheckError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print_verdict(verdict)
    if verdict.changed:
        changed = ", ".join(verdict.changed)
        print(f"FAILED: installing {args.requirements.name} would replace the image's {changed}", file=sys.stderr)
        return 1
    print(f"OK: {args.requirements.name} installs on the image and keeps its SGLang stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
