"""The documentation: the MkDocs site builds in strict mode (a broken link, anchor or API reference fails it),
every page is in the nav, README's relative links lead somewhere, and every command the pages show parses."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vfasim.cli import build_parser
from vfasim.hw import builtin_names
from vfasim.kernel import builtin_kernel_names

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def nav_pages(entries: object) -> list[str]:
    """Every page a mkdocs nav names, at any depth."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [p for e in entries for p in nav_pages(e)]
    if isinstance(entries, dict):
        return [p for v in entries.values() for p in nav_pages(v)]
    return []


def shown_commands() -> list[tuple[str, str]]:
    """(page, line) for every `vfasim …` line of the pages' shell blocks."""
    out = []
    for page in PAGES:
        for lang, body in re.findall(r"```(\w+)\n(.*?)```", (DOCS / page).read_text(), flags=re.S):
            out += [(page, ln.strip()) for ln in body.splitlines() if lang == "sh" and ln.strip().startswith("vfasim ")]
    return out


def test_the_site_builds_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for ident in re.findall(r"^::: ([\w.]+)", (DOCS / "api.md").read_text(), flags=re.M):
        assert f'id="{ident}"' in api, f"{ident} is not documented on the API page"


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert sorted(nav) == PAGES


def test_readme_links_lead_to_files_that_exist():
    readme = (ROOT / "README.md").read_text()
    links = [link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", readme)
             if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert links, "README links to no page"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
    assert {f"docs/{p}" for p in PAGES} <= set(links), "README's page list misses a page"


def test_every_code_fence_a_page_opens_is_closed_before_its_next_heading():
    # an unclosed fence renders the rest of the page as code, and the strict build does not mind
    for page in ["../README.md", *PAGES]:
        fence = None
        for n, line in enumerate((DOCS / page).read_text().splitlines(), 1):
            if line.startswith("```"):
                fence = None if fence else n
            elif line.startswith("#") and fence:
                raise AssertionError(f"{page}: the fence opened on line {fence} is still open at the heading on "
                                     f"line {n}")
        assert fence is None, f"{page}: the fence opened on line {fence} is never closed"


def test_no_page_names_a_machine_path():
    for page in PAGES:
        text = (DOCS / page).read_text()
        assert not re.search(r"(?<![\w.])/(work|home|root|tmp|Users)/", text), page


@pytest.mark.parametrize("page, line", shown_commands(), ids=lambda x: x[:70])
def test_every_command_a_page_shows_parses(page, line):
    """Flags, sub-commands and choices as the CLI has them; built-in config and kernel names that exist. (The
    commands run when written; running them all here would take minutes: vfasim validate alone does.)"""
    argv = shlex.split(line)[1:]
    if ">" in argv:
        argv = argv[:argv.index(">")]
    args = build_parser().parse_args(argv)
    hws = getattr(args, "hw", None) or []
    for name in ",".join(hws if isinstance(hws, list) else [hws]).split(","):
        assert not name or name.endswith((".yaml", ".yml")) or name in builtin_names(), (page, name)
    kernels = getattr(args, "kernel", None) or []
    for name in ",".join(kernels if isinstance(kernels, list) else [kernels]).split(","):  # sweep: comma lists
        assert not name or name.endswith((".yaml", ".yml")) or name in builtin_kernel_names(), (page, name)


def test_the_kernels_page_names_every_field_of_a_kernel_description():
    from vfasim.kernel import DecodeRule, Kernel, TileRule

    page = (DOCS / "kernels.md").read_text()
    fields = [*Kernel.model_fields, *TileRule.model_fields, *DecodeRule.model_fields]
    missing = sorted({f for f in fields if f"`{f}`" not in page})
    assert not missing, f"docs/kernels.md does not describe {missing}"
