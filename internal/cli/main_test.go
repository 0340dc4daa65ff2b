package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/internal/cli"
)

// TestMain is shared by every command's tests in this package: it stops the
// test clusters they start.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// result is one pgshard invocation.
type result struct {
	code           int
	stdout, stderr string
}

// run executes pgshard in-process with a clean PGSHARD_* environment (the
// tests' own PGSHARD_TEST_* variables are exempt from the config check).
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runWithin(t, 3*time.Minute, stdin, args...)
}

// runWithin is run with its own bound, for commands that do several
// bounded runs in a row (chaos mutants: the control and each mutant).
func runWithin(t *testing.T, d time.Duration, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	code := cli.Run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustRun fails the test unless pgshard exits 0.
func mustRun(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := run(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("pgshard %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}
