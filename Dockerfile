# syntax=docker/dockerfile:1
#
# The compactor service: a static binary (no cgo) on a distroless base that
# has no shell and no package manager, run as an unprivileged user.
#
#   docker build -t compactor .      (or: make docker)
#   docker run --rm -p 127.0.0.1:4222:4222 -p 127.0.0.1:9464:9464 -v compactor:/data compactor
#
# By itself it runs its embedded NATS server with JetStream on all of the
# container's interfaces (4222), its store on the /data volume, and
# /metrics and the probes on 9464: runtimes connect to the published 4222.
# That server asks for no credentials: publish it on loopback, as above,
# or run the service against a NATS server of yours (--nats-url, with
# nats.conf's users). compose.yaml runs it against a 3-node NATS cluster.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-docker
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/compactor ./cmd/compactor && \
    mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/compactor /compactor
# The store's directory, owned by the user that writes it (the base has no
# shell to make it).
COPY --from=build --chown=65532:65532 /out/data /data
# distroless's nonroot user (uid 65532): never root.
USER 65532:65532
# Every serve flag can be set as COMPACTOR_<FLAG>: these are the image's
# defaults, which a flag or -e overrides. On all interfaces, so that
# runtimes, probes and Prometheus reach them from outside the container.
ENV COMPACTOR_NATS_HOST=0.0.0.0 \
    COMPACTOR_DATA_DIR=/data \
    COMPACTOR_METRICS_ADDR=0.0.0.0:9464
VOLUME /data
# NATS (the embedded server), and /metrics, /livez, /healthz and /readyz.
EXPOSE 4222 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/compactor", "health", "http://127.0.0.1:9464/readyz"]
ENTRYPOINT ["/compactor"]
CMD ["serve"]
