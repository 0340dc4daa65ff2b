package loadgen_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pgshard/pgshard/loadgen"
)

func TestFitUSLRecoversKnownParameters(t *testing.T) {
	for _, want := range []loadgen.USL{
		{Lambda: 1000, Sigma: 0.05, Kappa: 0.002},
		{Lambda: 250, Sigma: 0.2, Kappa: 0.0001},
		{Lambda: 5000, Sigma: 0.01, Kappa: 0},
		{Lambda: 80, Sigma: 0, Kappa: 0.01},
	} {
		ns := []float64{1, 2, 4, 8, 16, 32, 48, 64}
		for _, noise := range []float64{0, 0.02} {
			r := rand.New(rand.NewPCG(7, 9))
			var xs []float64
			for _, n := range ns {
				xs = append(xs, want.X(n)*(1+noise*(2*r.Float64()-1)))
			}
			got, err := loadgen.FitUSL(ns, xs)
			if err != nil {
				t.Fatal(err)
			}
			tol := 1e-3
			if noise > 0 {
				tol = 0.15
			}
			if rel(got.Lambda, want.Lambda) > tol || math.Abs(got.Sigma-want.Sigma) > tol*math.Max(want.Sigma, 0.05) ||
				math.Abs(got.Kappa-want.Kappa) > tol*math.Max(want.Kappa, 0.002) {
				t.Errorf("noise %g: fit %v, want λ=%g σ=%g κ=%g", noise, got, want.Lambda, want.Sigma, want.Kappa)
			}
			if got.R2 < 0.95 {
				t.Errorf("noise %g: R² %g", noise, got.R2)
			}
		}
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / math.Abs(b) }

func TestFitUSLPeakAndErrors(t *testing.T) {
	u := loadgen.USL{Lambda: 1000, Sigma: 0.05, Kappa: 0.002}
	n := u.PeakN()
	if math.Abs(n-math.Sqrt(0.95/0.002)) > 1e-9 || u.X(n) < u.X(n-1) || u.X(n) < u.X(n+1) {
		t.Errorf("peak N %g is not the maximum", n)
	}
	if _, err := loadgen.FitUSL([]float64{1, 2}, []float64{1, 2}); err == nil {
		t.Error("fit with 2 points succeeded")
	}
	if _, err := loadgen.FitUSL([]float64{1, 2, 3}, []float64{1, math.NaN(), 3}); err == nil {
		t.Error("fit with NaN succeeded")
	}
}
