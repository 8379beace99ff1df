#!/usr/bin/env bash
# Prints the path of a working Python 3.10 interpreter: PATH first, then pyenv.
# A pyenv shim can exist on PATH without a 3.10 selected, so every candidate is run.
set -u
works() { "$1" -c 'import sys, venv; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; }
for candidate in python3.10 python3 python; do
  path=$(command -v "$candidate" 2>/dev/null) || continue
  if works "$path"; then echo "$path"; exit 0; fi
done
if command -v pyenv >/dev/null 2>&1; then
  for path in "$(pyenv root)"/versions/3.10.*/bin/python; do
    if [ -x "$path" ] && works "$path"; then echo "$path"; exit 0; fi
  done
fi
cat >&2 <<'MSG'
error: no Python 3.10 interpreter found (looked on PATH for python3.10/python3/python, then in
$(pyenv root)/versions/3.10.*). bert-tfx needs exactly Python 3.10 (TFX 1.16's compiled deps).
Get one with:  pyenv install 3.10      (or: apt-get install python3.10 python3.10-venv
               on distributions that ship it, or uv python install 3.10)
MSG
exit 1
