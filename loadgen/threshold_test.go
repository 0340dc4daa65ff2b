package loadgen_test

import (
	"math"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/loadgen"
)

func TestParseThreshold(t *testing.T) {
	for _, c := range []struct {
		in          string
		metric, arg string
		op          string
		value       float64
	}{
		{"p99(commit)>50ms", "p99", "commit", ">", 50},
		{" p99.9 ( op ) >= 1.5s ", "p99.9", "op", ">=", 1500},
		{"p50<200us", "p50", "op", "<", 0.2},
		{"errors>0", "errors", "", ">", 0},
		{"errors(40)>=1", "errors", "40", ">=", 1},
		{"throughput<1000", "throughput", "", "<", 1000},
		{"throughput<1.5k", "throughput", "", "<", 1500},
		{"error_rate>1%", "error_rate", "", ">", 0.01},
		{"hottest_share>0.4", "hottest_share", "", ">", 0.4},
		{"mean(load)!=0", "mean", "load", "!=", 0},
		{"max(timer_lag)>2s", "max", "timer_lag", ">", 2000},
		{"dropped==0", "dropped", "", "==", 0},
	} {
		th, err := loadgen.ParseThreshold(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if th.Metric != c.metric || th.Arg != c.arg || th.Op != c.op || math.Abs(th.Value-c.value) > 1e-9 {
			t.Errorf("%q: got %+v", c.in, th)
		}
	}
	for _, bad := range []string{"", "p99", "p99>", ">5", "p99=>5", "p101>5ms", "p99>5parsecs", "errrors>0",
		"throughput(x)>1", "p99((op))>1", "p99(op>1", "count>1", "p99>abc", "error_rate>1k", "p99(a b)>1", strings.Repeat("p", 300) + ">1"} {
		if th, err := loadgen.ParseThreshold(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, th)
		}
	}
}

func TestCheckThresholds(t *testing.T) {
	res := syntheticResult()
	ts, err := loadgen.ParseThresholds([]string{"p99(commit)>50ms", "errors>0", "throughput<1000", "p99(commit)>5ms", "p99(nosuch)>1ms", "errors(sqlstate_40)>=2"})
	if err != nil {
		t.Fatal(err)
	}
	got := loadgen.Check(res, ts)
	want := []bool{false, true, false, true, true, true}
	for i, b := range got {
		if b.Breached != want[i] {
			t.Errorf("%s: breached=%v, want %v (value %g, err %v)", b.Threshold.Text, b.Breached, want[i], b.Value, b.Err)
		}
	}
}

func TestParseSLO(t *testing.T) {
	s, err := loadgen.ParseSLO("p99=50ms, p50(commit)<=5ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0] != (loadgen.SLOTarget{Kind: "op", Percentile: 99, MaxMs: 50}) || s[1] != (loadgen.SLOTarget{Kind: "commit", Percentile: 50, MaxMs: 5}) {
		t.Fatalf("got %+v", s)
	}
	if got := s.String(); got != "p99(op)<=50ms,p50(commit)<=5ms" {
		t.Errorf("String() = %q", got)
	}
	res := syntheticResult()
	if ok, worst := s.Met(res); ok || worst < 1 {
		t.Errorf("Met = %v, %g; the synthetic commit p50 is above 5ms", ok, worst)
	}
	for _, bad := range []string{"", "p99", "x99=5ms", "p99=0", "p99=-1ms", "p99=5xs", "p99(=5ms"} {
		if s, err := loadgen.ParseSLO(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, s)
		}
	}
}

func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"p99(commit)>50ms", "errors>0", "throughput<1k", "error_rate>=1%", "p99.9(op)!=2s", "max(x)<1µs"} {
		f.Add(s)
	}
	res := syntheticResult()
	f.Fuzz(func(t *testing.T, s string) {
		th, err := loadgen.ParseThreshold(s)
		if err != nil {
			return
		}
		if math.IsNaN(th.Value) || math.IsInf(th.Value, 0) {
			t.Fatalf("%q: value %g", s, th.Value)
		}
		switch th.Op {
		case ">", ">=", "<", "<=", "==", "!=":
		default:
			t.Fatalf("%q: op %q", s, th.Op)
		}
		again, err := loadgen.ParseThreshold(th.Text)
		if err != nil || again != th {
			t.Fatalf("%q: reparse gave %+v, %v", s, again, err)
		}
		loadgen.Check(res, []loadgen.Threshold{th}) // must not panic
	})
}

func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"p99=50ms", "p99(commit)=20ms,p50=5ms", "p99.9<=1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slo, err := loadgen.ParseSLO(s)
		if err != nil {
			return
		}
		if len(slo) == 0 {
			t.Fatalf("%q: empty SLO without error", s)
		}
		for _, tg := range slo {
			if !(tg.MaxMs > 0) || math.IsInf(tg.MaxMs, 0) || tg.Percentile < 0 || tg.Percentile > 100 || tg.Kind == "" {
				t.Fatalf("%q: bad target %+v", s, tg)
			}
		}
		again, err := loadgen.ParseSLO(slo.String())
		if err != nil || len(again) != len(slo) {
			t.Fatalf("%q: String %q reparses as %+v, %v", s, slo.String(), again, err)
		}
	})
}
