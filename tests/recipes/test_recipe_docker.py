"""docker/: what the image copies exists, its pins agree with requirements.txt, and the entrypoint works.

That the image's requirements resolve on the base image is tests/docker/test_image_resolution.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from code_judge.local import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def requirements() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name] = version
    return pins


def dockerfile_instructions(keyword: str) -> list[list[str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    return [line.split()[1:] for line in text.splitlines() if line.startswith(keyword + " ")]


def test_every_copied_path_exists_and_passes_the_context_filter():
    copies = dockerfile_instructions("COPY")
    assert copies
    ignore = (ROOT / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
    for *sources, _target in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: missing"
            assert f"!{source}" in ignore, f"COPY {source}: excluded by Dockerfile.dockerignore"


def test_requirements_are_exact_pins_without_torch():
    pins = requirements()
    assert "torch" not in pins and pins["verl"] == "0.9.1"
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version) for version in pins.values())


def test_project_pins_agree_with_requirements():
    import tomllib

    pins = requirements()
    pyprojects = [ROOT / "pyproject.toml", ROOT / "code-judge" / "pyproject.toml", ROOT / "verl-cpu" / "pyproject.toml"]
    # The repository's own packages are installed from the checkout (`-e`), not from a pin.
    local = {tomllib.loads(path.read_text())["project"]["name"].lower() for path in pyprojects}
    for pyproject in pyprojects:
        for text in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
            requirement = Requirement(text)
            name = requirement.name.lower()
            if name == "torch" or name in local:
                continue
            assert name in pins, f"{pyproject.name}: {name} missing from requirements.txt"
            assert requirement.specifier.contains(pins[name], prereleases=True), f"{text} vs {name}=={pins[name]}"


def test_requirements_txt_matches_this_venv():
    result = subprocess.run(
        [sys.executable, str(ROOT / "docker" / "freeze_requirements.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


def test_image_installs_its_requirements_under_the_base_image_constraints_then_the_project_without_deps():
    runs = " ".join(" ".join(args) for args in dockerfile_instructions("RUN"))
    assert "pip install -c docker/base-image-constraints.txt -r docker/requirements-image.txt" in runs
    assert "pip install --no-deps -e . -e ./code-judge" in runs
    # The CPU files pin torch 2.13.0 and the tested numpy/protobuf/setuptools, which would break the image.
    assert "torch" not in runs and "-r requirements.txt" not in runs and "-c constraints.txt" not in runs
    for package in ("redis-server", "bubblewrap", "python3-numpy", "python3-sympy", "curl"):
        assert package in runs
    [[base]] = [args for args in dockerfile_instructions("ARG") if args[0].startswith("BASE_IMAGE=")]
    assert base == "BASE_IMAGE=verlai/verl:sgl0512.latest"


@pytest.mark.slow  # runs the entrypoint script with a judge
def test_entrypoint_starts_the_judge_before_the_command(tmp_path):
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if k != "REDIS_URI"},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "START_JUDGE": "1",
        "JUDGE_HOST": "127.0.0.1",
        "JUDGE_PORT": str(port),
        "JUDGE_LOG": str(tmp_path / "judge.log"),
    }
    # The command checks the judge, then stops it (the entrypoint exports its pid) and waits for it to exit.
    # The judge is a child this shell never started (the entrypoint exec'd into it), so the shell may leave it a
    # zombie, which `kill -0` still finds: wait until the process is gone or a zombie.
    command = (
        f'curl -fsS http://127.0.0.1:{port}/ping; echo; kill "$CLEANER_JUDGE_PID"; '
        'while ps -o stat= -p "$CLEANER_JUDGE_PID" | grep -qv Z; do sleep 0.2; done; echo stopped'
    )
    result = subprocess.run(
        ["bash", str(ENTRYPOINT), "bash", "-c", command], env=env, capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr + (tmp_path / "judge.log").read_text()
    assert result.stdout.split() == ['"pong"', "stopped"]
    assert f"code-judge is up on port {port}" in result.stderr


def test_entrypoint_reports_a_judge_that_dies(tmp_path):
    env = {
        **os.environ,
        "PATH": f"{tmp_path}:{os.environ['PATH']}",
        "START_JUDGE": "1",
        "JUDGE_LOG": str(tmp_path / "log"),
    }
    fake = tmp_path / "code-judge"
    fake.write_text("#!/bin/sh\necho 'cannot bind port' >&2\nexit 3\n")
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(ENTRYPOINT), "true"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "code-judge exited during start-up" in result.stderr and "cannot bind port" in result.stderr
