#!/usr/bin/env bash
# Makes sure a Docker engine answers: when `docker version` reaches no
# server, installs Debian's engine (docker.io) if dockerd is missing and
# starts dockerd in the background, logging to /var/log/dockerd.log, then
# waits until it answers. Idempotent: does nothing when an engine answers.
set -euo pipefail
answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if command -v docker >/dev/null && answers; then
    echo "docker-engine.sh: engine $(docker version --format '{{.Server.Version}}') answers"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
if ! command -v dockerd >/dev/null; then
    echo "docker-engine.sh: installing Debian's docker.io"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if ! pgrep -x dockerd >/dev/null; then
    echo "docker-engine.sh: starting dockerd (log: /var/log/dockerd.log)"
    $sudo sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'
fi
for _ in $(seq 1 60); do
    if answers; then
        echo "docker-engine.sh: engine $(docker version --format '{{.Server.Version}}') answers"
        exit 0
    fi
    sleep 1
done
echo "docker-engine.sh: dockerd did not answer within 60 s; last log lines:" >&2
$sudo tail -20 /var/log/dockerd.log >&2 || true
exit 1
