"""Write one-language copies of the bilingual notebooks (code cells and outputs kept).

    python -m hooklab export --lang zh            # notebooks/*.ipynb -> build/zh/
    python -m hooklab export --lang en --out /tmp/en notebooks/00_introduction.ipynb
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

__all__ = ["LANGS", "export_notebook", "export_notebooks"]

LANGS = ("zh", "en")


def _lang_tag(cell: dict[str, Any]) -> str | None:
    tags = [t for t in cell.get("metadata", {}).get("tags", []) if t.startswith("lang-")]
    return tags[0] if tags else None


def export_notebook(nb: dict[str, Any], lang: str) -> dict[str, Any]:
    """Return a copy of notebook ``nb`` keeping code cells and the markdown of ``lang`` (and ``lang-both``)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    keep = {f"lang-{lang}", "lang-both"}
    out = copy.deepcopy(nb)
    cells = []
    for cell in out.get("cells", []):
        if cell.get("cell_type") == "markdown":
            tag = _lang_tag(cell)
            if tag is None:
                raise ValueError("a markdown cell has no lang-* tag; run the structure tests first")
            if tag not in keep:
                continue
        cells.append(cell)
    out["cells"] = cells
    out.setdefault("metadata", {})["hooklab_language"] = lang
    return out


def export_notebooks(lang: str, out_dir: str | Path, paths: Iterable[str | Path]) -> list[Path]:
    """Export each notebook in ``paths`` into ``out_dir`` (same file names); return the files written."""
    out_dir = Path(out_dir)
    sources = [Path(p) for p in paths]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no such notebook: {', '.join(missing)}")
    overwritten = [str(p) for p in sources if (out_dir / p.name).resolve() == p.resolve()]
    if overwritten:
        raise ValueError(f"--out {out_dir} would overwrite the bilingual source {', '.join(overwritten)}; "
                         "choose another folder (the default is build/<lang>)")
    exported = [(p, export_notebook(json.loads(p.read_text(encoding="utf-8")), lang)) for p in sources]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src, nb in exported:
        target = out_dir / src.name
        target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(target)
    return written
