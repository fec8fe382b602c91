//go:build !unix

package server

import "time"

// processCPU is unknown here: benchmarks report no CPU time.
func processCPU() (time.Duration, bool) { return 0, false }
