# syntax=docker/dockerfile:1
#
# The compactor service: a static binary (no cgo) on a distroless base that
# has no shell and no package manager, run as an unprivileged user.
#
#   docker build -t compactor .      (or: make docker)
#   docker run --rm compactor version
#
# compose.yaml runs it against a 3-node NATS cluster.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that a code change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.0.0-docker
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/compactor ./cmd/compactor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/compactor /compactor
# distroless's nonroot user (uid 65532): never root.
USER 65532:65532
# /metrics, /livez, /healthz and /readyz.
EXPOSE 9464
ENTRYPOINT ["/compactor"]
# On all interfaces, so that probes and Prometheus reach it from outside.
CMD ["serve", "--metrics-addr", "0.0.0.0:9464"]
