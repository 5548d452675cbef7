#!/usr/bin/env bash
# Vendors Swagger UI (npm's swagger-ui-dist, the version below) into
# crates/cra-runtime/docs-ui/vendor/ and writes VENDORED there: the version and each file's
# SHA-256, which cra-runtime's tests check against the files (a hand edit, a partial copy or a
# version changed in one place only fails them). The files are compiled into `cra serve`
# (`/docs`); nothing is fetched at build or run time. Run it to move to another version.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-5.35.0}"
out=crates/cra-runtime/docs-ui/vendor
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "swagger-ui-dist@$version" > /dev/null && tar xzf "swagger-ui-dist-$version.tgz")
files=(swagger-ui-bundle.js swagger-ui.css LICENSE NOTICE swagger-ui-bundle.js.LICENSE.txt)
for f in "${files[@]}"; do
    cp "$work/package/$f" "$out/$f"
done
{
    echo "swagger-ui-dist $version"
    for f in "${files[@]}"; do
        echo "$(sha256sum "$out/$f" | cut -d' ' -f1)  $f"
    done
} > "$out/VENDORED"
echo "vendored swagger-ui-dist $version into $out"
