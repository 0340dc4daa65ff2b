// Package ctxtime waits for a time unless a context ends first: the one
// sleep every package with a bounded wait uses (a foundation: it imports
// nothing of ours).
//
//	ctxtime.go  Sleep
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends: nil after d, else ctx's error. A d of
// zero or less waits nothing and returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
