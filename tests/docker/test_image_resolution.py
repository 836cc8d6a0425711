"""The GPU image keeps verl's SGLang stack: docker/check_image_resolution.py runs pip's resolver over what the
Dockerfile installs on a metadata stand-in of verlai/verl:sgl0512.latest (no Docker engine, no download).

Its online mode (the Dockerfile's pip command against the package index) downloads ~60 MB and takes about a
minute; docs/docker.md shows its output and is not run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
CHECK = DOCKER / "check_image_resolution.py"
sys.path.insert(0, str(DOCKER))

from base_image import (  # noqa: E402
    CONSTRAINTS,
    LEFT_ALONE,
    OVERRIDES,
    PackageMetadata,  # noqa: E402
    image_provided,
    read_constraints,
    read_snapshot,
)
from check_image_resolution import constraint_problems  # noqa: E402
from stand_in import installed_environment, requirements_for_image  # noqa: E402

pytestmark = pytest.mark.slow  # resolves the image's requirements with pip: seconds per test

# What the image must still run after the project is installed: the versions its SGLang 0.5.12 stack has.
IMAGE_STACK = {
    "torch": "2.11.0",
    "torchvision": "0.26.0",
    "torchaudio": "2.11.0",
    "triton": "3.6.0",
    "sglang": "0.5.12",
    "sglang-kernel": "0.4.2.post2",
    "flashinfer-python": "0.6.11.post1",
    "flash-attn": "2.8.3",
    "numpy": "2.3.5",
    "protobuf": "6.33.6",
    "grpcio": "1.80.0",
    "setuptools": "81.0.0",
}


def pins(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {canonicalize_name(name): version for name, version in (line.split("==") for line in lines)}


def run_check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), *args], capture_output=True, text=True, timeout=300)


def test_image_requirements_resolve_on_the_image_and_keep_its_sglang_stack(tmp_path):
    report = tmp_path / "report.json"
    result = run_check("--report", str(report))
    assert result.returncode == 0, result.stdout + result.stderr
    resolved = {
        canonicalize_name(entry["metadata"]["name"]): entry["metadata"]["version"]
        for entry in json.loads(report.read_text())["install"]
    }
    for name, version in IMAGE_STACK.items():
        assert resolved[name] == version, name
    assert resolved["transformers"] == "5.9.0"  # verl's pairing, over SGLang's own 5.6.0
    assert "accepted override: sglang 0.5.12 requires transformers==5.6.0" in result.stdout
    assert resolved["cleaner"] == "0.1.0" and resolved["code-judge"] == "0.1.0"
    for name, version in pins(DOCKER / "requirements-image.txt").items():
        assert resolved[name] == version, f"{name}: the image gets {resolved[name]}, the tested pin is {version}"


def breaking_pin(name: str) -> str:
    """The tested CPU pin of `name` (requirements.txt), added to the image's requirements."""
    return f"{name}=={pins(ROOT / 'requirements.txt')[name]}"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        # torch 2.11.0 needs setuptools<82; pip would otherwise swap in a newer torch
        ("setuptools", "The user requested (constraint) setuptools<82"),
        ("numpy", "The user requested (constraint) numpy<2.4"),  # mistral_common, on Python 3.12
        ("transformers", "The user requested (constraint) transformers==5.9.0"),
        ("protobuf", "grpcio-health-checking 1.80.0 depends on protobuf<7"),
    ],
)
def test_a_cpu_pin_that_breaks_the_image_fails_the_check(tmp_path, name, reason):
    requirements = tmp_path / "requirements-image.txt"
    requirements.write_text((DOCKER / "requirements-image.txt").read_text() + breaking_pin(name) + "\n")
    result = run_check("--requirements", str(requirements))
    assert result.returncode == 1
    assert "pip cannot install requirements-image.txt on the image" in result.stderr
    assert reason in result.stderr


def test_a_pin_that_replaces_a_left_alone_package_fails_the_check(tmp_path):
    requirements = tmp_path / "requirements-image.txt"
    requirements.write_text((DOCKER / "requirements-image.txt").read_text() + breaking_pin("grpcio") + "\n")
    result = run_check("--requirements", str(requirements))
    assert result.returncode == 1
    assert f"CHANGED: grpcio 1.80.0 -> {breaking_pin('grpcio').split('==')[1]}" in result.stdout
    assert "would replace the image's grpcio" in result.stderr


