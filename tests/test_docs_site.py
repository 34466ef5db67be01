"""The documentation site (docs/, mkdocs.yml) builds with ``mkdocs build --strict``: a broken link, a link
to a heading that is not there, a page missing from the navigation or a missing included file fails the
build, so it fails here (issue #47). The second test holds mkdocs.yml to that: a copy of the site with one
of each planted must not build."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Not --quiet: it hides the warnings --strict counts, and the build then passes with a broken link.
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]


def build(checkout: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``checkout``'s site into ``site`` (offline: the theme loads no font)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([*MKDOCS, "-f", str(checkout / "mkdocs.yml"), "-d", str(site)], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "configuration" / "reference.html").is_file()
    architecture = (tmp_path / "site" / "architecture.html").read_text(encoding="utf-8")
    assert "Where a change goes" in architecture, "docs/architecture.md includes ARCHITECTURE.md"


def test_a_broken_link_an_anchor_or_an_orphan_page_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "docs", copy / "docs")
    for name in ("mkdocs.yml", "README.md", "ARCHITECTURE.md"):  # the last two: included by snippets
        shutil.copy(ROOT / name, copy / name)
    planted = {
        "[gone](no-such-page.md)": "no-such-page.md",
        "[gone](security.md#no-such-heading)": "no-such-heading",
    }
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text(encoding="utf-8") + "\n" + " ".join(planted) + "\n", encoding="utf-8")
    (copy / "docs" / "orphan.md").write_text("# Not in the navigation\n", encoding="utf-8")
    built = build(copy, tmp_path / "site")
    assert built.returncode != 0
    for name in [*planted.values(), "orphan.md"]:
        assert name in built.stdout + built.stderr, name


def test_the_readme_and_architecture_link_to_files_that_exist() -> None:
    """The README's map of the docs (and ARCHITECTURE.md) are read on GitHub, outside the site's build."""
    for page in (ROOT / "README.md", ROOT / "ARCHITECTURE.md"):
        targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
        local = [target.split("#")[0] for target in targets if "://" not in target and not target.startswith("#")]
        assert all((ROOT / target).exists() for target in local), [t for t in local if not (ROOT / t).exists()]
    assert "docs/index.md" in (ROOT / "README.md").read_text(encoding="utf-8"), "the README maps the docs"
