package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/server"
)

// rlqsFlags are the flags of Envoy's Rate Limit Quota Service.
type rlqsFlags struct {
	abandon time.Duration
}

func (r *rlqsFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&r.abandon, "rlqs-abandon-after", server.DefaultRLQSAbandonAfter, "")
}

func (r *rlqsFlags) check() error {
	if r.abandon <= 0 {
		return fmt.Errorf("-rlqs-abandon-after %v must be positive", r.abandon)
	}
	return nil
}

// apply sets the RLQS settings in cfg.
func (r *rlqsFlags) apply(cfg *server.Settings) {
	cfg.RLQS.AbandonAfter = r.abandon
}
