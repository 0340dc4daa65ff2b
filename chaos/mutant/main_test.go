package mutant_test

import (
	"os"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestMain runs the tests on the package's shared cluster (and private ones
// for the configuration mutant), then checks that no goroutine outlived
// them.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
