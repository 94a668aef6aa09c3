# syntax=docker/dockerfile:1
# hone in a container. Build (the version is stamped as `make build` does it;
# .git is not sent to the builder):
#   docker build -t hone --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
# Replay, gate, simulator, emulator, proxy: as the unprivileged user hone.
#   docker run --rm --network host hone replay --endpoint http://127.0.0.1:8000 --model M --out /work/run.json.gz
# The daemon traces the host's processes: it needs the host's PID namespace
# and, as root in the container, its start capabilities (CAP_BPF and
# CAP_PERFMON; CAP_SYS_ADMIN too for --bpf-stats or kernels before 6.6:
# deploy/systemd/README.md) or --privileged; it drops to nobody after
# attaching. NVML needs the NVIDIA container toolkit (--gpus all).
#   docker run --rm --user root --pid host --privileged hone daemon --once --duration 10s
#   docker run --rm --user root --pid host --cap-add BPF --cap-add PERFMON hone daemon --once --duration 10s

# glibc builder: NVML is loaded through cgo.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ENV CGO_ENABLED=1
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make build VERSION="$VERSION" COMMIT="$COMMIT" && bin/hone version

# Runtime: the same glibc (bookworm) as the builder.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /work hone
COPY --from=build /src/bin/hone /usr/local/bin/hone
COPY LICENSE NOTICE /usr/share/doc/hone/
USER hone
WORKDIR /work
ENTRYPOINT ["/usr/local/bin/hone"]
CMD ["--help"]
