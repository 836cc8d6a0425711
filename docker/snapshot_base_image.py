"""Write docker/base-image-snapshot.json: the base image's SGLang stack, resolved by pip from PyPI metadata.

No Docker engine needed. pip resolves what lmsysorg/sglang:v0.5.12 (the base of verlai/verl:sgl0512.latest)
installs, SGLang 0.5.12 with torch 2.11.0, for the image's Python 3.12, from the releases PyPI had at the end of
the day SGLang 0.5.12 was published. It reads each wheel's metadata through HTTP range requests (pip's
`fast-deps`), so no CUDA wheel is downloaded (85 MB in all here, where the PyPI mirror serves no separate
metadata files).
The snapshot stands in for the image in docker/check_image_resolution.py; refresh it when the base image changes.

    python docker/snapshot_base_image.py --python /path/to/python3.12
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from base_image import IMAGE_PYTHON, OVERRIDES, SNAPSHOT, PackageMetadata

LOG = logging.getLogger("snapshot_base_image")

IMAGE = "verlai/verl:sgl0512.latest"
# What lmsysorg/sglang:v0.5.12 installs, with the torch trio verl 0.9.1's sglang extra pairs it with.
IMAGE_REQUIREMENTS = ("sglang==0.5.12", "torch==2.11.0", "torchvision==0.26.0", "torchaudio==2.11.0")
# SGLang 0.5.12 reached PyPI on 2026-05-16: the base image was built from the releases of that day.
UPLOADED_PRIOR_TO = "2026-05-17T00:00:00Z"
# The versions OVERRIDES install instead of the image's (metadata only, read from PyPI as well).
OVERRIDE_REQUIREMENTS = {"transformers": "transformers==5.9.0"}
# verl's Dockerfile builds flash_attn==2.8.3 from source (PyPI has only its sdist, whose build needs CUDA torch).
# Its sdist's PKG-INFO: Requires-Dist torch, einops; Requires-Python >=3.9.
FLASH_ATTN = PackageMetadata("flash-attn", "2.8.3", ("torch", "einops"), ">=3.9")
PIP_TIMEOUT_S = 1800


def pip_resolve(python: str, requirements: list[str], *extra_args: str) -> dict:
    """pip's installation report for `requirements`, resolved for `python`'s environment (nothing installed)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # this machine's pip config (local wheel folders, caps) must not leak in
    command = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--dry-run",
        "--ignore-installed",
        "--only-binary",
        ":all:",
        "--use-feature=fast-deps",
        "--quiet",
        "--report",
        "-",
        *extra_args,
        *requirements,
    ]
    LOG.info("running %s", " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=PIP_TIMEOUT_S)
    if result.returncode != 0:
        raise SystemExit(f"pip could not resolve {requirements}:\n{result.stderr}")
    report = json.loads(result.stdout)
    found = report["environment"]["python_version"]
    if found != IMAGE_PYTHON:
        raise SystemExit(f"{python} is Python {found}; the image runs Python {IMAGE_PYTHON}")
    return report


def packages_of(report: dict) -> list[PackageMetadata]:
    return [PackageMetadata.from_json(entry["metadata"]) for entry in report["install"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help=f"a Python {IMAGE_PYTHON} interpreter (needs no pip)")
    parser.add_argument("--output", type=Path, default=SNAPSHOT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    image = pip_resolve(args.python, list(IMAGE_REQUIREMENTS), "--uploaded-prior-to", UPLOADED_PRIOR_TO)
    packages = [*packages_of(image), FLASH_ATTN]
    overrides = packages_of(pip_resolve(args.python, list(OVERRIDE_REQUIREMENTS.values()), "--no-deps"))
    if sorted(package.key for package in overrides) != sorted(OVERRIDES):
        raise SystemExit(f"override requirements {OVERRIDE_REQUIREMENTS} do not match OVERRIDES {sorted(OVERRIDES)}")
    snapshot = {
        "image": IMAGE,
        "resolved": {
            "requirements": [*IMAGE_REQUIREMENTS, f"{FLASH_ATTN.name}=={FLASH_ATTN.version} (sdist metadata)"],
            "uploaded_prior_to": UPLOADED_PRIOR_TO,
            "python": image["environment"]["python_full_version"],
            "platform": image["environment"]["platform_machine"],
            "pip": image["pip_version"],
        },
        "packages": [package.to_json() for package in sorted(packages, key=lambda p: p.key)],
        "overrides": [package.to_json() for package in sorted(overrides, key=lambda p: p.key)],
    }
    args.output.write_text(json.dumps(snapshot, indent=1) + "\n")
    LOG.info("wrote %d image packages and %d overrides to %s", len(packages), len(overrides), args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
