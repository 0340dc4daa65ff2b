package ctxtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

// TestSleep: a sleep ends with nil after its time, with the context's
// error when the context ended first (at once, however long the sleep),
// and a sleep of nothing reports the context's state.
func TestSleep(t *testing.T) {
	if err := ctxtime.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a sleep of 1ms: %v", err)
	}
	if err := ctxtime.Sleep(context.Background(), 0); err != nil {
		t.Errorf("a sleep of nothing: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ctxtime.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("an hour's sleep of an ended context: %v, want context.Canceled", err)
	}
	if err := ctxtime.Sleep(ctx, -time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("a negative sleep of an ended context: %v, want context.Canceled", err)
	}
}
