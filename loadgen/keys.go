package loadgen

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// KeyDist names how workers choose the execution of each operation.
type KeyDist string

// Key distributions.
const (
	// Uniform picks every execution with the same probability.
	Uniform KeyDist = "uniform"
	// Zipfian picks the execution of rank k (1-based) with probability
	// proportional to 1/k^θ.
	Zipfian KeyDist = "zipfian"
	// HotSet sends HotFraction of the operations to the first HotSet share
	// of the executions, the rest uniformly to the others.
	HotSet KeyDist = "hotset"
)

// Keys configures the key choice.
type Keys struct {
	// Dist is uniform, zipfian or hotset.
	Dist KeyDist `json:"dist"`
	// Theta is the zipfian exponent, in (0, 10] (0.99 is YCSB's default).
	Theta float64 `json:"theta,omitempty"`
	// HotSet is the share of executions that are hot (0 < h < 1).
	HotSet float64 `json:"hot_set,omitempty"`
	// HotFraction is the share of operations that go to the hot set.
	HotFraction float64 `json:"hot_fraction,omitempty"`
}

// Validate checks the distribution's parameters.
func (k Keys) Validate() error {
	switch k.Dist {
	case Uniform:
	case Zipfian:
		if !(k.Theta > 0) || k.Theta > 10 {
			return fmt.Errorf("zipfian theta must be in (0, 10] (got %g)", k.Theta)
		}
	case HotSet:
		if !(k.HotSet > 0 && k.HotSet < 1) {
			return fmt.Errorf("hot set share must be in (0, 1) (got %g)", k.HotSet)
		}
		if !(k.HotFraction >= 0 && k.HotFraction <= 1) {
			return fmt.Errorf("hot fraction must be in [0, 1] (got %g)", k.HotFraction)
		}
	default:
		return fmt.Errorf("key distribution %q: want uniform, zipfian or hotset", k.Dist)
	}
	return nil
}

// String describes the distribution, e.g. "zipfian(θ=0.99)".
func (k Keys) String() string {
	switch k.Dist {
	case Zipfian:
		return fmt.Sprintf("zipfian(θ=%g)", k.Theta)
	case HotSet:
		return fmt.Sprintf("hotset(%g%% of keys get %g%% of ops)", k.HotSet*100, k.HotFraction*100)
	}
	return string(k.Dist)
}

// chooser picks execution indexes 0..n-1 with a fixed distribution.
type chooser struct {
	n   int
	cdf []float64 // nil for uniform; cdf[i] = P(index <= i)
}

func newChooser(k Keys, n int) (*chooser, error) {
	if n < 1 {
		return nil, fmt.Errorf("need at least one execution (got %d)", n)
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	c := &chooser{n: n}
	if k.Dist == Uniform {
		return c, nil
	}
	mass := keyMass(k, n)
	c.cdf = make([]float64, n)
	var sum float64
	for i, m := range mass {
		sum += m
		c.cdf[i] = sum
	}
	c.cdf[n-1] = 1
	return c, nil
}

// next returns an index drawn from the distribution.
func (c *chooser) next(r *rand.Rand) int {
	if c.cdf == nil {
		return r.IntN(c.n)
	}
	u := r.Float64()
	i := sort.SearchFloat64s(c.cdf, u)
	if i >= c.n {
		i = c.n - 1
	}
	return i
}

// keyMass returns each execution's probability of being chosen (summing to 1).
func keyMass(k Keys, n int) []float64 {
	mass := make([]float64, n)
	switch k.Dist {
	case Zipfian:
		var z float64
		for i := range mass {
			mass[i] = 1 / math.Pow(float64(i+1), k.Theta)
			z += mass[i]
		}
		for i := range mass {
			mass[i] /= z
		}
	case HotSet:
		hot := int(math.Ceil(k.HotSet * float64(n)))
		hot = min(max(hot, 1), n)
		cold := n - hot
		for i := range mass {
			switch {
			case cold == 0:
				mass[i] = 1 / float64(n)
			case i < hot:
				mass[i] = k.HotFraction / float64(hot)
			default:
				mass[i] = (1 - k.HotFraction) / float64(cold)
			}
		}
	default:
		for i := range mass {
			mass[i] = 1 / float64(n)
		}
	}
	return mass
}

// ExecutionIDs returns the n execution ids of a workload seeded with seed:
// lowercase 32-hex-digit uuids, the same for the same seed on every target.
func ExecutionIDs(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 0x6578656375746e73)) // "executns"
	ids := make([]string, n)
	var b [16]byte
	for i := range ids {
		for j := 0; j < 16; j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				b[j+k] = byte(v >> (8 * k))
			}
		}
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // variant
		ids[i] = hex.EncodeToString(b[:])
	}
	return ids
}

// derivedID returns a 32-hex-digit id derived from s (for spawned children).
func derivedID(s string) string {
	h1 := fnv64(s)
	h2 := fnv64(s + "#")
	return fmt.Sprintf("%016x%016x", h1, h2)
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// ParseKeys parses "uniform", "zipfian", "zipfian:0.99", "hotset" or
// "hotset:0.01:0.9" (hot share of keys : share of operations).
func ParseKeys(s string) (Keys, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	k := Keys{Dist: KeyDist(strings.ToLower(parts[0]))}
	var err error
	num := func(i int, def float64) float64 {
		if i >= len(parts) || err != nil {
			return def
		}
		v, e := strconv.ParseFloat(strings.TrimSpace(parts[i]), 64)
		if e != nil {
			err = fmt.Errorf("key distribution %q: %q is not a number", s, parts[i])
		}
		return v
	}
	switch k.Dist {
	case Uniform:
		if len(parts) > 1 {
			return k, fmt.Errorf("key distribution %q: uniform takes no parameters", s)
		}
	case Zipfian:
		k.Theta = num(1, 0.99)
		if len(parts) > 2 {
			return k, fmt.Errorf("key distribution %q: want zipfian[:theta]", s)
		}
	case HotSet:
		k.HotSet, k.HotFraction = num(1, 0.01), num(2, 0.9)
		if len(parts) > 3 {
			return k, fmt.Errorf("key distribution %q: want hotset[:share:fraction]", s)
		}
	}
	if err != nil {
		return k, err
	}
	return k, k.Validate()
}
