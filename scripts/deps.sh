# Sourced by scripts/run and scripts/test: installs what a fresh Debian machine lacks.
# Everything it prints goes to stderr, because stdout may be the protocol stream.

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_install PKG...: installs the Debian packages that are missing (apt-get update once first).
apt_install() {
  missing=""
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  [ -z "$missing" ] && return 0
  echo "installing$missing" >&2
  as_root apt-get update -qq >&2 && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
}

apt_install libjansson-dev libpq-dev libcurl4-openssl-dev pkg-config tzdata

# The Node client, the example web server and their tests need Node 20 or later (built-ins only).
if ! command -v node >/dev/null 2>&1 || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "Node 20 or later is required for clients/node and examples/web (found: $(node --version 2>/dev/null || echo none))" >&2
  apt_install nodejs
fi
