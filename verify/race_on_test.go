//go:build race

package verify_test

// raceEnabled: the race detector slows the checks about tenfold, so the
// large-history test checks a smaller history.
const raceEnabled = true
