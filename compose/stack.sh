#!/usr/bin/env bash
# The docker-compose cluster's tasks, for a fresh machine as for a warm one:
#   stack.sh engine   install docker.io, docker-compose and debootstrap (apt, root) if missing and
#                     start dockerd in the background when no daemon answers (no systemd here)
#   stack.sh base     make kbroker-base:bookworm (debootstrap + docker import) unless it exists
#   stack.sh build    the above, then the host's CA certificates into .build-ca/ and the image build
#   stack.sh up       the above, then docker-compose up and a bounded wait for every health check
#   stack.sh up --secure
#                     the same with every listener on SASL_SSL and etcd on TLS, for its clients and
#                     between its members (compose/secure.yml): a throwaway CA, certificates and
#                     passwords made in the image by compose/make_secrets.py
#                     into KBROKER_SECRETS_DIR (default compose/secrets, git-ignored) unless there,
#                     and the admin's client settings printed
#   stack.sh down     docker-compose down -v (containers, network, named volumes), and the secrets
# Environment: COMPOSE_PROJECT_NAME (default kbroker), KBROKER_PORT1..3 (published ports,
# default 19092..19094), DOCKERD_ARGS (extra dockerd flags), KBROKER_DOCKER_DIR (dockerd's log
# and pid file, default /var/tmp/kbroker-docker), KBROKER_CACHE_DIR (debootstrap's downloaded
# packages, kept for the next base image, default /var/cache/kbroker), KBROKER_SECRETS_DIR.
# The image is built once (only the etcd1 service has the build; the others run its image) and
# docker's layer cache keeps the Python dependencies while only the source changes.
# Exit status 3: docker cannot be had here (not root, no apt-get, or dockerd does not start).
set -euo pipefail
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."

export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-kbroker}"
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0  # Debian's engine has no buildx
BASE_IMAGE="${BASE_IMAGE:-kbroker-base:bookworm}"
DOCKER_DIR="${KBROKER_DOCKER_DIR:-/var/tmp/kbroker-docker}"
CACHE_DIR="${KBROKER_CACHE_DIR:-/var/cache/kbroker}"
BASE_PACKAGES="ca-certificates,python3,python3-venv,etcd-server"

say() { echo "compose: $*" >&2; }
unavailable() { say "$*"; exit 3; }

ensure_packages() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || unavailable "not root: cannot install ${missing[*]}"
    command -v apt-get >/dev/null || unavailable "no apt-get: install ${missing[*]} by hand"
    say "installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
        >/dev/null || unavailable "apt-get install ${missing[*]} failed"
}

daemon_answers() { docker info >/dev/null 2>&1; }

# dockerd in the background, logging to a file; wait (bounded) until it answers.
start_dockerd() {
    mkdir -p "$DOCKER_DIR"
    say "starting dockerd $* (log: $DOCKER_DIR/dockerd.log)"
    # shellcheck disable=SC2086
    setsid nohup dockerd $DOCKERD_ARGS_EXTRA "$@" >>"$DOCKER_DIR/dockerd.log" 2>&1 </dev/null &
    echo $! >"$DOCKER_DIR/dockerd.pid"
    for _ in $(seq 1 60); do
        daemon_answers && { say "dockerd is up (pid $(cat "$DOCKER_DIR/dockerd.pid"))"; return 0; }
        kill -0 "$(cat "$DOCKER_DIR/dockerd.pid")" 2>/dev/null || break
        sleep 1
    done
    kill "$(cat "$DOCKER_DIR/dockerd.pid")" 2>/dev/null || true
    return 1
}

ensure_engine() {
    ensure_packages
    daemon_answers && return 0
    [ "$(id -u)" = 0 ] || unavailable "no docker daemon answers and this is not root"
    DOCKERD_ARGS_EXTRA="${DOCKERD_ARGS:-}"
    start_dockerd && return 0
    # Kernels without overlayfs for dockerd: the slow but portable storage driver.
    start_dockerd --storage-driver=vfs && return 0
    tail -20 "$DOCKER_DIR/dockerd.log" >&2 || true
    unavailable "dockerd did not start (see $DOCKER_DIR/dockerd.log)"
}

