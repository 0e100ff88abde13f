"""The address of the course's website, for links a pip user can open (``course.ask``'s answers).

The site's address is known only where the package is released: the release writes it into the package's metadata
(pyproject.toml's ``[project.urls]`` "Documentation" or "Homepage", stamped by ``tools/launch/package_page.py``). A
copy built from a checkout keeps a placeholder or none, and then the answers give each page's path relative to the
site (``en/03_module_forward_hooks.html``) and say that it is on the course's website. ``HOOKLAB_SITE_URL`` in the
environment sets the address (a mirror, a local build served at ``http://localhost:8000/``).

>>> page_url("en/symptoms.html", base="https://example.org/hooklab/")
'https://example.org/hooklab/en/symptoms.html'
>>> page_url("en/symptoms.html", base=None)
'en/symptoms.html'
"""
from __future__ import annotations

import functools
import os
import re
from importlib import metadata

__all__ = ["ENV_VAR", "page_url", "repository_url", "site_url"]

ENV_VAR = "HOOKLAB_SITE_URL"
_URL = re.compile(r"https?://[^\s/]+(?:/[^\s]*)?")
_PLACEHOLDER = re.compile(r"OWNER|/REPO\b", re.IGNORECASE)  # package_page.py's placeholders, before the release


def _checked(url: str, where: str) -> str:
    if not _URL.fullmatch(url):
        raise ValueError(f"{where} should be the course website's address, an http(s) URL such as "
                         f"https://owner.github.io/hooklab/, got {url[:80]!r}")
    return url if url.endswith("/") else url + "/"


@functools.cache
def _project_urls() -> dict[str, str]:
    """The installed package's ``[project.urls]``, keys in lower case; empty when it has none (a checkout)."""
    try:
        listed = metadata.metadata("hooklab").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return {}
    urls = {}
    for line in listed:
        key, _, url = line.partition(",")
        url = url.strip()
        if _URL.fullmatch(url) and not _PLACEHOLDER.search(url):
            urls[key.strip().lower()] = url
    return urls


def site_url() -> str | None:
    """The website's address ending in ``/``: ``$HOOKLAB_SITE_URL``, else the package's "Documentation" or
    "Homepage" URL; None where neither is known (a build from a checkout)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value:
        return _checked(value, f"${ENV_VAR}")
    urls = _project_urls()
    found = urls.get("documentation") or urls.get("homepage")
    return found if found is None or found.endswith("/") else found + "/"


def repository_url() -> str | None:
    """The repository's address ("Repository" or "Source"), None where it is not known."""
    urls = _project_urls()
    found = urls.get("repository") or urls.get("source")
    return found.rstrip("/") if found else None


def page_url(path: str, *, base: str | None = ...) -> str:  # type: ignore[assignment]
    """A page of the site (``path`` relative to its root) as a full address, or the path itself where the site's
    address is not known; ``base``: the address to use (default: :func:`site_url`)."""
    root = site_url() if base is ... else base
    return f"{root}{path}" if root else path
