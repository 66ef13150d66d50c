package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

const (
	// kubelet's lease controller and node status loop both wait their period plus up to 4%
	// (the jitter factor of their wait.JitterUntil), counted from the end of the previous run.
	jitterFactor = 0.04
	// Retries after a failure: doubling from the first to the last. A lease is retried until it
	// is written (kubelet's lease controller backs off up to 7 s); a status at its next update
	// at the latest; a registration for as long as it takes.
	leaseRetryFirst, leaseRetryMax       = 200 * time.Millisecond, 7 * time.Second
	statusRetryFirst                     = 200 * time.Millisecond
	registerRetryFirst, registerRetryMax = 500 * time.Millisecond, 30 * time.Second
	// Deadline of a registration, a pod update or a deletion. Lease and status writes get
	// kubelet's heartbeat client's: the shorter of the lease duration and the status update
	// period.
	requestTimeout = 30 * time.Second
	// How long --delete-on-exit may take in all.
	deleteTimeout = 2 * time.Minute
)

type jobKind int

const (
	registerJob jobKind = iota
	leaseJob
	statusJob
)

// job is one API call (or a short run of them) for one node, due at a time.
type job struct {
	node *simNode
	kind jobKind
	due  time.Time
}

// simNode is one simulated node and what its kubelet would remember. A node has at most one
// job queued or running at a time per kind (registration first, then one lease job and one
// status job), so each field below has a single writer at a time.
type simNode struct {
	simnode.Node
	client kubernetes.Interface // its connection
	// With --kubelet-watches, the node's own watches (started with its first registration
	// attempt, as kubelet starts them before it registers); nil otherwise.
	watches *kubeletWatches

	// Set by the registration, before its lease and status jobs are scheduled.
	uid             types.UID
	registerStarted time.Time
	registerBackoff time.Duration

	// The lease job's: the last Lease the apiserver returned, updated in place and sent back
	// (its resourceVersion makes a lost update a conflict), refetched only after a conflict.
	lease         *coordinationv1.Lease
	leaseMayExist bool // a create said it exists: get it rather than create it
	leaseRenewed  bool // written at least once by this process
	leaseBackoff  time.Duration

	// The status job's: the Node last returned by the apiserver, when the shared node
	// informer has none (yet), and when the status was last sent.
	last          *v1.Node
	lastReport    time.Time
	statusBackoff time.Duration
}

// fleet runs the nodes' jobs: a timer per pending job (the Go runtime keeps them in a heap, so
// an idle node costs no goroutine), and a bounded pool of workers that make the API calls.
type fleet struct {
	ctx  context.Context // the run: ended by a signal or by fail
	fail context.CancelCauseFunc
	o    options

	nodes  []*simNode
	byName map[string]*simNode // read-only once built

	renewInterval    time.Duration
	heartbeatTimeout time.Duration

	// scheduled holds the jobs whose time has come: lease renewals, status updates, retries.
	// Each node has at most two jobs pending, so twice the nodes never fills it.
	scheduled chan job
	// fresh hands first registrations to the workers, as --register-qps lets them through;
	// scheduled jobs go first, so a join burst does not starve the joined nodes' heartbeats.
	fresh chan job

	nodeLister corelisters.NodeLister // every Node of the cluster (one shared watch); nil with --kubelet-watches
	pods       *podRunner             // nil without --run-pods
	st         *stats
	out        *emitter
	logf       func(string, ...any)
	errorsSeen sync.Map // kind -> *atomic.Int64, to log a kind's first errors, then a few
}

// fatalError ends the run: a refusal no retry changes (credentials, authorization, an invalid
// object).
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func newFleet(ctx context.Context, fail context.CancelCauseFunc, o options, nodes []simnode.Node, c clients,
	st *stats, out *emitter, logf func(string, ...any)) *fleet {
	f := &fleet{
		ctx:              ctx,
		fail:             fail,
		o:                o,
		byName:           make(map[string]*simNode, len(nodes)),
		renewInterval:    o.leaseDuration / 4, // kubelet's nodeLeaseRenewIntervalFraction
		heartbeatTimeout: min(o.statusUpdate, o.leaseDuration),
		scheduled:        make(chan job, 2*len(nodes)+1),
		fresh:            make(chan job),
		st:               st,
		out:              out,
		logf:             logf,
	}
	for i, n := range nodes {
		sn := &simNode{Node: n, client: c.nodes[i%len(c.nodes)]}
		if o.kubeletWatches {
			sn.watches = newKubeletWatches(f, sn)
		}
		f.nodes = append(f.nodes, sn)
		f.byName[n.Name] = sn
	}
	return f
}

