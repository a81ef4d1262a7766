"""MkDocs hooks: publish the repository's examples/ with the site.

The guides link to the runnable programs as `../examples/<name>.py`, which is
right on GitHub and in a checkout. MkDocs only knows files under docs/, so in
strict mode such links fail the build. These hooks copy examples/ into the site
(`examples/<name>.py` served as text, `examples/README.md` rendered as a page
outside the nav) and rewrite the links to point there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel
from mkdocs.structure.pages import Page

_LINK = re.compile(r"\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")
_SHARED = ("examples",)


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def on_files(files: Files, config: Any) -> Files:
    """Add examples/*.py (static) and examples/README.md (a page not in the nav)."""
    root = _root(config)
    for folder in _SHARED:
        for path in sorted((root / folder).glob("*")):
            if path.suffix not in (".py", ".md") or path.name.startswith("_"):
                continue
            inclusion = InclusionLevel.NOT_IN_NAV if path.suffix == ".md" else None
            kwargs: dict[str, Any] = {"abs_src_path": str(path)}
            if inclusion is not None:
                kwargs["inclusion"] = inclusion
            files.append(File.generated(config, f"{folder}/{path.name}", **kwargs))
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    """Point links that leave docs/ for examples/ (or come back) at the site's copies."""
    here = posixpath.dirname(page.file.src_uri)
    in_repo = posixpath.join("docs", here) if not here.startswith(_SHARED) else here

    def fix(match: re.Match[str]) -> str:
        url, anchor = match.group(1), match.group(2) or ""
        target = posixpath.normpath(posixpath.join(in_repo, url))
        if target.startswith("docs/"):
            site_path = target.removeprefix("docs/")
        elif target.startswith(_SHARED):
            site_path = target
        else:
            return match.group(0)
        return f"]({posixpath.relpath(site_path, here or '.')}{anchor})"

    return _LINK.sub(fix, markdown)
