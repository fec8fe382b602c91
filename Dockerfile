# The image of sluice serve: one static binary on a distroless base, run as
# a non-root user. Build it from the repository's root:
#
#	docker build -t sluice .
#
# The binary is /bin/ratelimit, where envoyproxy/ratelimit's image has its
# own, and answers to that name as "sluice serve": a Kubernetes manifest or
# Helm chart written for envoyproxy/ratelimit (command: ["/bin/ratelimit"],
# its environment variables, its runtime directory) runs it unchanged. Its
# other commands stay at hand: docker run sluice check /etc/ratelimit.
# See docs/migrating-from-envoy-ratelimit.md.

FROM golang:1.26-bookworm AS build
WORKDIR /src
# The workspace's modules (go.work) and their requirements first: a change
# to the code does not download them again. The build uses the workspace,
# so sluice serve is built from this tree's sibling modules.
COPY go.work go.work.sum go.mod ./
COPY bench/go.mod bench/go.sum bench/
COPY cmd/sluice/go.mod cmd/sluice/go.sum cmd/sluice/
COPY config/go.mod config/go.sum config/
COPY examples/llm/go.mod examples/llm/go.sum examples/llm/
COPY examples/tariffs/go.mod examples/tariffs/go.sum examples/tariffs/
COPY grpclimit/go.mod grpclimit/go.sum grpclimit/
COPY redis/go.mod redis/go.sum redis/
COPY server/go.mod server/go.sum server/
RUN go mod download
COPY . .
RUN cd cmd/sluice && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ratelimit .

# static-debian12: CA certificates (for rediss://), time zones, /etc/passwd
# with the nonroot user, no shell and no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratelimit /bin/ratelimit
USER 65532:65532
# HTTP (POST /json, /v1/auth, /healthcheck, /metrics), gRPC (RLS), debug:
# envoyproxy/ratelimit's ports in envoy mode. Without its variables,
# sluice's defaults are :8080 and :8081 too.
EXPOSE 8080 8081 6070
ENTRYPOINT ["/bin/ratelimit"]
