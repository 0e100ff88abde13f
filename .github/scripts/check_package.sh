#!/usr/bin/env bash
# Build hooklab's wheel and sdist into dist/ (uv build), then check them as PyPI and a user meet them: the package page
# rendered by `twine check --strict`, the sizes of both on the manual's package page (docs/maintainers/package.md, tools/launch/package_page.py), the wheel installed with
# pip, with the course's extra, into a fresh virtual environment (at the versions uv.lock pins, as constraints),
# imported from there, and its docstring examples run as tests. With HOOKLAB_REPOSITORY_URL set (ci.yml and
# release.yml set it from the Actions context) the page's links and pyproject.toml's [project.urls] are filled in
# first, in this checkout. Used by ci.yml (every push) and release.yml (before publishing); needs uv, python3 and the
# network (PyPI). tests/tools/test_package.py checks the same offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "${HOOKLAB_REPOSITORY_URL:-}" ]; then
    python3 -m tools.launch.package_page stamp --repository-url "$HOOKLAB_REPOSITORY_URL"
else
    echo "check_package.sh: HOOKLAB_REPOSITORY_URL is not set: the page keeps its placeholder links" >&2
fi
rm -rf dist
uv build --out-dir dist
wheel="$(ls dist/hooklab-*.whl)"
ls -l dist/
uv export --frozen --no-hashes --no-emit-project --no-default-groups --extra course --group course --group dev \
    --output-file "$work/constraints.txt" >/dev/null

python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --constraint "$work/constraints.txt" \
    "$PWD/${wheel}[course]" pytest pytest-doctestplus twine
"$work/venv/bin/twine" check --strict dist/*
python3 -m tools.launch.package_page sizes dist

cd "$work"  # not the checkout: hooklab must come from the installed wheel
venv/bin/python - <<'PY'
import pathlib
import hooklab
from hooklab import course
from hooklab.course import induction

where = pathlib.Path(hooklab.__file__)
assert "site-packages" in where.parts, where
print("hooklab", hooklab.__name__, "from", where.parent, "| course extra:", induction.config().num_hidden_layers, "layers")
PY
venv/bin/python -m pytest -p no:cacheprovider -q --doctest-modules --doctest-plus \
    -o "doctest_optionflags=ELLIPSIS FLOAT_CMP" --pyargs hooklab
