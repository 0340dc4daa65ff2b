package clustertest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/cluster"
)

func TestDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^t_([a-z0-9_]*_)?[0-9a-f]{12}$`)
	for _, test := range []string{"TestX", "TestX/sub_test#01", strings.Repeat("Ü", 80), "Test/" + strings.Repeat("x", 200), ""} {
		a, b := databaseName(test), databaseName(test)
		if len(a) > 63 || !valid.MatchString(a) || strings.Contains(a, "__") {
			t.Errorf("databaseName(%q) = %q", test, a)
		}
		if a == b {
			t.Errorf("databaseName(%q) is not unique: %q twice", test, a)
		}
	}
	if got := databaseName("TestX/sub_test#01"); !strings.HasPrefix(got, "t_testx_sub_test_01_") {
		t.Errorf("databaseName = %q", got)
	}
}

func TestChooseProvider(t *testing.T) {
	t.Setenv(EnvProvider, "kubernetes")
	if _, err := chooseProvider(context.Background(), cluster.Spec{}); err == nil || !strings.Contains(err.Error(), EnvProvider) {
		t.Errorf("unknown provider: %v", err)
	}
	t.Setenv(EnvProvider, "local")
	p, err := chooseProvider(context.Background(), cluster.Spec{BinDir: t.TempDir()})
	var un *unavailableError
	if p != nil || !errors.As(err, &un) || !strings.Contains(err.Error(), "postgres and initdb") {
		t.Errorf("local provider without binaries: %v, %v; want a reason to skip", p, err)
	}
}
