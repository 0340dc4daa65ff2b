package loadgentest

import (
	"os"
	"runtime/pprof"
	"testing"
)

// StartCPUProfile starts a CPU profile into the file PGSHARD_BENCH_CPUPROFILE
// names, with "."+suffix appended when suffix is not empty, so that a
// benchmark profiles only its measured interval; the returned function
// stops it. Without the variable it does nothing.
func StartCPUProfile(b testing.TB, suffix string) func() {
	path := os.Getenv("PGSHARD_BENCH_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	if suffix != "" {
		path += "." + suffix
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
