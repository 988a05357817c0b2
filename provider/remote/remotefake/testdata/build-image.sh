#!/bin/sh
# Builds the image of remotefake's machines, berth-remote-test:1, from
# the local berth-test:1 (provider/docker/testdata/build-image.sh, run
# first when it is missing): root, and a user "user" (uid and gid 1000,
# home /home/user) who owns /home/user and /workspace, as the hosted
# services' templates have. No registry: FROM names a local image. Fast
# when the image exists already.
#
# Usage: build-image.sh [tag]    (default berth-remote-test:1)
set -eu
tag=${1:-berth-remote-test:1}
if docker image inspect "$tag" >/dev/null 2>&1; then
	exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
"$here/../../../docker/testdata/build-image.sh" berth-test:1
docker build -q -t "$tag" - >/dev/null <<'DOCKERFILE'
FROM berth-test:1
RUN echo 'user:x:1000:1000:user:/home/user:/bin/sh' >>/etc/passwd && \
	echo 'user:x:1000:' >>/etc/group && \
	mkdir -p /home/user /workspace && \
	chown 1000:1000 /home/user /workspace && \
	chmod 0755 /home/user /workspace
WORKDIR /
DOCKERFILE
echo "built $tag"
