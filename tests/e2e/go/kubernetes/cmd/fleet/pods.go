package main

import (
	"context"
	"net/netip"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// podRunner stands in for the pod workers and status managers of all the process's kubelets,
// as nodesim does for one: a pod bound to one of its nodes is reported running at once (every
// container running and ready), and a pod being deleted is removed at once (grace period 0),
// which kubelet does once its containers have stopped. One watch serves every node: all the
// cluster's bound pods (spec.nodeName!=), of which it keeps those on its own nodes. Real
// kubelets hold one watch each, on their own pods only.
type podRunner struct {
	f       *fleet
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	lister  corelisters.PodLister
	pods    cache.Indexer // with --kubelet-watches: the pods the nodes' own watches deliver
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string] // pod keys; failures retried with backoff
	ips     *addressPool
}

func newPodRunner(f *fleet, client kubernetes.Interface, shared bool) (*podRunner, error) {
	r := &podRunner{
		f:      f,
		client: client,
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second)),
		ips: newAddressPool(f.o.podCIDR),
	}
	if !shared {
		// --kubelet-watches: each node's own pod watch feeds this cache (seen, gone).
		r.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		r.lister = corelisters.NewPodLister(r.pods)
		r.synced = func() bool { return true }
		return r, nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	}))
	pods := factory.Core().V1().Pods()
	informer := pods.Informer()
	if err := informer.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	r.factory, r.lister, r.synced = factory, pods.Lister(), informer.HasSynced
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueue,
		UpdateFunc: func(_, pod any) { r.enqueue(pod) },
		DeleteFunc: r.forget,
	})
	return r, err
}

// enqueue queues a pod of this process's nodes that is waiting for its kubelet: to be started
// or to be removed. Other pods' events (most of them) stop here.
func (r *podRunner) enqueue(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok || r.f.byName[pod.Spec.NodeName] == nil {
		return
	}
	if pod.DeletionTimestamp == nil && pod.Status.Phase != v1.PodPending && pod.Status.Phase != "" {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		r.queue.Add(key)
	}
}

// seen is a pod a node's own watch delivered (--kubelet-watches).
func (r *podRunner) seen(pod *v1.Pod) {
	pod.ManagedFields = nil
	_ = r.pods.Update(pod) // a thread-safe store: adds or replaces, never fails
	r.enqueue(pod)
}

// gone is a pod a node's own watch no longer has.
func (r *podRunner) gone(pod *v1.Pod) {
	_ = r.pods.Delete(pod)
	r.forget(pod)
}

// forget frees a deleted pod's address.
func (r *podRunner) forget(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	if pod, ok := obj.(*v1.Pod); ok {
		r.ips.release(pod.UID)
	}
}

// run handles pods with --pod-workers workers until the run ends.
func (r *podRunner) run() {
	if r.factory != nil {
		defer r.factory.Shutdown()
		r.factory.Start(r.f.ctx.Done())
	}
	if !cache.WaitForCacheSync(r.f.ctx.Done(), r.synced) {
		return
	}
	var workers sync.WaitGroup
	for i := 0; i < r.f.o.podWorkers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for r.next() {
			}
		}()
	}
	<-r.f.ctx.Done()
	r.queue.ShutDown()
	workers.Wait()
}

func (r *podRunner) next() bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if r.f.ctx.Err() != nil {
		return false
	}
	if err := r.sync(key); err != nil {
		if r.f.failed("starting or removing pod", key, &r.f.st.podErrors, err) {
			r.queue.AddRateLimited(key)
		}
		return true
	}
	r.queue.Forget(key)
	return true
}

func (r *podRunner) sync(key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this queue was given: nothing to retry
	}
	pod, err := r.lister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	n := r.f.byName[pod.Spec.NodeName]
	if n == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(forNode(r.f.ctx, n.Name), requestTimeout)
	defer cancel()
	pods := r.client.CoreV1().Pods(namespace)

	switch {
	case pod.DeletionTimestamp != nil:
		// The UID precondition spares a pod recreated under the same name (a StatefulSet's).
		err := pods.Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		} else if err != nil {
			return err
		}
		r.f.st.podsDeleted.Add(1)
	case pod.Status.Phase == v1.PodPending || pod.Status.Phase == "":
		podIP := n.IP
		if !pod.Spec.HostNetwork {
			podIP = r.ips.get(pod.UID, n.IP)
		}
		started := pod.DeepCopy()
		started.Status = simnode.RunningStatus(pod, n.IP, podIP, metav1.Now())
		if _, err := pods.UpdateStatus(ctx, started, metav1.UpdateOptions{}); err != nil {
			return err // a conflict means a newer pod is in the cache: the retry reads it
		}
		r.f.st.podsStarted.Add(1)
	}
	return nil
}

// addressPool hands out the addresses of a prefix in turn, one per pod, until the pod is gone.
// Nothing routes to them: they only need to look like pods' addresses, and to differ.
type addressPool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	size   uint64 // usable addresses: the network's and the broadcast address are not
	next   uint64
	byUID  map[types.UID]string
	used   map[string]bool
}

func newAddressPool(prefix netip.Prefix) *addressPool {
	return &addressPool{
		prefix: prefix,
		size:   uint64(1)<<(32-prefix.Bits()) - 2,
		byUID:  map[types.UID]string{},
		used:   map[string]bool{},
	}
}

// get is uid's address: the one it was given, or the next free one; fallback when none is.
func (p *addressPool) get(uid types.UID, fallback string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip, ok := p.byUID[uid]; ok { // a retry keeps the address it was given
		return ip
	}
	for tried := uint64(0); tried < p.size; tried++ {
		addr, _ := addressAt(p.prefix, p.next%p.size+1)
		p.next++
		if ip := addr.String(); !p.used[ip] {
			p.used[ip], p.byUID[uid] = true, ip
			return ip
		}
	}
	return fallback
}

func (p *addressPool) release(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ip, ok := p.byUID[uid]; ok {
		delete(p.used, ip)
		delete(p.byUID, uid)
	}
}
