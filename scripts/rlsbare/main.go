// Command rlsbare is the yardstick of scripts/bench-gateways.sh: a gRPC
// server whose ShouldRateLimit answers every request OK, one status a
// descriptor, without looking at it: the least a rate limit service on this
// machine can do per call (grpc-go's HTTP/2, protobuf both ways). The rate
// limit services are reported against it, measured in the same sitting.
package main

import (
	"context"
	"flag"
	"log"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

type bare struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK with what an allowed descriptor carries: its
// limit, what remains and when the window resets.
func (bare) ShouldRateLimit(_ context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(in.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
			LimitRemaining:     999_999_999,
			DurationUntilReset: durationpb.New(60e9),
		}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, bare{})
	log.Fatal(g.Serve(ln))
}
