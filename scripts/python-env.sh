#!/usr/bin/env bash
# Makes python/.venv: a Python 3.12+ virtualenv with the vtrr package
# (editable) and its test tools. Django 6.1 and threadmill need 3.12, which
# Debian 12 does not ship: this looks for one on PATH (python3.13,
# python3.12, pyenv shims that work) and in pyenv's versions, and says so
# when there is none. Reinstalls only when python/pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/../python"
venv=.venv
stamp=$venv/.installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then exit 0; fi

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
"$venv/bin/pip" install --quiet -e '.[test]'
touch "$stamp"
