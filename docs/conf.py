"""Sphinx configuration of the aiopdbp documentation (``python3 tools/dev.py docs``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # document the checkout, installed or not

import aiopdbp  # noqa: E402

project = "aiopdbp"
author = "the aiopdbp developers"
copyright = "2026, the aiopdbp developers"
release = version = aiopdbp.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "tutorial/*.py"]
myst_heading_anchors = 3          # README-style links to a heading on another page
myst_enable_extensions = ["colon_fence"]

html_theme = "furo"
html_title = f"aiopdbp {release}"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

#: classes a program gets from the library and never builds itself: their
#: constructor's parameters are the library's, not the reader's
NOT_CONSTRUCTED = {"aiopdbp.GP", "aiopdbp.SGP", "aiopdbp.IncomingStream", "aiopdbp.Message"}


def _hide_constructor(app: Any, what: str, name: str, obj: object, options: object,
                      signature: str | None, return_annotation: str | None) -> tuple[str, str | None] | None:
    """Show ``class aiopdbp.GP`` without ``(node, name, pid, ptype)`` and
    without their types (recorded by autodoc's typehints just before)."""
    if what == "class" and name in NOT_CONSTRUCTED:
        app.env.temp_data.get("annotations", {}).pop(name, None)
        return "", return_annotation
    return None


def setup(app: Any) -> None:
    app.connect("autodoc-process-signature", _hide_constructor, priority=600)
