package main

import (
	"encoding/json"
	"io"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// stats are the process's counters: cumulative, except the latency samples, which each report
// takes and clears.
type stats struct {
	// Every answer from the apiservers, and among them the 429s and 5xx (client-go's own
	// retries of 429s included).
	requests, throttled, serverErrors atomic.Int64

	registered, existedNodes    atomic.Int64
	registerErrors              atomic.Int64
	leaseRenewals, leaseErrors  atomic.Int64
	statusUpdates, statusErrors atomic.Int64
	podsStarted, podsDeleted    atomic.Int64
	podErrors                   atomic.Int64
	// --kubelet-watches: the list-and-watches running now, and the objects and events they
	// have delivered (a relist's objects included).
	watches, watchEvents atomic.Int64

	registrationStarted time.Time // set before any worker starts

	mu                        sync.Mutex
	registrationSecondsByNode []float64
	renewMillis, lagMillis    []float64 // since the last report
}

// renewed records a successful lease write that took latency.
func (s *stats) renewed(latency time.Duration) {
	s.leaseRenewals.Add(1)
	s.mu.Lock()
	s.renewMillis = append(s.renewMillis, float64(latency)/float64(time.Millisecond))
	s.mu.Unlock()
}

// late records how long after its time a lease renewal started: the fleet's own delay (its
// workers or its client's rate limit), not the apiserver's.
func (s *stats) late(lag time.Duration) {
	s.mu.Lock()
	s.lagMillis = append(s.lagMillis, float64(lag)/float64(time.Millisecond))
	s.mu.Unlock()
}

// nodeRegistered records a registration that took latency from its first attempt, and tells
// whether it was the last of total.
func (s *stats) nodeRegistered(latency time.Duration, existed bool, total int) bool {
	s.mu.Lock()
	s.registrationSecondsByNode = append(s.registrationSecondsByNode, latency.Seconds())
	s.mu.Unlock()
	if existed {
		s.existedNodes.Add(1)
	}
	return s.registered.Add(1) == int64(total)
}

// percentile is the q-quantile (0 < q <= 1) of samples by the nearest-rank method: the
// smallest sample that at least q of the samples do not exceed. No samples: NaN. samples is
// sorted in place.
func percentile(samples []float64, q float64) float64 {
	if len(samples) == 0 {
		return math.NaN()
	}
	sort.Float64s(samples)
	rank := int(math.Ceil(q*float64(len(samples)))) - 1
	return samples[min(max(rank, 0), len(samples)-1)]
}

// rounded is x to 3 decimals, or nil (JSON null) when x is NaN: no samples.
func rounded(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	r := math.Round(x*1000) / 1000
	return &r
}

// registeredEvent is printed once, when every node of the process is registered.
type registeredEvent struct {
	Event   string   `json:"event"` // "registered"
	Nodes   int      `json:"nodes"`
	Existed int64    `json:"existed"` // already registered (a restart): their status was refreshed
	Seconds float64  `json:"seconds"` // from the first registration attempt to the last success
	P50     *float64 `json:"p50"`     // seconds, per node: first create attempt to success
	P99     *float64 `json:"p99"`
	Errors  int64    `json:"errors"` // failed attempts, retried
}

func (s *stats) registeredEvent(nodes int) registeredEvent {
	s.mu.Lock()
	samples := append([]float64(nil), s.registrationSecondsByNode...)
	s.mu.Unlock()
	return registeredEvent{
		Event:   "registered",
		Nodes:   nodes,
		Existed: s.existedNodes.Load(),
		Seconds: *rounded(time.Since(s.registrationStarted).Seconds()),
		P50:     rounded(percentile(samples, 0.5)),
		P99:     rounded(percentile(samples, 0.99)),
		Errors:  s.registerErrors.Load(),
	}
}

// reportEvent is printed every --report-every, and once more on exit (final).
type reportEvent struct {
	Event          string   `json:"event"` // "report"
	T              int64    `json:"t"`     // unix seconds
	Final          bool     `json:"final,omitempty"`
	Nodes          int64    `json:"nodes"` // registered so far
	LeaseRenewals  int64    `json:"leaseRenewals"`
	LeaseErrors    int64    `json:"leaseErrors"`
	StatusUpdates  int64    `json:"statusUpdates"`
	StatusErrors   int64    `json:"statusErrors"`
	PodsStarted    int64    `json:"podsStarted"`
	PodsDeleted    int64    `json:"podsDeleted"`
	PodErrors      int64    `json:"podErrors"`
	RegisterErrors int64    `json:"registerErrors"`
	Requests       int64    `json:"requests"`
	Throttled      int64    `json:"throttled"`    // 429 answers
	ServerErrors   int64    `json:"serverErrors"` // 5xx answers
	RenewP50Ms     *float64 `json:"renewP50Ms"`   // lease write latency over the interval; null: none
	RenewP99Ms     *float64 `json:"renewP99Ms"`
	LagP99Ms       *float64 `json:"lagP99Ms"` // how late renewals started: the fleet's own saturation
	Watches        int64    `json:"watches"`  // --kubelet-watches: list-and-watches running now
	WatchEvents    int64    `json:"watchEvents"`
	CPUSeconds     float64  `json:"cpuSeconds"`
	MaxRSSMB       float64  `json:"maxRssMB"`
}

func (s *stats) report(now time.Time, final bool) reportEvent {
	s.mu.Lock()
	renew, lag := s.renewMillis, s.lagMillis
	s.renewMillis, s.lagMillis = nil, nil
	s.mu.Unlock()
	r := reportEvent{
		Event:          "report",
		T:              now.Unix(),
		Final:          final,
		Nodes:          s.registered.Load(),
		LeaseRenewals:  s.leaseRenewals.Load(),
		LeaseErrors:    s.leaseErrors.Load(),
		StatusUpdates:  s.statusUpdates.Load(),
		StatusErrors:   s.statusErrors.Load(),
		PodsStarted:    s.podsStarted.Load(),
		PodsDeleted:    s.podsDeleted.Load(),
		PodErrors:      s.podErrors.Load(),
		RegisterErrors: s.registerErrors.Load(),
		Requests:       s.requests.Load(),
		Throttled:      s.throttled.Load(),
		ServerErrors:   s.serverErrors.Load(),
		RenewP50Ms:     rounded(percentile(renew, 0.5)),
		RenewP99Ms:     rounded(percentile(renew, 0.99)),
		LagP99Ms:       rounded(percentile(lag, 0.99)),
		Watches:        s.watches.Load(),
		WatchEvents:    s.watchEvents.Load(),
	}
	var usage syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &usage) == nil {
		cpu := time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
		r.CPUSeconds = *rounded(cpu.Seconds())
		r.MaxRSSMB = *rounded(float64(usage.Maxrss) / 1024) // Linux: kilobytes
	}
	return r
}

// deletedEvent is printed after --delete-on-exit's deletions.
type deletedEvent struct {
	Event   string  `json:"event"` // "deleted"
	Nodes   int64   `json:"nodes"`
	Seconds float64 `json:"seconds"`
	Errors  int64   `json:"errors"` // Nodes left behind
}

// emitter prints events, one JSON object a line: the only thing fleet writes to stdout.
type emitter struct {
	mu  sync.Mutex
	out io.Writer
}

func (e *emitter) emit(event any) {
	line, err := json.Marshal(event)
	if err != nil {
		panic(err) // the events are plain structs
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.out.Write(append(line, '\n'))
}
