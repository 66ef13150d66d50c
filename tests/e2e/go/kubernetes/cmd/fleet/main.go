// Command fleet simulates thousands of nodes in one process, against the real apiservers of the
// cluster-in-a-box harness (tests/e2e), for the scale benchmark (benchmarks/scale): it puts on
// the control plane the load of that many kubelets' registrations and heartbeats, and starts
// and removes the pods bound to them. No container runs. It is a small kwok of our own.
//
//	fleet --kubeconfig=admin.conf --profile=pools.json [--offset=0] [--register-qps=0] ...
//
// Unlike nodesim (one node that joins as the node itself, to test the join path), fleet
// measures load: it uses the admin credentials of --kubeconfig, not per-node identities, so by
// default the Node authorizer and the NodeRestriction admission plugin do not judge its
// requests, and API Priority and Fairness classifies them as the admin's (system:masters:
// exempt, never queued nor rejected with 429). --as-nodes impersonates each node instead
// (user system:node:<name>, group system:nodes): its requests are then authorized, admitted and
// classified (node-high, system) as a kubelet's; the admin must be allowed to impersonate, as
// system:masters is.
//
// # Profile
//
// --profile is a JSON file:
//
//	{"pools": [{"name": "h100a", "count": 3000, "namePrefix": "h100a-s",
//	            "labels": {"supercluster.io/pool": "h100a"},
//	            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
//	            "capacity": {"cpu": "96", "memory": "1900Gi", "nvidia.com/gpu": "8", "pods": "8"}}]}
//
// Each pool's nodes are named <namePrefix><index, zero-padded to 6 digits>, indexes from
// --offset to --offset+count-1, so that several processes can share one profile and split each
// pool between them. A node registers with the pool's labels over kubelet's own
// (kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch and their beta.kubernetes.io
// forms); labels kubelet may not set (kubernetes.io and k8s.io namespaces other than its own)
// are refused, as kubelet refuses them. The taints are registerWithTaints. A capacity quantity
// is a string ("1900Gi") or a number (8); the capacity is also the allocatable (nothing is
// reserved); without "pods" it is kubelet's default maxPods, 110.
// Pool p's node i has address (p<<16)+i+1 of --node-cidr; a pod that is not hostNetwork gets
// the next free address of --pod-cidr (give each process its own when they must be unique).
//
// # Behaviour
//
// As kubelet does, with the same defaults: a node registers with its status set (Ready); an
// existing Node (a restart) keeps its labels and taints and has its status refreshed. Its lease
// (kube-node-lease/<name>, owned by the Node) is created at once, then renewed every quarter of
// --lease-duration: the first renewal is spread uniformly over that interval, so that nodes
// that joined together do not heartbeat together, then every interval plus up to 4% after the
// previous write ends. A renewal is one Update of the Lease last returned, refetched only after
// a conflict. Every --status-update the node computes its status over the Node the shared node
// informer shows and sends a strategic merge patch of what differs when anything but the
// heartbeats changed (the node lifecycle controller's Unknown, say) or --status-report has
// passed since it last did: on a plain refresh, the conditions' heartbeat times. With
// --run-pods, one informer on every bound pod (spec.nodeName!=) serves all the process's nodes:
// a pending pod of theirs is reported Running and Ready (containers running, podIP, hostIP,
// startTime), a pod with a deletionTimestamp is deleted with grace period 0.
//
// Requests are protobuf (kubelet's default) and spread over --connections TCP connections (the
// load balancer spreads connections, not requests), all through one client-side rate limiter
// (--client-qps and --client-burst, high by default so that the apiservers, not the client, are
// the limit). Registrations are paced by --register-qps (0: a join burst, as fast as the workers
// and the client allow). A 429, a 5xx, a timeout or a lost connection is counted and retried
// with backoff; client-go also retries a 429 that carries a Retry-After by itself, which the
// report's throttled count includes. A refusal no retry changes (401, 403, an invalid object, a
// server certificate that does not verify) ends the process: exit 1, one line on stderr.
//
// Watches: by default fleet holds one pod watch and one node watch for all its nodes. With
// --kubelet-watches each node holds its own, as a kubelet does: its Node, its pods, Services,
// RuntimeClasses, CSIDrivers and each Secret and ConfigMap its pods reference (watches.go names
// the kubelet source of each), as that node. What kubelets do and fleet does not: each real
// kubelet holds its own connection (fleet's nodes share --connections); no pod is ever probed,
// and no event is recorded.
//
// # Output
//
// stdout carries only events, one JSON object a line (stderr carries a line per problem):
//
//	{"event":"registered","nodes":N,"existed":K,"seconds":S,"p50":…,"p99":…,"errors":E}
//
// once, when all the process's nodes are registered: S seconds from the first registration
// attempt to the last success; p50 and p99 in seconds, per node, from its first create attempt
// to its success; E failed attempts (retried); K nodes that existed already.
//
//	{"event":"report","t":<unix>,"nodes":N,"leaseRenewals":…,"leaseErrors":…,"statusUpdates":…,
//	 "statusErrors":…,"podsStarted":…,"podsDeleted":…,"podErrors":…,"registerErrors":…,
//	 "requests":…,"throttled":…,"serverErrors":…,"renewP50Ms":…,"renewP99Ms":…,"lagP99Ms":…,
//	 "cpuSeconds":…,"maxRssMB":…}
//
// every --report-every, and once more on SIGTERM or SIGINT with "final":true. Counts are
// cumulative: nodes registered, successful lease writes, status patches, pods started and
// deleted, failed calls of each kind, and every answer from the apiservers with the 429s and
// 5xx among them. renewP50Ms and renewP99Ms are the lease writes' latency over the last
// interval, lagP99Ms how late renewals started (the fleet's own saturation: its workers or its
// client rate limit); null when there was none. cpuSeconds and maxRssMB are the process's.
//
// On SIGTERM or SIGINT fleet stops, prints the final report and exits 0, leaving its Nodes
// registered, as kubelet does; with --delete-on-exit it first deletes them (within 2 minutes,
// then {"event":"deleted","nodes":N,"seconds":S,"errors":E}); a second signal ends it at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/informers"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

