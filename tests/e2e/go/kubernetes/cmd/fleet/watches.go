package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// kubeletWatches are the watches one kubelet of the pinned release (v1.33, pkg/kubelet of
// k8s.io/kubernetes) holds against the apiservers, as --kubelet-watches gives each simulated
// node (each list-and-watch as that node, on its node's connection):
//
//   - its Node: the node informer, field selector metadata.name=<node> (kubelet.go), which the
//     node status loop reads;
//   - its pods: the pod config source's reflector, field selector spec.nodeName=<node>
//     (config/apiserver.go), from which the pod runner starts and removes pods;
//   - every Service but headless ones: the service informer, field selector
//     spec.clusterIP!=None (kubelet.go), for the pods' environment variables;
//   - RuntimeClasses: the runtime class manager's informer (runtimeclass/runtimeclass_manager.go);
//   - CSIDrivers: the CSI volume plugin's informer (volume_host.go);
//   - each Secret and ConfigMap its pods reference (volumes, env, envFrom, image pull
//     secrets: podutil.VisitPodSecretNames and VisitPodConfigmapNames), one watch each, field
//     selector metadata.name=<name> in the pod's namespace: the Watch change-detection strategy,
//     kubelet's default (util/manager/watch_based_manager.go, its reflectors' minimum watch
//     timeout 30 minutes), held while a pod of the node references the object and stopped once
//     the object is immutable.
//
// Not held: the ClusterTrustBundle informer (behind a feature gate that is off by default in
// v1.33), and the certificate manager's CSR watch (only while a rotation waits for its
// certificate).
type kubeletWatches struct {
	f      *fleet
	n      *simNode
	client kubernetes.Interface
	node   cache.Store // this node's Node, as the status loop reads it
	pods   *nodePods

	mu   sync.Mutex
	refs map[objectRef]*referenced // Secrets and ConfigMaps the node's pods reference
	uses map[types.UID][]objectRef // what each pod references
}

type objectRef struct{ kind, namespace, name string }

type referenced struct {
	pods int
	stop context.CancelFunc
}

// secretsAndConfigMaps are the kinds kubelet watches one object at a time.
const (
	secretKind    = "Secret"
	configMapKind = "ConfigMap"
)

// minObjectWatchTimeout is the watch-based manager's reflectors' (kubelet's util/manager).
const minObjectWatchTimeout = 30 * time.Minute

func newKubeletWatches(f *fleet, n *simNode) *kubeletWatches {
	w := &kubeletWatches{
		f:      f,
		n:      n,
		client: n.client,
		node:   cache.NewStore(cache.MetaNamespaceKeyFunc),
		refs:   map[objectRef]*referenced{},
		uses:   map[types.UID][]objectRef{},
	}
	w.pods = &nodePods{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), w: w}
	return w
}

// start opens the node's watches, as kubelet does at start, before it registers its Node.
func (w *kubeletWatches) start(ctx context.Context) {
	core, name := w.client.CoreV1(), w.n.Name
	w.reflect(ctx, "node", &v1.Node{}, w.node, 0,
		listWatch(core.Nodes().List, core.Nodes().Watch, fields.OneTermEqualSelector("metadata.name", name)))
	w.reflect(ctx, "pods", &v1.Pod{}, w.pods, 0,
		listWatch(core.Pods("").List, core.Pods("").Watch, fields.OneTermEqualSelector("spec.nodeName", name)))
	w.reflect(ctx, "services", &v1.Service{}, w.discard(), 0,
		listWatch(core.Services("").List, core.Services("").Watch, fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone)))
	runtimeClasses := w.client.NodeV1().RuntimeClasses()
	w.reflect(ctx, "runtimeclasses", &nodev1.RuntimeClass{}, w.discard(), 0,
		listWatch(runtimeClasses.List, runtimeClasses.Watch, fields.Everything()))
	csiDrivers := w.client.StorageV1().CSIDrivers()
	w.reflect(ctx, "csidrivers", &storagev1.CSIDriver{}, w.discard(), 0,
		listWatch(csiDrivers.List, csiDrivers.Watch, fields.Everything()))
}

// reflect runs a list-and-watch into store until ctx ends, as the node (impersonated).
func (w *kubeletWatches) reflect(ctx context.Context, what string, expected runtime.Object, store cache.ReflectorStore,
	minWatchTimeout time.Duration, lw *cache.ListWatch) {
	r := cache.NewReflectorWithOptions(lw, expected, store, cache.ReflectorOptions{
		Name:            fmt.Sprintf("%s %s", w.n.Name, what),
		MinWatchTimeout: minWatchTimeout,
	})
	w.f.st.watches.Add(1)
	go func() {
		defer w.f.st.watches.Add(-1)
		r.RunWithContext(forNode(ctx, w.n.Name))
	}()
}

