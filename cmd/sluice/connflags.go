package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/server"
)

// connFlags are the flags that bound serve's connections and gRPC calls
// in flight.
type connFlags struct {
	grpcRecv    time.Duration
	grpcStreams int
	grpcConns   int
	httpConns   int
	grpcIdle    time.Duration
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&c.grpcRecv, "grpc-recv-timeout", server.DefaultGRPCRecvTimeout, "")
	fs.IntVar(&c.grpcStreams, "grpc-max-streams", server.DefaultGRPCMaxStreams, "")
	fs.IntVar(&c.grpcConns, "grpc-max-connections", server.DefaultMaxConnections, "")
	fs.IntVar(&c.httpConns, "http-max-connections", server.DefaultMaxConnections, "")
	fs.DurationVar(&c.grpcIdle, "grpc-max-connection-idle", server.DefaultMaxConnectionIdle, "")
}

// check returns an error naming the first flag out of its range.
func (c *connFlags) check() error {
	for _, n := range []struct {
		name string
		v    int
		max  int
	}{
		{"grpc-max-streams", c.grpcStreams, server.MaxGRPCStreams},
		{"grpc-max-connections", c.grpcConns, server.MaxConnections},
		{"http-max-connections", c.httpConns, server.MaxConnections},
	} {
		if n.v < 1 || n.v > n.max {
			return fmt.Errorf("-%s %d must be between 1 and %d", n.name, n.v, n.max)
		}
	}
	switch {
	case c.grpcRecv <= 0 || c.grpcRecv > server.MaxGRPCRecvTimeout:
		return fmt.Errorf("-grpc-recv-timeout %v must be positive and at most %v", c.grpcRecv, server.MaxGRPCRecvTimeout)
	case c.grpcIdle < 0:
		return fmt.Errorf("-grpc-max-connection-idle %v must not be negative; 0 keeps idle connections open", c.grpcIdle)
	}
	return nil
}

// apply sets the bounds in cfg.
func (c *connFlags) apply(cfg *server.Settings) {
	cfg.GRPCRecvTimeout = c.grpcRecv
	cfg.GRPCMaxStreams = c.grpcStreams
	cfg.GRPCMaxConnections = c.grpcConns
	cfg.HTTPMaxConnections = c.httpConns
	cfg.MaxConnectionIdle = c.grpcIdle
	if c.grpcIdle == 0 {
		cfg.MaxConnectionIdle = -1 // server.Settings: negative is never
	}
}