def test_constraints_that_disagree_with_the_snapshot_stop_the_check(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(CONSTRAINTS.read_text().replace("torch==2.11.0", "torch==2.12.0"))
    result = run_check("--constraints", str(constraints))
    assert result.returncode == 1
    assert "torch==2.12.0: the snapshot's image has 2.11.0" in result.stderr


def test_every_constraint_names_its_source_and_matches_the_snapshot():
    lines = [line for line in CONSTRAINTS.read_text().splitlines() if line and not line.startswith("#")]
    for line in lines:
        assert "# [" in line, f"{line!r} does not say where its version comes from"
    constraints = read_constraints()
    assert constraint_problems(constraints, read_snapshot()) == []
    assert set(OVERRIDES) <= set(constraints) and not LEFT_ALONE & set(constraints)


def test_exact_constraints_match_the_images_local_cuda_builds():
    constraints = read_constraints()
    assert constraints["torch"].specifier.contains("2.11.0+cu130")
    assert constraints["sglang-kernel"].specifier.contains("0.4.2.post2+cu130")
    assert not constraints["torch"].specifier.contains("2.14.1")


def test_image_requirements_are_the_tested_pins_without_what_the_image_brings():
    cpu, image = pins(ROOT / "requirements.txt"), pins(DOCKER / "requirements-image.txt")
    provided = image_provided()
    assert image == {name: version for name, version in cpu.items() if name not in provided}
    assert {"numpy", "protobuf", "grpcio", "setuptools", "transformers"} <= set(cpu) - set(image)


@pytest.mark.parametrize(
    ("requirement", "for_image"),
    [
        ('numpy<2.4,>=1.25; python_version <= "3.12"', ["numpy<2.4,>=1.25"]),
        ('numpy>=1.25; python_version > "3.12"', []),
        ('decord2; sys_platform == "linux" and platform_machine == "aarch64"', []),
        ("torch==2.11.0", ["torch==2.11.0"]),
        ('pytest; extra == "test"', ['pytest; extra == "test"']),
        ('vsa==0.0.4; platform_machine != "aarch64" and extra == "diffusion"', ['vsa==0.0.4; extra == "diffusion"']),
        ('st-attn; platform_machine == "aarch64" and extra == "diffusion"', []),
    ],
)
def test_markers_are_evaluated_for_the_images_python_312_on_x86_64(requirement, for_image):
    assert requirements_for_image((requirement,)) == for_image


def test_the_old_dockerfile_command_without_constraints_would_swap_torch():
    result = run_check("--requirements", str(ROOT / "requirements.txt"), "--without-constraints")
    assert result.returncode == 1
    # pip looks for another torch (on the index it finds 2.15 and takes it); the stand-in offers none
    assert "pip is looking at multiple versions of torch" in result.stderr
    assert "torch 2.11.0 depends on setuptools<82" in result.stderr


def test_the_installed_stand_in_is_what_pip_sees_in_the_environment(tmp_path):
    packages = [
        PackageMetadata("torch", "2.11.0", ("setuptools<82", 'triton==3.6.0; platform_system == "Linux"')),
        PackageMetadata("setuptools", "84.2.1"),
    ]
    interpreter = installed_environment(sys.executable, tmp_path / "image", packages)
    env = {"PIP_CONFIG_FILE": os.devnull, "PATH": os.environ["PATH"]}
    pip = [sys.executable, "-m", "pip", "--python", str(interpreter), "--disable-pip-version-check"]
    listed = subprocess.run([*pip, "list", "--format=json"], capture_output=True, text=True, env=env, timeout=120)
    assert {(p["name"], p["version"]) for p in json.loads(listed.stdout)} == {
        ("torch", "2.11.0"),
        ("setuptools", "84.2.1"),
    }
    checked = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env, timeout=120)
    assert "torch 2.11.0 has requirement setuptools<82, but you have setuptools 84.2.1." in checked.stdout
    assert "torch 2.11.0 requires triton, which is not installed." in checked.stdout


def test_the_online_check_needs_the_images_python(tmp_path):
    python = tmp_path / "python3.11"
    python.write_text("#!/bin/sh\necho 3.11\n")
    python.chmod(0o755)
    result = run_check("--python", str(python))
    assert result.returncode == 1
    assert f"{python} is Python 3.11; the image runs Python 3.12" in result.stderr
