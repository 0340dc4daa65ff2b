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

// WithClock returns o with the pacer reading now instead of the clock.
func WithClock(o Options, now func() time.Time) Options {
	o.now = now
	return o
}

// ValidateOptions is Options.validate.
func ValidateOptions(o Options) error { return o.validate() }

// DeleteBatchSQL is the clean-up's batch statement on table name.
func DeleteBatchSQL(name string) string {
	for _, t := range tables {
		if t.name == name {
			return deleteBatchSQL(t)
		}
	}
	return ""
}
