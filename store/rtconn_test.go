package store_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/pgshard/pgshard/store"
)

// TestRoundTripCounting drives a wrapped connection through exchanges of
// known shape and checks the count: a round trip starts with each write
// that follows a read, however many writes or reads make it up.
func TestRoundTripCounting(t *testing.T) {
	type step struct {
		write bool
		n     int
	}
	w := func(n int) step { return step{true, n} }
	r := func(n int) step { return step{false, n} }
	tests := []struct {
		name  string
		steps []step
		want  uint64
	}{
		{"nothing", nil, 0},
		{"one request, one reply", []step{w(10), r(5)}, 1},
		{"pipeline: one write, replies read in pieces", []step{w(100), r(3), r(3), r(3)}, 1},
		{"two writes before the reply are one round trip", []step{w(1), w(1), r(2)}, 1},
		{"statement by statement", []step{w(1), r(1), w(1), r(1), w(1), r(1)}, 3},
		{"trailing write", []step{w(1), r(1), w(1)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			conn, count := store.CountRoundTrips(client)
			defer conn.Close()
			for _, s := range tt.steps {
				buf := make([]byte, s.n)
				done := make(chan error, 1)
				if s.write {
					go func() { _, err := io.ReadFull(server, buf); done <- err }()
					if _, err := conn.Write(buf); err != nil {
						t.Fatal(err)
					}
				} else {
					go func() { _, err := server.Write(buf); done <- err }()
					if _, err := io.ReadFull(conn, buf); err != nil {
						t.Fatal(err)
					}
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("pipe stuck")
				}
			}
			if got := count(); got != tt.want {
				t.Errorf("counted %d round trips, want %d", got, tt.want)
			}
		})
	}
}