// after queues j for the workers once d has passed.
func (f *fleet) after(d time.Duration, j job) {
	j.due = time.Now().Add(d)
	if d <= 0 {
		f.enqueue(j)
		return
	}
	time.AfterFunc(d, func() { f.enqueue(j) })
}

func (f *fleet) enqueue(j job) {
	select {
	case f.scheduled <- j:
	case <-f.ctx.Done():
	}
}

// feed hands every node's first registration attempt to the workers, paced by --register-qps.
func (f *fleet) feed() {
	var limiter flowcontrol.RateLimiter
	if f.o.registerQPS > 0 {
		limiter = flowcontrol.NewTokenBucketRateLimiter(float32(f.o.registerQPS), f.o.registerBurst)
	}
	for _, n := range f.nodes {
		if limiter != nil && limiter.Wait(f.ctx) != nil {
			return
		}
		select {
		case f.fresh <- job{node: n, kind: registerJob, due: time.Now()}:
		case <-f.ctx.Done():
			return
		}
	}
}

// work runs jobs until the run ends.
func (f *fleet) work() {
	for f.ctx.Err() == nil {
		select {
		case j := <-f.scheduled:
			f.do(j)
			continue
		default:
		}
		select {
		case j := <-f.scheduled:
			f.do(j)
		case j := <-f.fresh:
			f.do(j)
		case <-f.ctx.Done():
		}
	}
}

func (f *fleet) do(j job) {
	switch j.kind {
	case registerJob:
		f.register(j.node)
	case leaseJob:
		f.st.late(time.Since(j.due))
		f.renew(j.node)
	case statusJob:
		f.updateStatus(j.node)
	}
}

// register creates the Node, or, when it exists already (a restart), refreshes its status and
// leaves its labels and taints alone, as kubelet does. Then the node's lease is created at once
// (kubelet's lease controller starts with it) and its status loop begins.
func (f *fleet) register(n *simNode) {
	if n.registerStarted.IsZero() {
		n.registerStarted = time.Now()
		if n.watches != nil {
			n.watches.start(f.ctx)
		}
	}
	ctx, cancel := context.WithTimeout(forNode(f.ctx, n.Name), requestTimeout)
	defer cancel()
	node, existed, err := f.createNode(ctx, n)
	if err != nil {
		if f.failed("registering node", n.Name, &f.st.registerErrors, err) {
			n.registerBackoff = backoff(n.registerBackoff, registerRetryFirst, registerRetryMax)
			f.after(n.registerBackoff, job{node: n, kind: registerJob})
		}
		return
	}
	node.ManagedFields = nil // not needed, and a fifth of the object
	n.uid, n.last, n.lastReport = node.UID, node, time.Now()
	if f.st.nodeRegistered(time.Since(n.registerStarted), existed, len(f.nodes)) {
		f.out.emit(f.st.registeredEvent(len(f.nodes)))
	}
	f.after(0, job{node: n, kind: leaseJob})
	f.after(spread(rand.Float64(), f.o.statusUpdate), job{node: n, kind: statusJob})
}

func (f *fleet) createNode(ctx context.Context, n *simNode) (node *v1.Node, existed bool, err error) {
	nodes := n.client.CoreV1().Nodes()
	node, err = nodes.Create(ctx, n.Object(time.Now()), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return node, false, err
	}
	existing, err := nodes.Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return nil, true, err
	}
	wanted := existing.DeepCopy()
	n.SetStatus(wanted, time.Now())
	node, err = f.patchStatus(ctx, n, existing, wanted)
	return node, true, err
}