// listWatch lists and watches with selector, as the node: the reflector's context carries the
// node (forNode), which the impersonating transport reads.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), selector fields.Selector) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector.String()
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector.String()
			return watchFn(ctx, o)
		},
	}
}

// podSeen is a pod of the node, new or changed: the pod runner's, and its references watched.
func (w *kubeletWatches) podSeen(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if w.f.pods != nil {
		w.f.pods.seen(pod)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.uses[pod.UID]; known {
		return // a pod's references are its spec's: they do not change
	}
	var refs []objectRef
	podutil.VisitPodSecretNames(pod, func(name string) bool {
		refs = append(refs, objectRef{secretKind, pod.Namespace, name})
		return true
	})
	podutil.VisitPodConfigmapNames(pod, func(name string) bool {
		refs = append(refs, objectRef{configMapKind, pod.Namespace, name})
		return true
	})
	w.uses[pod.UID] = refs
	for _, ref := range refs {
		if held := w.refs[ref]; held != nil {
			held.pods++
			continue
		}
		ctx, stop := context.WithCancel(w.f.ctx)
		w.refs[ref] = &referenced{pods: 1, stop: stop}
		w.watchObject(ctx, stop, ref)
	}
}

// podGone is a pod removed from the node: the objects no other pod of the node references are
// no longer watched.
func (w *kubeletWatches) podGone(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	if w.f.pods != nil {
		w.f.pods.gone(pod)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ref := range w.uses[pod.UID] {
		if held := w.refs[ref]; held != nil {
			if held.pods--; held.pods == 0 {
				held.stop()
				delete(w.refs, ref)
			}
		}
	}
	delete(w.uses, pod.UID)
}

// watchObject watches one Secret or ConfigMap by name until stop, or until it is seen immutable.
func (w *kubeletWatches) watchObject(ctx context.Context, stop context.CancelFunc, ref objectRef) {
	selector := fields.OneTermEqualSelector("metadata.name", ref.name)
	store := &discardStore{st: w.f.st, immutable: stop}
	if ref.kind == secretKind {
		secrets := w.client.CoreV1().Secrets(ref.namespace)
		w.reflect(ctx, "secret "+ref.namespace+"/"+ref.name, &v1.Secret{}, store, minObjectWatchTimeout,
			listWatch(secrets.List, secrets.Watch, selector))
		return
	}
	configMaps := w.client.CoreV1().ConfigMaps(ref.namespace)
	w.reflect(ctx, "configmap "+ref.namespace+"/"+ref.name, &v1.ConfigMap{}, store, minObjectWatchTimeout,
		listWatch(configMaps.List, configMaps.Watch, selector))
}

func (w *kubeletWatches) discard() *discardStore { return &discardStore{st: w.f.st} }

// nodePods is the node's pod reflector's store: it keeps the node's pods and tells the node of
// each pod seen or gone.
type nodePods struct {
	cache.Store
	w *kubeletWatches
}

func (s *nodePods) Add(obj any) error {
	s.w.f.st.watchEvents.Add(1)
	if err := s.Store.Add(obj); err != nil {
		return err
	}
	s.w.podSeen(obj)
	return nil
}

func (s *nodePods) Update(obj any) error { return s.Add(obj) }

func (s *nodePods) Delete(obj any) error {
	s.w.f.st.watchEvents.Add(1)
	if err := s.Store.Delete(obj); err != nil {
		return err
	}
	s.w.podGone(obj)
	return nil
}

// Replace is a relist: pods not in it are gone.
func (s *nodePods) Replace(list []any, resourceVersion string) error {
	old := s.Store.List()
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	for _, obj := range old {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			if _, exists, _ := s.Store.GetByKey(key); !exists {
				s.w.podGone(obj)
			}
		}
	}
	for _, obj := range list {
		s.w.podSeen(obj)
	}
	return nil
}

// discardStore keeps nothing: fleet needs what these watches deliver only as load, and counts
// it. immutable, when set, is called once an immutable Secret or ConfigMap arrives: kubelet stops
// watching those.
type discardStore struct {
	st        *stats
	immutable context.CancelFunc
}

func (s *discardStore) seen(obj any) {
	s.st.watchEvents.Add(1)
	if s.immutable == nil {
		return
	}
	switch o := obj.(type) {
	case *v1.Secret:
		if o.Immutable != nil && *o.Immutable {
			s.immutable()
		}
	case *v1.ConfigMap:
		if o.Immutable != nil && *o.Immutable {
			s.immutable()
		}
	}
}

func (s *discardStore) Add(obj any) error    { s.seen(obj); return nil }
func (s *discardStore) Update(obj any) error { s.seen(obj); return nil }
func (s *discardStore) Delete(obj any) error { s.st.watchEvents.Add(1); return nil }
func (s *discardStore) Replace(list []any, _ string) error {
	for _, obj := range list {
		s.seen(obj)
	}
	return nil
}
func (s *discardStore) Resync() error { return nil }
