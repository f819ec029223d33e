#!/usr/bin/env bash
# Makes sure an image registry is serving for the registry tests
# (tests/runtimes/test_registry.py): Debian's docker-registry (the reference
# distribution registry) on a loopback port, over TLS with a CA made here,
# with htpasswd authentication, and every client trusting that CA the way it
# documents:
#   Docker      /etc/docker/certs.d/HOST:PORT/ca.crt
#   Podman      /etc/containers/certs.d/HOST:PORT/ca.crt
#   ch-image    Python requests, which Debian's python3-requests points at
#               the system bundle: /usr/local/share/ca-certificates +
#               update-ca-certificates
# HOST is registry.dlrepro.test, mapped to 127.0.0.1 in /etc/hosts, so that
# the name the certificate carries is the name every client dials.
# Idempotent: installs, makes and starts only what is missing. Prints the
# settings the tests read (DLREPRO_TEST_REGISTRY, its user and password;
# a test registry's password, not a secret).
set -euo pipefail
host=${DLREPRO_REGISTRY_HOST:-registry.dlrepro.test}
port=${DLREPRO_REGISTRY_PORT:-5443}
user=dlrepro
password=opensesame-43
state=/var/lib/dlrepro-registry
packages=("docker-registry=2.8.2+ds1-1" "apache2-utils=2.4.71-1~deb12u1")
. "$(dirname "$0")/apt.sh"
started=$(date +%s)

mapfile -t missing < <(not_at_pinned_version "${packages[@]}")
if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
fi

if ! grep -qE "^127\.0\.0\.1[[:space:]].*\b$host\b" /etc/hosts; then
    echo "127.0.0.1 $host" | $sudo tee -a /etc/hosts >/dev/null
fi

$sudo mkdir -p "$state/data"
if [ ! -f "$state/ca.crt" ]; then
    $sudo openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
        -subj "/CN=dlrepro test registry CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -keyout "$state/ca.key" -out "$state/ca.crt" 2>/dev/null
fi
if [ ! -f "$state/server.crt" ] || \
        ! openssl x509 -in "$state/server.crt" -noout -ext subjectAltName \
            2>/dev/null | grep -q "DNS:$host"; then
    $sudo openssl req -newkey rsa:2048 -nodes -subj "/CN=$host" \
        -keyout "$state/server.key" -out "$state/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
        "$host" | $sudo tee "$state/server.ext" >/dev/null
    $sudo openssl x509 -req -in "$state/server.csr" -CA "$state/ca.crt" \
        -CAkey "$state/ca.key" -CAcreateserial -days 3650 -sha256 \
        -extfile "$state/server.ext" -out "$state/server.crt" 2>/dev/null
fi
if ! htpasswd -vb "$state/htpasswd" "$user" "$password" >/dev/null 2>&1; then
    # The registry reads bcrypt entries only (-B).
    $sudo htpasswd -Bbc "$state/htpasswd" "$user" "$password" 2>/dev/null
fi

# Trust, each client its own way.
for dir in "/etc/docker/certs.d/$host:$port" "/etc/containers/certs.d/$host:$port"; do
    $sudo mkdir -p "$dir"
    $sudo cp "$state/ca.crt" "$dir/ca.crt"
done
if ! cmp -s "$state/ca.crt" /usr/local/share/ca-certificates/dlrepro-registry.crt; then
    $sudo cp "$state/ca.crt" /usr/local/share/ca-certificates/dlrepro-registry.crt
    $sudo update-ca-certificates >/dev/null 2>&1
fi

cat <<EOF | $sudo tee "$state/config.yml" >/dev/null
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $state/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  tls:
    certificate: $state/server.crt
    key: $state/server.key
auth:
  htpasswd:
    realm: dlrepro
    path: $state/htpasswd
EOF

answers() {  # the API root: 401 means up, TLS verified, asking for auth
    [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$state/ca.crt" \
        "https://$host:$port/v2/" || true)" = 401 ]
}
if ! answers; then
    # No init system here: the registry runs as a daemon of its own, its
    # log beside its data (a pid file for the tests that stop it).
    $sudo setsid /usr/bin/docker-registry serve "$state/config.yml" \
        >>"$state/registry.log" 2>&1 < /dev/null &
    echo $! | $sudo tee "$state/registry.pid" >/dev/null
    for _ in $(seq 100); do
        answers && break
        sleep 0.1
    done
    if ! answers; then
        tail -5 "$state/registry.log" >&2
        echo "registry.sh: the registry does not answer on $host:$port" >&2
        exit 1
    fi
fi
echo "registry.sh: docker-registry $(dpkg-query -W -f='${Version}' docker-registry)" \
     "on https://$host:$port (TLS, htpasswd) in $(( $(date +%s) - started )) s;" \
     "DLREPRO_TEST_REGISTRY=$host:$port DLREPRO_TEST_REGISTRY_USER=$user" \
     "DLREPRO_TEST_REGISTRY_PASSWORD=$password"
