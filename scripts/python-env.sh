# Sourced by scripts/test.sh and bench/run_loader.sh, after scripts/env.sh: a Python
# virtual environment with the pinned tools of crates/python/requirements-test.txt
# (maturin, pytest, fsspec, pandas, pyarrow, dask), and the gustfs wheel of this
# tree built and installed into it. The environment lives outside the clone
# ($GUST_PYENV, default ~/.cache/gustfs-pyenv) so later runs reuse it; it is
# reinstalled when the requirements or the Python version change.
# Exports GUST_PYTHON (its interpreter) and GUST_WHEEL (the wheel just built).
export GUST_PYENV="${GUST_PYENV:-$HOME/.cache/gustfs-pyenv}"
gust_python_env() {
  local req=crates/python/requirements-test.txt stamp want
  want="$(python3 --version 2>&1) $(sha256sum "$req" | cut -d' ' -f1)"
  stamp="$GUST_PYENV/.gust-requirements"
  if [ ! -x "$GUST_PYENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "python-env: installing $req into $GUST_PYENV" >&2
    rm -rf "$GUST_PYENV"
    python3 -m venv "$GUST_PYENV"
    "$GUST_PYENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$stamp"
  fi
  export GUST_PYTHON="$GUST_PYENV/bin/python"
  local wheels="$CARGO_TARGET_DIR/wheels"
  rm -rf "$wheels"
  # The module builds against the workspace's lock file, in the same target
  # directory as the workspace (no second build of the client core's dependencies).
  "$GUST_PYENV/bin/maturin" build --release --locked -q -m crates/python/Cargo.toml -i "$GUST_PYTHON" -o "$wheels" >&2
  GUST_WHEEL="$(ls "$wheels"/gustfs-*.whl)"
  export GUST_WHEEL
  "$GUST_PYTHON" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$GUST_WHEEL"
}
gust_python_env
