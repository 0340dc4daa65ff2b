package loadgen

import (
	"errors"
	"fmt"
	"math"
)

// USL is a fit of the Universal Scalability Law
//
//	X(N) = λN / (1 + σ(N−1) + κN(N−1))
//
// to throughput X measured at concurrency N: λ is the throughput of one
// worker without contention, σ the contention (serial fraction), κ the
// coherency (crosstalk) cost.
type USL struct {
	Lambda float64 `json:"lambda"`
	Sigma  float64 `json:"sigma"`
	Kappa  float64 `json:"kappa"`
	// R2 is the coefficient of determination of the fit (1 = perfect).
	R2 float64 `json:"r2"`
	// RMSE is the root mean squared error of the fit (ops/s).
	RMSE float64 `json:"rmse"`
	// Points is how many measurements were fitted.
	Points int `json:"points"`
}

// X returns the modelled throughput at concurrency n.
func (u USL) X(n float64) float64 {
	return u.Lambda * n / (1 + u.Sigma*(n-1) + u.Kappa*n*(n-1))
}

// PeakN is the concurrency of the highest modelled throughput
// (sqrt((1−σ)/κ)); +Inf when κ = 0 (throughput approaches λ/σ).
func (u USL) PeakN() float64 {
	if u.Kappa <= 0 {
		return math.Inf(1)
	}
	return math.Sqrt((1 - u.Sigma) / u.Kappa)
}

// PeakX is the highest modelled throughput.
func (u USL) PeakX() float64 {
	n := u.PeakN()
	if math.IsInf(n, 1) {
		if u.Sigma <= 0 {
			return math.Inf(1)
		}
		return u.Lambda / u.Sigma
	}
	return u.X(n)
}

// String summarizes the fit with its peak.
func (u USL) String() string {
	return fmt.Sprintf("λ=%.4g ops/s per worker, σ=%.4g, κ=%.4g (R²=%.3f, %d points); peak %.0f ops/s at N≈%.1f",
		u.Lambda, u.Sigma, u.Kappa, u.R2, u.Points, u.PeakX(), u.PeakN())
}

// FitUSL fits the USL to (n[i], x[i]) by Levenberg–Marquardt nonlinear
// least squares with σ and κ kept non-negative (σ ≤ 1), started from a
// few initial guesses; it needs at least 3 points with distinct n.
func FitUSL(n, x []float64) (USL, error) {
	if len(n) != len(x) {
		return USL{}, errors.New("usl: n and x differ in length")
	}
	distinct := map[float64]bool{}
	for i := range n {
		if !(n[i] > 0) || !(x[i] >= 0) || math.IsInf(x[i], 0) {
			return USL{}, fmt.Errorf("usl: bad point (%g, %g)", n[i], x[i])
		}
		distinct[n[i]] = true
	}
	if len(distinct) < 3 {
		return USL{}, fmt.Errorf("usl: need at least 3 distinct concurrency levels, have %d", len(distinct))
	}
	// λ guess: the best per-worker throughput seen (usually at the smallest N).
	var lam0 float64
	for i := range n {
		lam0 = math.Max(lam0, x[i]/n[i])
	}
	if lam0 <= 0 {
		return USL{}, errors.New("usl: all throughputs are zero")
	}
	best := USL{}
	bestSSE := math.Inf(1)
	for _, s0 := range []float64{0, 0.01, 0.1, 0.5} {
		for _, k0 := range []float64{0, 1e-5, 1e-3, 1e-2} {
			p := lm(n, x, [3]float64{lam0, s0, k0})
			if sse := uslSSE(n, x, p); sse < bestSSE {
				bestSSE = sse
				best = USL{Lambda: p[0], Sigma: p[1], Kappa: p[2]}
			}
		}
	}
	var mean float64
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	var sst float64
	for _, v := range x {
		sst += (v - mean) * (v - mean)
	}
	best.Points = len(x)
	best.RMSE = math.Sqrt(bestSSE / float64(len(x)))
	if sst > 0 {
		best.R2 = 1 - bestSSE/sst
	} else if bestSSE == 0 {
		best.R2 = 1
	}
	return best, nil
}

func uslSSE(n, x []float64, p [3]float64) float64 {
	u := USL{Lambda: p[0], Sigma: p[1], Kappa: p[2]}
	var s float64
	for i := range n {
		d := x[i] - u.X(n[i])
		s += d * d
	}
	return s
}

func project(p [3]float64) [3]float64 {
	p[0] = math.Max(p[0], 1e-12)
	p[1] = math.Min(math.Max(p[1], 0), 1)
	p[2] = math.Max(p[2], 0)
	return p
}

// lm runs Levenberg–Marquardt from p.
func lm(n, x []float64, p [3]float64) [3]float64 {
	p = project(p)
	mu := 1e-3
	sse := uslSSE(n, x, p)
	for iter := 0; iter < 500; iter++ {
		var jtj [3][3]float64
		var jtr [3]float64
		for i := range n {
			N := n[i]
			D := 1 + p[1]*(N-1) + p[2]*N*(N-1)
			f := p[0] * N / D
			j := [3]float64{N / D, -p[0] * N * (N - 1) / (D * D), -p[0] * N * N * (N - 1) / (D * D)}
			r := x[i] - f
			for a := 0; a < 3; a++ {
				jtr[a] += j[a] * r
				for b := 0; b < 3; b++ {
					jtj[a][b] += j[a] * j[b]
				}
			}
		}
		improved := false
		for try := 0; try < 20; try++ {
			var m [3][3]float64
			for a := 0; a < 3; a++ {
				m[a] = jtj[a]
				m[a][a] += mu * math.Max(jtj[a][a], 1e-12)
			}
			d, ok := solve3(m, jtr)
			if !ok {
				mu *= 10
				continue
			}
			q := project([3]float64{p[0] + d[0], p[1] + d[1], p[2] + d[2]})
			if s := uslSSE(n, x, q); s < sse {
				rel := (sse - s) / math.Max(sse, 1e-300)
				p, sse = q, s
				mu = math.Max(mu/10, 1e-12)
				improved = true
				if rel < 1e-12 {
					return p
				}
				break
			}
			mu *= 10
		}
		if !improved || sse == 0 {
			return p
		}
	}
	return p
}

// solve3 solves m·d = v by Gaussian elimination with partial pivoting.
func solve3(m [3][3]float64, v [3]float64) ([3]float64, bool) {
	for c := 0; c < 3; c++ {
		piv := c
		for r := c + 1; r < 3; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[piv][c]) {
				piv = r
			}
		}
		if math.Abs(m[piv][c]) < 1e-300 {
			return [3]float64{}, false
		}
		m[c], m[piv] = m[piv], m[c]
		v[c], v[piv] = v[piv], v[c]
		for r := c + 1; r < 3; r++ {
			f := m[r][c] / m[c][c]
			for k := c; k < 3; k++ {
				m[r][k] -= f * m[c][k]
			}
			v[r] -= f * v[c]
		}
	}
	var d [3]float64
	for r := 2; r >= 0; r-- {
		s := v[r]
		for k := r + 1; k < 3; k++ {
			s -= m[r][k] * d[k]
		}
		d[r] = s / m[r][r]
	}
	for _, x := range d {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return d, false
		}
	}
	return d, true
}
