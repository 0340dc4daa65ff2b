package route_test

import (
	"flag"
	"os"
	"testing"

	"github.com/pgshard/pgshard/cluster/clustertest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestMain: clustertest.Main also fails the run on leaked goroutines.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
