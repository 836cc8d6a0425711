"""Metadata-only stand-ins of distributions, for pip's resolver to treat the base image as if it were here.

Two forms: wheels holding nothing but METADATA (an offline `--find-links` index), and `.dist-info` folders in a
bare virtual environment (an "installed" image that pip resolves against, as `docker build` would).
"""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

from base_image import IMAGE_MARKER_ENVIRONMENT, PackageMetadata
from packaging.requirements import Requirement

EXTRA_IN_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']|["']([^"']+)["']\s*==\s*extra""")
VENV_TIMEOUT_S = 120


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


def dist_info_name(package: PackageMetadata) -> str:
    return f"{package.key.replace('-', '_')}-{package.version}.dist-info"


def metadata_text(package: PackageMetadata) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {package.name}", f"Version: {package.version}"]
    if package.requires_python:
        lines.append(f"Requires-Python: {package.requires_python}")
    lines += [f"Provides-Extra: {extra}" for extra in package.provides_extra]
    lines += [f"Requires-Dist: {requirement}" for requirement in package.requires_dist]
    return "\n".join(lines) + "\n"


def write_wheel(directory: Path, package: PackageMetadata) -> Path:
    """A py3-none-any wheel holding only `package`'s metadata, which is all pip's resolver reads."""
    info = dist_info_name(package)
    files = {
        f"{info}/METADATA": metadata_text(package),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: stand_in\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = directory / f"{info.removesuffix('.dist-info')}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def installed_environment(python: str, directory: Path, packages: list[PackageMetadata]) -> Path:
    """A bare virtual environment of `python` in which `packages` look installed; returns its interpreter."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=VENV_TIMEOUT_S)
    interpreter = directory / "bin" / "python"
    site = subprocess.run(
        [str(interpreter), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=VENV_TIMEOUT_S,
    ).stdout.strip()
    for package in packages:
        info = Path(site) / dist_info_name(package)
        info.mkdir()
        (info / "METADATA").write_text(metadata_text(package))
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text("")
    return interpreter
