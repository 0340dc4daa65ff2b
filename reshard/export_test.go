package reshard

import (
	"context"
	"time"
)

// WithPause returns o with the pacer's pauses going to pause instead of
// sleeping (tests count them).
func WithPause(o Options, pause func(context.Context, time.Duration) error) Options {
	o.pause = pause
	return o
}
