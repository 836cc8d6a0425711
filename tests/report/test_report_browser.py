"""The report in a real headless Chromium: it renders, every plot lays out with a real size, a screenshot is taken."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from report_records import make_record

from cleaner.report.page import render_report

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
# Appended to a copy of the report only: measures what the browser actually laid out.
PROBE = """<script>
const charts = [...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  return {id: svg.id, width: box.width, height: box.height,
          bars: [...svg.querySelectorAll('rect.bar')].filter(r => r.getBBox().height > 0).length};
});
const probe = document.createElement('pre');
probe.id = 'probe';
probe.textContent = JSON.stringify({charts, trajectories: document.querySelectorAll('details.traj').length});
document.body.appendChild(probe);
</script>"""


def chromium(*args: str, user_data_dir) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: `make setup` installs it (Debian package chromium)"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def report_file(qwen3_tokenizer, tmp_path_factory):
    records = [
        make_record(qwen3_tokenizer, saar=True, rollback=True, latency_s=3.0),
        make_record(qwen3_tokenizer, saar=False, rollback=False, latency_s=2.5),
    ]
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_report(records, ["test.jsonl"]), encoding="utf-8")
    return path


def test_plots_render_in_chromium(report_file, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(report_file.read_text().replace("</body>", PROBE + "</body>"))
    result = chromium("--dump-dom", probed.as_uri(), user_data_dir=tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.DOTALL)
    assert match, "the page did not finish rendering (probe missing)"
    probe = json.loads(match.group(1).replace("&quot;", '"'))
    assert probe["trajectories"] == 2
    assert len(probe["charts"]) == 6
    for chart in probe["charts"]:
        assert chart["width"] > 100 and chart["height"] > 100, chart
    bars = {chart["id"]: chart["bars"] for chart in probe["charts"]}
    assert bars["chart-0"] >= 1, "rollback/recovery bars must be drawn for the SAAR run"


def test_screenshot(report_file, tmp_path):
    shot = tmp_path / "report.png"
    result = chromium(
        f"--screenshot={shot}", "--window-size=1280,1400", report_file.as_uri(), user_data_dir=tmp_path / "profile"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1400)
    assert len(data) > 20_000, "a blank page compresses to almost nothing"
