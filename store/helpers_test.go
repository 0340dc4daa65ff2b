package store_test

import (
	"crypto/rand"
	"encoding/base64"
	"math"
	"strconv"
	"testing"

	"github.com/pgshard/pgshard/store"
)

func b64(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }

func itoa(n int) string { return strconv.Itoa(n) }

var randRead = rand.Read

// countRows runs a count query through the store's pool.
func countRows(t *testing.T, s *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(ctxT(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func nan() float64 { return math.NaN() }
