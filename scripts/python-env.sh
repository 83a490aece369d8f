#!/usr/bin/env bash
# Makes python/.venv: a Python 3.12+ virtualenv with the vtrr package
# (editable) and its test tools. Django 6.1 and threadmill need 3.12, which
# Debian 12 does not ship: this looks for one on PATH (python3.13,
# python3.12, pyenv shims that work) and in pyenv's versions, and says so
# when there is none. Every version comes from constraints.txt, so a new
# release of a test tool cannot break a fresh clone. With the argument
# `oldest` it makes python/.venv-oldest instead, with the oldest redis-py
# pyproject.toml accepts (its `redis[hiredis]>=X`), so both ends of the range
# are tested. Reinstalls only when pyproject.toml or constraints.txt changed.
set -euo pipefail
cd "$(dirname "$0")/../python"
venv=.venv
constraints=constraints.txt
if [ "${1:-}" = oldest ]; then
  venv=.venv-oldest
  floor=$(sed -n 's/^dependencies = \["redis\[hiredis\]>=\([0-9.]*\)".*/\1/p' pyproject.toml)
  [ -n "$floor" ] || { echo "python-env: no redis floor found in pyproject.toml" >&2; exit 1; }
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  { grep -v '^redis==' constraints.txt; echo "redis==$floor"; } > "$constraints"
fi
stamp=$venv/.installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt constraints.txt ]; then exit 0; fi

good() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
interpreter=""
pyenv_root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for candidate in python3.13 python3.12 python3 \
                 $(ls -d "$pyenv_root"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV) \
                 /usr/local/bin/python3.1[2-9] /usr/bin/python3.1[2-9]; do
  if command -v "$candidate" >/dev/null 2>&1 && good "$candidate"; then interpreter=$candidate; break; fi
done
if [ -z "$interpreter" ]; then
  echo "python-env: no Python 3.12 or newer found (PATH, pyenv versions); Django 6.1 needs it." >&2
  echo "python-env: install one (e.g. pyenv install 3.12) and run make python-env again." >&2
  exit 1
fi
echo "python-env: $($interpreter --version) from $interpreter"
rm -rf "$venv"
"$interpreter" -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -c "$constraints" -e '.[test]'
echo "python-env: $venv has redis-py $("$venv/bin/python" -c 'import redis; print(redis.__version__)')"
touch "$stamp"
