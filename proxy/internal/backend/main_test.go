package backend

import (
	"os"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestMain: clustertest.Main stops the cluster the pool's tests against
// Postgres start, and fails the run on leaked goroutines.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
