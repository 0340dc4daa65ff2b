package loadgen

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Self-check thresholds: beyond them the report warns that the generator
// or the machine, not the database, may have limited the run.
const (
	warnSchedP99Ms  = 5.0  // Go scheduler latency p99
	warnLagP99Ms    = 5.0  // open-loop dispatcher lag p99
	warnGenCPU      = 0.5  // generator's share of all CPUs
	goalGenCPUUS    = 50.0 // generator CPU per operation it aims at (µs)
	warnHostCPU     = 0.9  // machine CPU busy
	warnLoadPerCPU  = 1.5  // load average per CPU
	warnLateShare   = 0.01 // open-loop late starts
	schedMetricName = "/sched/latencies:seconds"
)

// selfChecker samples the generator's and the machine's health.
type selfChecker struct {
	cpus                     int
	lastWall                 time.Time
	lastProc                 time.Duration // generator CPU time
	measuredProc             time.Duration // generator CPU time in the measured period
	lastBusy, lastTotal      uint64        // machine CPU ticks
	sched                    []metrics.Sample
	lastSched                []uint64
	buckets                  []float64
	measuredSched            []uint64
	genSum, hostSum, samples float64
	load1Max                 float64
}

func newSelfChecker() *selfChecker {
	s := &selfChecker{cpus: runtime.NumCPU(), lastWall: time.Now()}
	s.lastProc, _ = procCPU()
	s.lastBusy, s.lastTotal, _ = hostTicks()
	s.sched = []metrics.Sample{{Name: schedMetricName}}
	metrics.Read(s.sched)
	if s.sched[0].Value.Kind() == metrics.KindFloat64Histogram {
		h := s.sched[0].Value.Float64Histogram()
		s.buckets = h.Buckets
		s.lastSched = append([]uint64(nil), h.Counts...)
		s.measuredSched = make([]uint64, len(h.Counts))
	}
	return s
}

// checkSample is one second's self-check.
type checkSample struct {
	genCPU, hostCPU, load1, schedP99 float64
}

// sample measures the interval since the previous sample; measured adds
// the interval's scheduler latencies to the measured-period total.
func (s *selfChecker) sample(measured bool) checkSample {
	var c checkSample
	now := time.Now()
	wall := now.Sub(s.lastWall).Seconds()
	s.lastWall = now
	if p, err := procCPU(); err == nil && wall > 0 {
		c.genCPU = (p - s.lastProc).Seconds() / wall / float64(s.cpus)
		if measured {
			s.measuredProc += p - s.lastProc
		}
		s.lastProc = p
	}
	if b, t, err := hostTicks(); err == nil && t > s.lastTotal {
		c.hostCPU = float64(b-s.lastBusy) / float64(t-s.lastTotal)
		s.lastBusy, s.lastTotal = b, t
	}
	c.load1, _ = load1()
	if s.buckets != nil {
		metrics.Read(s.sched)
		h := s.sched[0].Value.Float64Histogram()
		delta := make([]uint64, len(h.Counts))
		for i := range h.Counts {
			delta[i] = h.Counts[i] - s.lastSched[i]
			if measured {
				s.measuredSched[i] += delta[i]
			}
		}
		s.lastSched = append(s.lastSched[:0], h.Counts...)
		c.schedP99 = histQuantile(s.buckets, delta, 0.99) * 1000
	}
	if measured {
		s.genSum += c.genCPU
		s.hostSum += c.hostCPU
		s.samples++
		s.load1Max = max(s.load1Max, c.load1)
	}
	return c
}

// histQuantile returns the upper bound of the bucket holding quantile q of
// a runtime/metrics histogram (0 when empty).
func histQuantile(buckets []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	target := uint64(math.Ceil(q * float64(total)))
	var cum uint64
	for i, c := range counts {
		cum += c
		if cum >= target {
			if hi := buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return buckets[i]
		}
	}
	return buckets[len(buckets)-1]
}

