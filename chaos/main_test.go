package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// binDir holds the pgshard binary the proxy tests run, built on first use.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgshard-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := clustertest.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var build struct {
	once sync.Once
	bin  string
	err  error
}

// pgshardBin builds the pgshard binary once per test binary.
func pgshardBin(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		// A cold build compiles pg_query's C sources: minutes on a loaded
		// 2-core machine. The bound is for a build that hangs, not a slow one.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		bin := filepath.Join(binDir, "pgshard")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/pgshard/pgshard/cmd/pgshard").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		build.bin = bin
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}
