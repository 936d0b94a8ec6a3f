#!/usr/bin/env bash
# Builds SeaweedFS's `weed` (Apache-2.0), the S3-compatible object store the object
# store tests (tests/s3) run on loopback, and prints the binary's path. Built once
# into $GUST_WEED_DIR (default ~/.cache/gustfs-weed, outside the clone, as the Rust
# build is), about 5-9 minutes on 2 cores and a 230 MB binary; later runs reuse it.
#
# `go install …/weed@VERSION` is refused (SeaweedFS's go.mod has replace
# directives), so the module's source is downloaded from the Go module proxy and
# built as the main module. It needs Go >= 1.26 (its go.mod): the `go` on PATH or in
# /usr/local/go if new enough, else the Go toolchain module from the same proxy.
set -euo pipefail
VERSION=v0.0.0-20261109003541-7506e5f91cd6
TOOLCHAIN=go1.26.6
dir="${GUST_WEED_DIR:-$HOME/.cache/gustfs-weed}"
bin="$dir/weed-$VERSION"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$dir"
go_ok() { [ -x "$1" ] && "$1" version 2>/dev/null | grep -qE 'go1\.(2[6-9]|[3-9][0-9])'; }
GO=""
for g in "$(command -v go || true)" /usr/local/go/bin/go "$dir/go/bin/go"; do
  if [ -n "$g" ] && go_ok "$g"; then GO="$g"; break; fi
done
if [ -z "$GO" ]; then
  echo "seaweedfs: fetching the Go toolchain $TOOLCHAIN from proxy.golang.org" >&2
  command -v unzip >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip >/dev/null; }
  rm -rf "$dir/go" "$dir/toolchain.zip" "$dir/toolchain"
  curl -fsSL -o "$dir/toolchain.zip" "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$TOOLCHAIN.linux-amd64.zip"
  unzip -q -d "$dir/toolchain" "$dir/toolchain.zip"
  mv "$dir/toolchain/golang.org/toolchain@v0.0.1-$TOOLCHAIN.linux-amd64" "$dir/go"
  rm -rf "$dir/toolchain.zip" "$dir/toolchain"
  chmod +x "$dir/go/bin/"* "$dir/go/pkg/tool/"*/* 2>/dev/null || true
  GO="$dir/go/bin/go"
fi
echo "seaweedfs: building weed $VERSION with $("$GO" version | cut -d' ' -f3) (several minutes, once)" >&2
started=$(date +%s)
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOFLAGS=-modcacherw GOTOOLCHAIN=local
src="$(cd "$work" && "$GO" mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -d "$src" ] || { echo "seaweedfs: could not download github.com/seaweedfs/seaweedfs@$VERSION" >&2; exit 1; }
cp -r "$src" "$work/src"
chmod -R u+w "$work/src"
(cd "$work/src" && "$GO" build -buildvcs=false -o "$bin.part" ./weed)
mv "$bin.part" "$bin"
echo "seaweedfs: built in $(($(date +%s) - started)) s" >&2
echo "$bin"