func histMaxBucket(buckets []float64, counts []uint64) float64 {
	for i := len(counts) - 1; i >= 0; i-- {
		if counts[i] > 0 {
			if hi := buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return buckets[i]
		}
	}
	return 0
}

// summary returns the measured period's self-check (warnings are added
// by the result builder, which knows the run's other figures).
func (s *selfChecker) summary() SelfCheck {
	sc := SelfCheck{CPUs: s.cpus, Load1Max: s.load1Max, GenCPUSeconds: s.measuredProc.Seconds(), Warnings: []string{}}
	if s.samples > 0 {
		sc.GenCPU = s.genSum / s.samples
		sc.HostCPU = s.hostSum / s.samples
	}
	if s.buckets != nil {
		sc.SchedP99 = histQuantile(s.buckets, s.measuredSched, 0.99) * 1000
		sc.SchedMax = histMaxBucket(s.buckets, s.measuredSched) * 1000
	}
	return sc
}

// warnings returns what may have limited a run other than the database.
func warnings(sc SelfCheck, ol *OpenLoopStats) []string {
	w := []string{}
	if ol != nil {
		if ol.LagP99 > warnLagP99Ms {
			w = append(w, fmt.Sprintf("generator saturated: the open-loop dispatcher woke up %.1f ms late at p99, so the offered rate was lower than asked (latencies still count from the intended times)", ol.LagP99))
		}
		if ol.Dropped > 0 {
			w = append(w, fmt.Sprintf("%d arrivals were dropped at max_outstanding=%d: the system did not keep up with %.0f ops/s", ol.Dropped, ol.MaxOutstanding, ol.Rate))
		}
		if ol.Intended > 0 && float64(ol.Late)/float64(ol.Intended) > warnLateShare {
			w = append(w, fmt.Sprintf("%d of %d operations (%.1f%%) started more than %.0f ms after their intended time: the system (or the in-flight bound) queued them", ol.Late, ol.Intended, 100*float64(ol.Late)/float64(ol.Intended), ol.LateThresholdMs))
		}
	}
	if sc.SchedP99 > warnSchedP99Ms {
		w = append(w, fmt.Sprintf("generator scheduling lag: runnable goroutines waited %.1f ms at p99 for a CPU; up to that much of each latency may be the generator's own queueing, not the database", sc.SchedP99))
	}
	if sc.GenCPU > warnGenCPU {
		w = append(w, fmt.Sprintf("the generator used %.0f%% of the machine's %d CPUs (%.0f µs of CPU per operation, goal %.0f), which the database shares: a remote generator would measure a faster database", 100*sc.GenCPU, sc.CPUs, sc.GenCPUPerOpUS, goalGenCPUUS))
	}
	if sc.HostCPU > warnHostCPU {
		w = append(w, fmt.Sprintf("machine overloaded: CPU %.0f%% busy over the run (generator, poolers and every shard share %d CPUs): the figures are this machine's limit", 100*sc.HostCPU, sc.CPUs))
	}
	if sc.CPUs > 0 && sc.Load1Max > warnLoadPerCPU*float64(sc.CPUs) {
		w = append(w, fmt.Sprintf("load average reached %.1f on %d CPUs: processes waited for CPU", sc.Load1Max, sc.CPUs))
	}
	return w
}

// procCPU returns the process's user+system CPU time so far.
func procCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// hostTicks returns the machine's busy and total CPU ticks from /proc/stat.
func hostTicks() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseHostStat(string(b))
}

func parseHostStat(s string) (busy, total uint64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("proc stat: no cpu line")
	}
	var idle uint64
	for i, x := range f[1:] {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("proc stat: %w", err)
		}
		if i >= 8 { // guest, guest_nice are already in user, nice
			break
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return total - idle, total, nil
}

func load1() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("loadavg: empty")
	}
	return strconv.ParseFloat(f[0], 64)
}
