# Sourced by the other scripts: where the build goes. A target directory outside the
# clone lets later runs on the same machine reuse the build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/gustfs-target}"
export GUST="$CARGO_TARGET_DIR/release/gust"
