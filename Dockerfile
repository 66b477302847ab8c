FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /tollgate ./cmd/tollgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /tollgate /tollgate
COPY --from=build /src/LICENSE /LICENSE
EXPOSE 8080
# The image has no shell: the binary checks its own health, and operator
# commands run in place of serve (docker compose run tollgate tenants create …).
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 CMD ["/tollgate", "healthcheck"]
ENTRYPOINT ["/tollgate"]
CMD ["serve"]
