package loadgen_test

import (
	"math"
	"regexp"
	"strconv"
	"testing"

	"github.com/pgshard/pgshard/loadgen"
)

func TestExecutionIDsAreStableLowercaseUUIDHex(t *testing.T) {
	a, b := loadgen.ExecutionIDs(42, 1000), loadgen.ExecutionIDs(42, 1000)
	re := regexp.MustCompile(`^[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for i := range a {
		if a[i] != b[i] || !re.MatchString(a[i]) || seen[a[i]] {
			t.Fatalf("id %d: %q / %q (dup %v)", i, a[i], b[i], seen[a[i]])
		}
		seen[a[i]] = true
	}
	if loadgen.ExecutionIDs(43, 1)[0] == a[0] {
		t.Error("another seed gives the same ids")
	}
}

func TestParseKeys(t *testing.T) {
	for in, want := range map[string]loadgen.Keys{
		"uniform":         {Dist: loadgen.Uniform},
		"zipfian":         {Dist: loadgen.Zipfian, Theta: 0.99},
		"zipfian:1.2":     {Dist: loadgen.Zipfian, Theta: 1.2},
		"hotset":          {Dist: loadgen.HotSet, HotSet: 0.01, HotFraction: 0.9},
		"hotset:0.1:0.5":  {Dist: loadgen.HotSet, HotSet: 0.1, HotFraction: 0.5},
		" Uniform ":       {Dist: loadgen.Uniform},
		"ZIPFIAN:0.5":     {Dist: loadgen.Zipfian, Theta: 0.5},
		"hotset:0.2:0.99": {Dist: loadgen.HotSet, HotSet: 0.2, HotFraction: 0.99},
	} {
		got, err := loadgen.ParseKeys(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "gaussian", "uniform:1", "zipfian:0", "zipfian:-1", "zipfian:x", "zipfian:1:2", "zipfian:0.5abc", "zipfian:NaN", "hotset:0.1:NaN", "hotset:1.5", "hotset:0.1:2", "hotset:a:b", "hotset:0.1:0.5:1"} {
		if k, err := loadgen.ParseKeys(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, k)
		}
	}
}

// The zipfian workload's hottest execution gets the share its mass says:
// BucketMass and the workers' choice agree (measured through the fake).
func TestZipfianMassMatchesTheoryAndSkewsShards(t *testing.T) {
	w := loadgen.DefaultOptions().Workload
	w.Executions = 1000
	w.Keys = loadgen.Keys{Dist: loadgen.Zipfian, Theta: 0.99}
	mass := loadgen.BucketMass(w, 4096)
	var sum, hottest float64
	for _, m := range mass {
		sum += m
		hottest = math.Max(hottest, m)
	}
	var h float64 // harmonic number of order θ
	for k := 1; k <= 1000; k++ {
		h += 1 / math.Pow(float64(k), 0.99)
	}
	if math.Abs(sum-1) > 1e-9 || hottest < 1/h-1e-9 {
		t.Errorf("mass sums to %g, hottest bucket %g < rank-1 share %g", sum, hottest, 1/h)
	}
	uniform := w
	uniform.Keys = loadgen.Keys{Dist: loadgen.Uniform}
	var uh float64
	for _, m := range loadgen.BucketMass(uniform, 4096) {
		uh = math.Max(uh, m)
	}
	if uh >= hottest {
		t.Errorf("uniform hottest bucket %g not below zipfian %g", uh, hottest)
	}
}

func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{"uniform", "zipfian:0.99", "hotset:0.01:0.9", "hotset"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := loadgen.ParseKeys(s)
		if err != nil {
			return
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("%q parsed to invalid %+v: %v", s, k, err)
		}
		again, err := loadgen.ParseKeys(reformat(k))
		if err != nil || again != k {
			t.Fatalf("%q: %+v does not reparse: %+v, %v", s, k, again, err)
		}
	})
}

func reformat(k loadgen.Keys) string {
	switch k.Dist {
	case loadgen.Zipfian:
		return "zipfian:" + strconvG(k.Theta)
	case loadgen.HotSet:
		return "hotset:" + strconvG(k.HotSet) + ":" + strconvG(k.HotFraction)
	}
	return string(k.Dist)
}

func strconvG(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