// renew writes the node's lease, then schedules the next renewal: the first one spread
// uniformly over the renew interval, so that nodes that joined together do not heartbeat
// together; then every interval (plus jitter) after the last write ends, as kubelet's
// lease controller does.
func (f *fleet) renew(n *simNode) {
	ctx, cancel := context.WithTimeout(forNode(f.ctx, n.Name), f.heartbeatTimeout)
	defer cancel()
	latency, err := f.writeLease(ctx, n)
	if err != nil {
		if f.failed("renewing the lease of", n.Name, &f.st.leaseErrors, err) {
			n.leaseBackoff = backoff(n.leaseBackoff, leaseRetryFirst, leaseRetryMax)
			f.after(n.leaseBackoff, job{node: n, kind: leaseJob})
		}
		return
	}
	f.st.renewed(latency)
	n.leaseBackoff = 0
	next := jitter(rand.Float64(), f.renewInterval)
	if !n.leaseRenewed {
		n.leaseRenewed = true
		next = spread(rand.Float64(), f.renewInterval)
	}
	f.after(next, job{node: n, kind: leaseJob})
}

// writeLease renews the lease with one Update of the copy the apiserver last returned; it
// creates the lease when there is none, and gets it only when a create or an update says the
// copy is missing or stale. latency is the successful write's.
func (f *fleet) writeLease(ctx context.Context, n *simNode) (latency time.Duration, err error) {
	leases := n.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	if n.lease == nil && !n.leaseMayExist {
		start := time.Now()
		created, err := leases.Create(ctx, f.newLease(n, now), metav1.CreateOptions{})
		if err == nil {
			created.ManagedFields = nil
			n.lease = created
			return time.Since(start), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
		n.leaseMayExist = true
	}
	if n.lease == nil {
		got, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			n.leaseMayExist = false
		}
		if err != nil {
			return 0, err
		}
		got.ManagedFields = nil
		n.lease = got
	}
	f.setLease(n, n.lease, now)
	start := time.Now()
	updated, err := leases.Update(ctx, n.lease, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			n.lease, n.leaseMayExist = nil, !apierrors.IsNotFound(err)
		}
		return 0, err
	}
	updated.ManagedFields = nil
	n.lease = updated
	return time.Since(start), nil
}

func (f *fleet) newLease(n *simNode, now metav1.MicroTime) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: v1.NamespaceNodeLease}}
	f.setLease(n, lease, now)
	return lease
}

// setLease writes what kubelet's lease controller writes: the node holds its lease for the
// lease duration from now, and the Node owns it, so that deleting the Node deletes the lease.
func (f *fleet) setLease(n *simNode, lease *coordinationv1.Lease, now metav1.MicroTime) {
	lease.Spec.HolderIdentity = ptr.To(n.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(f.o.leaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	if len(lease.OwnerReferences) == 0 && n.uid != "" {
		lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.uid}}
	}
}

// updateStatus is kubelet's node status loop: every --status-update it computes the status
// over the Node it knows (the shared informer's copy, or else the one last returned), and
// sends it when anything but the heartbeats differs (someone else changed it: the node
// lifecycle controller's Unknown after a missed lease) or --status-report has passed since it
// last did. The patch is a strategic merge patch of what differs: on a plain refresh, the
// conditions' heartbeat times.
func (f *fleet) updateStatus(n *simNode) {
	existing := n.last
	if cached := f.cachedNode(n); cached != nil {
		existing = cached
	}
	now := time.Now()
	wanted := existing.DeepCopy()
	n.SetStatus(wanted, now)
	if simnode.StatusChanged(&existing.Status, &wanted.Status) || now.Sub(n.lastReport) >= f.o.statusReport {
		ctx, cancel := context.WithTimeout(forNode(f.ctx, n.Name), f.heartbeatTimeout)
		updated, err := f.patchStatus(ctx, n, existing, wanted)
		cancel()
		if err != nil {
			if f.failed("updating the status of", n.Name, &f.st.statusErrors, err) {
				n.statusBackoff = backoff(n.statusBackoff, statusRetryFirst, f.o.statusUpdate)
				f.after(n.statusBackoff, job{node: n, kind: statusJob})
			}
			return
		}
		updated.ManagedFields = nil
		n.last, n.lastReport = updated, now
		f.st.statusUpdates.Add(1)
	}
	n.statusBackoff = 0
	f.after(jitter(rand.Float64(), f.o.statusUpdate), job{node: n, kind: statusJob})
}

// cachedNode is the node's Node as its watch last delivered it: its own watch's with
// --kubelet-watches, else the process's shared one's; nil when it has none (yet).
func (f *fleet) cachedNode(n *simNode) *v1.Node {
	if n.watches != nil {
		if obj, exists, err := n.watches.node.GetByKey(n.Name); err == nil && exists {
			return obj.(*v1.Node)
		}
		return nil
	}
	if cached, err := f.nodeLister.Get(n.Name); err == nil {
		return cached
	}
	return nil
}