# The Debian mirror apt already uses (deb822 .sources or a sources.list line).
debian_mirror() {
    local uri
    uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)
    [ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | tr ' ' '\n' | grep -E '^https?://' | grep -v security | head -1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

ensure_base() {
    ensure_engine
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
    local root mirror
    root=$(mktemp -d /var/tmp/kbroker-base.XXXXXX)
    mirror=$(debian_mirror)
    say "debootstrap bookworm from $mirror into $root (packages cached in $CACHE_DIR/debootstrap)"
    mkdir -p "$CACHE_DIR/debootstrap"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" --cache-dir="$CACHE_DIR/debootstrap" \
        bookworm "$root/root" "$mirror" \
        >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -rf "$root"; exit 1; }
    rm -rf "$root/root/var/cache/apt/archives/"*.deb "$root/root/var/lib/apt/lists/"*
    tar -C "$root/root" -c . | docker import -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$root" "$root.log"
    say "made $BASE_IMAGE"
}

# The host's CA certificates, for a TLS-inspecting proxy between the build and the registries.
copy_host_cas() {
    rm -rf .build-ca && mkdir -p .build-ca
    cp /usr/local/share/ca-certificates/*.crt .build-ca/ 2>/dev/null || true
    if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
        cp /etc/ssl/certs/ca-certificates.crt .build-ca/host-bundle.pem
    else
        : >.build-ca/host-bundle.pem
    fi
}

SECRETS_DIR="${KBROKER_SECRETS_DIR:-$PWD/compose/secrets}"
COMPOSE_FILES=(-f docker-compose.yml)
compose() { docker-compose "${COMPOSE_FILES[@]}" "$@"; }

published() { echo "127.0.0.1:${KBROKER_PORT1:-19092},127.0.0.1:${KBROKER_PORT2:-19093},127.0.0.1:${KBROKER_PORT3:-19094}"; }

# The secure profile: its files, and its secrets made once (in the image, which has the project).
secure_profile() {
    COMPOSE_FILES+=(-f compose/secure.yml)
    export KBROKER_SECRETS_DIR="$SECRETS_DIR" KBROKER_PROPERTIES=/etc/kbroker/secrets/server.properties
    [ -s "$SECRETS_DIR/server.properties" ] && return 0
    mkdir -p "$SECRETS_DIR"
    docker run --rm -v "$PWD/compose:/compose:ro" -v "$SECRETS_DIR:/out" kbroker:local \
        python /compose/make_secrets.py /out --host-dir "$SECRETS_DIR" --bootstrap "$(published)"
    say "made a CA, the brokers' and etcd's certificates and passwords in $SECRETS_DIR"
}

build() {
    ensure_base
    copy_host_cas
    trap 'rm -rf .build-ca' EXIT  # only the build sees them
    compose build --build-arg BASE_IMAGE="$BASE_IMAGE"
}

# Bounded wait until every service of the project reports healthy.
wait_healthy() {
    local deadline=$((SECONDS + ${1:-120})) unhealthy
    while [ $SECONDS -lt $deadline ]; do
        unhealthy=0
        for id in $(compose ps -q); do
            [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id")" = healthy ] \
                || unhealthy=$((unhealthy + 1))
        done
        [ "$unhealthy" = 0 ] && [ -n "$(compose ps -q)" ] && return 0
        sleep 1
    done
    compose ps >&2
    compose logs --tail=30 >&2
    say "not healthy within ${1:-120}s"
    return 1
}

up() {
    build
    [ "${1:-}" = --secure ] && secure_profile
    compose up -d
    wait_healthy 120
    say "up: brokers on $(published)"
    if [ "${1:-}" = --secure ]; then
        say "SASL_SSL; librdkafka settings ($SECRETS_DIR/client.properties):"
        cat "$SECRETS_DIR/client.properties" >&2
        say "Java client and kafka-* --command-config: $SECRETS_DIR/client-java.properties"
    fi
}

down() {
    if ! command -v docker-compose >/dev/null || ! daemon_answers; then
        say "no docker: nothing to take down"
        return 0
    fi
    compose down -v --remove-orphans
    rm -rf "$SECRETS_DIR"
}

case "${1:-}" in
    engine) ensure_engine ;;
    base) ensure_base ;;
    build) build ;;
    up) up "${2:-}" ;;
    down) down ;;
    *) echo "usage: $0 engine|base|build|up [--secure]|down" >&2; exit 2 ;;
esac
