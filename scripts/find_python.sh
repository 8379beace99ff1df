#!/usr/bin/env bash
# Prints the path of a working Python X.Y interpreter (`find_python.sh 3.10`): PATH first, then
# pyenv. A pyenv shim can exist on PATH without X.Y selected, so every candidate is run, and the
# interpreter's own path (not the shim's) is printed.
# .venv needs 3.10 (TFX 1.16's compiled deps); .venv-ref (`make reference-env`) needs 3.11, the
# Python of the PyTorch CPU wheel that lies on disk on the project's machines.
set -u
want=${1:?usage: find_python.sh MAJOR.MINOR}
real() {
  "$1" -c "import sys, venv; assert '%d.%d' % sys.version_info[:2] == '$want'; print(sys.executable)" \
    2>/dev/null
}
for candidate in "python$want" python3 python; do
  path=$(command -v "$candidate" 2>/dev/null) || continue
  if real "$path"; then exit 0; fi
done
if command -v pyenv >/dev/null 2>&1; then
  for path in "$(pyenv root)"/versions/"$want".*/bin/python; do
    if [ -x "$path" ] && real "$path"; then exit 0; fi
  done
fi
cat >&2 <<MSG
error: no Python $want interpreter found (looked on PATH for python$want/python3/python, then in
\$(pyenv root)/versions/$want.*).
Get one with:  pyenv install $want      (or: apt-get install python$want python$want-venv
               on distributions that ship it, or uv python install $want)
MSG
exit 1
