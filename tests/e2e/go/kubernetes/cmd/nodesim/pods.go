package main

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// podRunner stands in for kubelet's pod workers and status manager for the pods bound to this
// node. No container runs: a new pod is reported started at once (running, every container
// ready), and a pod being deleted is removed at once, which kubelet does once its containers
// have stopped; that is what lets Deployments and DaemonSets roll.
type podRunner struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	lister   corelisters.PodLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string] // pod keys; failures retried with backoff
	hostIP   string
	pool     []string             // --sim-pod-ips
	assigned map[types.UID]string // pool addresses handed out, kept until their pod is gone
	logf     func(string, ...any)
}

// newPodRunner watches, as kubelet does, only the pods whose spec.nodeName is this node.
func newPodRunner(client kubernetes.Interface, nodeName, hostIP string, pool []string, logf func(string, ...any)) (*podRunner, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
	}))
	pods := factory.Core().V1().Pods()
	r := &podRunner{
		client:   client,
		factory:  factory,
		lister:   pods.Lister(),
		synced:   pods.Informer().HasSynced,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		hostIP:   hostIP,
		pool:     pool,
		assigned: map[types.UID]string{},
		logf:     logf,
	}
	_, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueue,
		UpdateFunc: func(_, pod any) { r.enqueue(pod) },
	})
	return r, err
}

func (r *podRunner) enqueue(pod any) {
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		r.queue.Add(key)
	}
}

// run handles pods one at a time until ctx ends. One worker keeps address allocation simple;
// the cache is synced first so that the addresses existing pods hold are known.
func (r *podRunner) run(ctx context.Context) {
	defer r.factory.Shutdown()
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	r.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced) {
		return
	}
	for r.next(ctx) {
	}
}

func (r *podRunner) next(ctx context.Context) bool {
	key, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(key)
	if err := r.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			r.logf("pod %s: %v (will retry)", key, err)
		}
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

func (r *podRunner) sync(ctx context.Context, key string) error {
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
		r.logf("pod %s: deleted", key)
	case pod.Status.Phase == v1.PodPending || pod.Status.Phase == "":
		podIP := r.hostIP
		if !pod.Spec.HostNetwork {
			podIP = r.podIP(pod.UID)
		}
		started := pod.DeepCopy()
		started.Status = simnode.RunningStatus(pod, r.hostIP, podIP, metav1.Now())
		if _, err := pods.UpdateStatus(ctx, started, metav1.UpdateOptions{}); err != nil {
			return err // a conflict means a newer pod is in the cache: the retry reads it
		}
		r.logf("pod %s: running (%s)", key, podIP)
	}
	return nil
}

// podIP gives a pod the first --sim-pod-ips address that no pod on the node holds, or the
// node's address when there is no pool or the pool is used up (nothing routes to these
// addresses; they only need to look like a pod's).
func (r *podRunner) podIP(uid types.UID) string {
	if ip, ok := r.assigned[uid]; ok { // a retry keeps the address it was given
		return ip
	}
	pods, _ := r.lister.List(labels.Everything())
	live := map[types.UID]bool{}
	used := map[string]bool{}
	for _, p := range pods {
		live[p.UID] = true
		terminal := p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		if !p.Spec.HostNetwork && !terminal && p.Status.PodIP != "" {
			used[p.Status.PodIP] = true
		}
	}
	for uid, ip := range r.assigned {
		if !live[uid] {
			delete(r.assigned, uid)
		} else {
			used[ip] = true // the cache may not show an update just sent
		}
	}
	ip := pickIP(r.pool, used, r.hostIP)
	r.assigned[uid] = ip
	return ip
}

// pickIP is the first address of pool not in used, or fallback.
func pickIP(pool []string, used map[string]bool, fallback string) string {
	for _, ip := range pool {
		if !used[ip] {
			return ip
		}
	}
	return fallback
}

// describePool is the one line logged when pods start being run.
func describePool(pool []string, hostIP string) string {
	if len(pool) == 0 {
		return fmt.Sprintf("pods get the node's address %s", hostIP)
	}
	return fmt.Sprintf("pods get addresses from a pool of %d, then the node's %s", len(pool), hostIP)
}
