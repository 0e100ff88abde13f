"""Libraries the course pins but a test may not find (``./course rerun`` runs the tests on other torch versions,
where a pinned library may not import)."""
from __future__ import annotations

import importlib
import logging
import warnings

import pytest


def needs(module: str):
    """Import a library the course pins, or skip the test that asked, saying why."""
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)  # torchao's import-time notes
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure to import means: not usable here
        pytest.skip(f"{module} does not import here: {type(exc).__name__}: {exc}")
