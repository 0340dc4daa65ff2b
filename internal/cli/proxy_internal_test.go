package cli

import (
	"context"
	"errors"
	"testing"
)

// TestSameListenAddr: a proxy takes over only the socket of the address it
// is configured for (port 0: whichever the predecessor has).
func TestSameListenAddr(t *testing.T) {
	for _, tc := range []struct {
		configured, actual string
		want               bool
	}{
		{"127.0.0.1:6543", "127.0.0.1:6543", true},
		{"127.0.0.1:0", "127.0.0.1:41234", true},
		{":6543", "127.0.0.1:6543", true},
		{"localhost:6543", "127.0.0.1:6543", true},
		{"127.0.0.1:6543", "127.0.0.1:6544", false},
		{"10.1.2.3:6543", "127.0.0.1:6543", false},
		{"bad", "127.0.0.1:6543", false},
	} {
		if got := sameListenAddr(tc.configured, tc.actual); got != tc.want {
			t.Errorf("sameListenAddr(%q, %q) = %v, want %v", tc.configured, tc.actual, got, tc.want)
		}
	}
}

// TestIsSignalCause: only a signal's cancellation is a graceful stop.
func TestIsSignalCause(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("terminated signal received"))
	if !isSignalCause(ctx) {
		t.Error("a signal's cause not recognized")
	}
	ctx, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if isSignalCause(ctx) {
		t.Error("a plain cancellation taken for a signal")
	}
}
