FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /tollgate ./cmd/tollgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /tollgate /tollgate
EXPOSE 8080
ENTRYPOINT ["/tollgate", "serve"]