func main() {
	logger := log.New(os.Stderr, "fleet: ", 0)
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		logger.Print(oneLine(err))
		os.Exit(2)
	}
	p, err := readProfile(o.profile)
	if err != nil {
		logger.Printf("--profile %s", oneLine(err))
		os.Exit(2)
	}
	nodes, err := p.nodes(o.offset, o.nodeCIDR, kubeletVersion())
	if err != nil {
		logger.Printf("--profile %s: %s", o.profile, oneLine(err))
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, stop, o, nodes, os.Stdout, logger.Printf); err != nil {
		logger.Print(oneLine(err))
		stop()
		os.Exit(1)
	}
}

// run simulates nodes until ctx ends (a signal: nil) or a fatal error (returned). stopSignals
// is called once ctx or the run ends, so that a second signal ends the process at once.
func run(ctx context.Context, stopSignals func(), o options, nodes []simnode.Node, stdout io.Writer,
	logf func(string, ...any)) error {
	st := &stats{}
	c, err := newClients(o, st)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	// client-go logs, through the request's context, a response cut short; on exit every call
	// in flight is, and the errors that matter during the run are returned to fleet anyway.
	runCtx = logr.NewContext(runCtx, logr.Discard())
	out := &emitter{out: stdout}
	f := newFleet(runCtx, fail, o, nodes, c, st, out, logf)

	// Without --kubelet-watches, one watch on every Node serves all the nodes' status loops, as
	// each kubelet's watch on its own Node serves its loop.
	if !o.kubeletWatches {
		nodeInformers := informers.NewSharedInformerFactory(c.watch, 0)
		nodeInformer := nodeInformers.Core().V1().Nodes()
		if err := nodeInformer.Informer().SetTransform(stripManagedFields); err != nil {
			return err
		}
		f.nodeLister = nodeInformer.Lister()
		nodeInformers.Start(runCtx.Done())
		defer nodeInformers.Shutdown()
	}

	var loops sync.WaitGroup
	start := func(loop func()) {
		loops.Add(1)
		go func() {
			defer loops.Done()
			loop()
		}()
	}
	if o.runPods {
		pods, err := newPodRunner(f, c.watch, !o.kubeletWatches)
		if err != nil {
			return err
		}
		f.pods = pods
		start(pods.run)
	}
	logf("%d nodes (%s to %s), %d workers on %d connections, lease renewed every %s, status every %s (sent every %s or on change), pods %v, as nodes %v, kubelet watches %v",
		len(nodes), nodes[0].Name, nodes[len(nodes)-1].Name, o.workers, o.connections, f.renewInterval,
		o.statusUpdate, o.statusReport, o.runPods, o.asNodes, o.kubeletWatches)

	st.registrationStarted = time.Now()
	for i := 0; i < o.workers; i++ {
		start(f.work)
	}
	start(f.feed)
	start(func() {
		ticker := time.NewTicker(o.reportEvery)
		defer ticker.Stop()
		for {
			select {
			case now := <-ticker.C:
				out.emit(st.report(now, false))
			case <-runCtx.Done():
				return
			}
		}
	})

	<-runCtx.Done()
	stopSignals()
	loops.Wait()
	out.emit(st.report(time.Now(), true))

	var fatal *fatalError
	if errors.As(context.Cause(runCtx), &fatal) {
		return fatal
	}
	if o.deleteOnExit {
		logf("deleting %d nodes", len(nodes))
		out.emit(f.deleteNodes(c.admin))
	}
	return nil
}

// oneLine keeps an error to one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
