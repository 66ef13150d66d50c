package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// options are fleet's command line.
type options struct {
	kubeconfig string
	profile    string
	offset     int // the index of each pool's first node

	registerQPS   float64 // node registrations per second; 0: as fast as the workers and the client allow
	registerBurst int
	clientQPS     float64 // every request of the process, through one token bucket; 0: unlimited
	clientBurst   int
	connections   int  // TCP connections the node traffic is spread over
	workers       int  // concurrent node API calls (registrations, leases, statuses)
	asNodes       bool // impersonate system:node:<name> in the system:nodes group

	leaseDuration time.Duration // renewed every quarter of it, as kubelet does
	statusUpdate  time.Duration // kubelet's nodeStatusUpdateFrequency
	statusReport  time.Duration // kubelet's nodeStatusReportFrequency

	runPods        bool
	kubeletWatches bool // each node holds a kubelet's watches (watches.go) instead of one shared node and pod watch
	podWorkers     int

	nodeCIDR netip.Prefix
	podCIDR  netip.Prefix

	reportEvery  time.Duration
	deleteOnExit bool
}

func parseFlags(args []string) (options, error) {
	var o options
	var nodeCIDR, podCIDR string

	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, as one line, by the caller
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "admin kubeconfig (fleet does not use per-node identities; see --as-nodes)")
	fs.StringVar(&o.profile, "profile", "", "JSON file: the node pools to simulate")
	fs.IntVar(&o.offset, "offset", 0, "index of each pool's first node: names are <namePrefix><offset+i, 6 digits>")
	fs.Float64Var(&o.registerQPS, "register-qps", 0, "node registrations per second (0: a join burst, as fast as the client allows)")
	fs.IntVar(&o.registerBurst, "register-burst", 1, "registrations allowed at once above --register-qps")
	fs.Float64Var(&o.clientQPS, "client-qps", 2000, "requests per second of the whole process (0: unlimited); high, so that the apiserver is the limit")
	fs.IntVar(&o.clientBurst, "client-burst", 4000, "requests allowed at once above --client-qps")
	fs.IntVar(&o.connections, "connections", 16, "TCP connections the nodes' requests are spread over (a real kubelet holds one each)")
	fs.IntVar(&o.workers, "workers", 2000, "node API calls in flight at most (registrations, lease renewals, status updates); raise it when lagP99Ms grows")
	fs.BoolVar(&o.asNodes, "as-nodes", false, "impersonate each node (system:node:<name>, group system:nodes) so that authorization, NodeRestriction and API Priority and Fairness treat its requests as a kubelet's")
	fs.DurationVar(&o.leaseDuration, "lease-duration", 40*time.Second, "the node lease's duration (kubelet's nodeLeaseDurationSeconds); renewed every quarter of it")
	fs.DurationVar(&o.statusUpdate, "status-update", 10*time.Second, "how often each node computes its status (kubelet's nodeStatusUpdateFrequency)")
	fs.DurationVar(&o.statusReport, "status-report", 5*time.Minute, "how often an unchanged status is sent anyway (kubelet's nodeStatusReportFrequency)")
	fs.BoolVar(&o.runPods, "run-pods", true, "report the pods bound to this process's nodes running, and delete those being deleted")
	fs.BoolVar(&o.kubeletWatches, "kubelet-watches", false, "each node holds the watches a kubelet holds (its Node, its pods, Services, RuntimeClasses, CSIDrivers, its pods' Secrets and ConfigMaps) instead of one node and one pod watch for the whole process")
	fs.IntVar(&o.podWorkers, "pod-workers", 200, "pod status updates and deletions in flight at most")
	fs.StringVar(&nodeCIDR, "node-cidr", "100.64.0.0/11", "node addresses: pool p's node i is the prefix's address (p<<16)+i+1")
	fs.StringVar(&podCIDR, "pod-cidr", "100.96.0.0/11", "pod addresses (hostNetwork pods get their node's), handed out in order; give each process its own if they must be unique")
	fs.DurationVar(&o.reportEvery, "report-every", 10*time.Second, "how often a report line is printed")
	fs.BoolVar(&o.deleteOnExit, "delete-on-exit", false, "on SIGTERM/SIGINT, delete this process's nodes before exiting")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, usageError(fs)
		}
		// The standard library's message names the flag with one dash, whatever was typed.
		return o, errors.New(strings.Replace(err.Error(), "provided but not defined: -", "unknown flag --", 1))
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: fleet takes flags only", fs.Arg(0))
	}

	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(o.kubeconfig != "", "--kubeconfig is required")
	check(o.profile != "", "--profile is required")
	check(o.offset >= 0, "--offset must not be negative")
	check(o.registerQPS >= 0, "--register-qps must not be negative")
	check(o.registerBurst >= 1, "--register-burst must be at least 1")
	check(o.clientQPS >= 0, "--client-qps must not be negative")
	check(o.clientBurst >= 1, "--client-burst must be at least 1")
	check(o.connections >= 1, "--connections must be at least 1")
	check(o.workers >= 1, "--workers must be at least 1")
	check(o.podWorkers >= 1, "--pod-workers must be at least 1")
	check(o.leaseDuration >= time.Second && o.leaseDuration%time.Second == 0,
		"--lease-duration must be a whole number of seconds, at least 1s (a Lease holds seconds)")
	check(o.statusUpdate > 0, "--status-update must be positive")
	check(o.statusReport > 0, "--status-report must be positive")
	check(o.reportEvery > 0, "--report-every must be positive")
	var err error
	if o.nodeCIDR, err = parseCIDR(nodeCIDR); err != nil {
		problems = append(problems, "--node-cidr: "+err.Error())
	}
	if o.podCIDR, err = parseCIDR(podCIDR); err != nil {
		problems = append(problems, "--pod-cidr: "+err.Error())
	}
	if len(problems) > 0 {
		return o, errors.New(strings.Join(problems, "; "))
	}
	return o, nil
}

func usageError(fs *flag.FlagSet) error {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	return fmt.Errorf("usage: fleet %s", strings.Join(names, " "))
}

// parseCIDR reads an IPv4 prefix (the cluster is single-stack IPv4), masked to its network.
func parseCIDR(value string) (netip.Prefix, error) {
	prefix, err := netip.ParsePrefix(value)
	if err != nil {
		return prefix, err
	}
	if !prefix.Addr().Is4() {
		return prefix, fmt.Errorf("%s is not IPv4", value)
	}
	if prefix.Bits() > 30 {
		return prefix, fmt.Errorf("%s is too small", value)
	}
	return prefix.Masked(), nil
}