func (f *fleet) patchStatus(ctx context.Context, n *simNode, existing, wanted *v1.Node) (*v1.Node, error) {
	patch, err := statusPatch(existing, wanted)
	if err != nil {
		return nil, err
	}
	return n.client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

// statusPatch is the strategic merge patch from old's status to new's; nothing else of the
// Node is sent.
func statusPatch(old, new *v1.Node) ([]byte, error) {
	oldData, err := json.Marshal(v1.Node{Status: old.Status})
	if err != nil {
		return nil, err
	}
	newData, err := json.Marshal(v1.Node{Status: new.Status})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Node{})
}

// failed counts a failed call and tells whether to retry it: not when the run is ending (the
// call was cut short: not counted), and not after a refusal no retry changes, which ends the
// run with that error. Anything else (429, 5xx, a timeout, a lost connection, a conflict) is
// retried.
func (f *fleet) failed(what, name string, counter *atomic.Int64, err error) (retry bool) {
	if f.ctx.Err() != nil {
		return false
	}
	counter.Add(1)
	if isFatal(err) {
		f.fail(&fatalError{fmt.Errorf("%s %s: %w", what, name, err)})
		return false
	}
	seen, _ := f.errorsSeen.LoadOrStore(what, new(atomic.Int64))
	if count := seen.(*atomic.Int64).Add(1); count <= 3 || count%1000 == 0 {
		f.logf("%s %s (error %d of this kind, retried): %v", what, name, count, err)
	}
	return true
}

// isFatal tells a refusal no retry changes: the credentials (401, a server certificate that
// does not verify), the authorization (403), or the request itself (invalid, bad).
func isFatal(err error) bool {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err) ||
		apierrors.IsUnsupportedMediaType(err) ||
		errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// deleteNodes deletes every node of the process (--delete-on-exit), registered or not (a
// create cut short may have happened), with the workers' concurrency. Their leases go with
// them (the Node owns its lease: the garbage collector deletes it), and so do their pods (the
// pod garbage collector deletes pods bound to no Node).
func (f *fleet) deleteNodes(client kubernetes.Interface) deletedEvent {
	ctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
	defer cancel()
	start := time.Now()
	var deleted, errs atomic.Int64
	names := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < min(f.o.workers, len(f.nodes)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				existed, err := deleteNode(ctx, client, name)
				switch {
				case err != nil:
					errs.Add(1)
					if errs.Load() <= 3 {
						f.logf("deleting node %s: %v", name, err)
					}
				case existed:
					deleted.Add(1)
				}
			}
		}()
	}
	for _, n := range f.nodes {
		names <- n.Name
	}
	close(names)
	wg.Wait()
	return deletedEvent{Event: "deleted", Nodes: deleted.Load(), Seconds: *rounded(time.Since(start).Seconds()), Errors: errs.Load()}
}

// deleteNode deletes a Node, retrying what may pass on a retry a few times.
func deleteNode(ctx context.Context, client kubernetes.Interface, name string) (existed bool, err error) {
	var wait time.Duration
	for attempt := 0; attempt < 5; attempt++ {
		err = client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return err == nil, nil
		}
		if isFatal(err) {
			return false, err
		}
		wait = backoff(wait, registerRetryFirst, registerRetryMax)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false, err
		}
	}
	return false, err
}

// spread is a first delay spread uniformly over [0, interval), for u drawn uniformly from [0, 1).
func spread(u float64, interval time.Duration) time.Duration {
	return time.Duration(u * float64(interval))
}

// jitter is period lengthened by up to jitterFactor, for u drawn uniformly from [0, 1), as
// kubelet's loops wait.
func jitter(u float64, period time.Duration) time.Duration {
	return period + time.Duration(u*jitterFactor*float64(period))
}

// backoff is the wait before the next retry: first after none, then double the previous one,
// up to ceiling.
func backoff(previous, first, ceiling time.Duration) time.Duration {
	if previous <= 0 {
		return min(first, ceiling)
	}
	return min(2*previous, ceiling)
}

// stripManagedFields is the informers' transform: fleet never reads managedFields, and they
// are a good part of every cached object.
func stripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
