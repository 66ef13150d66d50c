package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	nodeutil "k8s.io/component-helpers/node/util"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

const (
	// The simulated machines are the plan's Azure x86-64 Linux VMs, whatever runs the harness:
	// a pool's nodeSelector on kubernetes.io/arch=amd64 must match on an arm64 laptop too.
	nodeOS   = "linux"
	nodeArch = "amd64"
	// What the node reports as its container runtime: there is none, and it says so.
	runtimeVersion = "containerd://simulated"
	// The annotation kubelet sets so that the attach/detach controller, not the kubelet,
	// attaches volumes (kubelet's enableControllerAttachDetach, on by default).
	controllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// node is what this node says about itself: the flags and the kubelet config folded together.
type node struct {
	name        string
	ip          string
	labels      map[string]string // --node-labels, over kubelet's own
	taints      []v1.Taint        // registerWithTaints
	providerID  string            // from the providerID drop-in on Azure
	capacity    v1.ResourceList   // --sim-capacity and pods=maxPods
	kubeletPort int32
	version     string
}

// newNode folds the flags and the kubelet config into what the node reports.
func newNode(o options, config *kubeletv1beta1.KubeletConfiguration) node {
	// Like kubelet, the labels it always sets come first and --node-labels may override them.
	labels := map[string]string{
		v1.LabelHostname:      o.nodeName,
		v1.LabelOSStable:      nodeOS,
		v1.LabelArchStable:    nodeArch,
		kubeletapis.LabelOS:   nodeOS,
		kubeletapis.LabelArch: nodeArch,
	}
	for key, value := range o.nodeLabels {
		labels[key] = value
	}
	capacity := o.capacity.DeepCopy()
	if capacity == nil {
		capacity = v1.ResourceList{}
	}
	// kubelet's capacity for pods is maxPods, whatever --sim-capacity says.
	capacity[v1.ResourcePods] = *resource.NewQuantity(int64(config.MaxPods), resource.DecimalSI)
	return node{
		name:        o.nodeName,
		ip:          o.nodeIP,
		labels:      labels,
		taints:      config.RegisterWithTaints,
		providerID:  config.ProviderID,
		capacity:    capacity,
		kubeletPort: config.Port,
		version:     version.Get().GitVersion,
	}
}

// object is the Node kubelet would create for n: its labels, taints and providerID, and a
// first status that already says Ready (kubelet registers with its status set).
func (n node) object(now time.Time) *v1.Node {
	object := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.name,
			Labels:      n.labels,
			Annotations: map[string]string{controllerManagedAttach: "true"},
		},
		Spec: v1.NodeSpec{ProviderID: n.providerID, Taints: n.taints},
	}
	n.setStatus(object, now)
	return object
}

// setStatus writes what kubelet's status setters would into object's status: capacity,
// addresses, version information and the four conditions kubelet owns, leaving any condition
// others own (NetworkUnavailable, a problem detector's) alone. A condition's transition time
// moves only when its status does; its heartbeat is now.
func (n node) setStatus(object *v1.Node, now time.Time) {
	status := &object.Status
	status.Capacity = n.capacity.DeepCopy()
	status.Allocatable = n.capacity.DeepCopy() // nothing reserved for the system: no system runs
	status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: n.ip},
		{Type: v1.NodeHostName, Address: n.name},
	}
	status.DaemonEndpoints.KubeletEndpoint.Port = n.kubeletPort
	status.NodeInfo = v1.NodeSystemInfo{
		KubeletVersion:          n.version,
		KubeProxyVersion:        n.version,
		OperatingSystem:         nodeOS,
		Architecture:            nodeArch,
		ContainerRuntimeVersion: runtimeVersion,
	}
	stamp := metav1.NewTime(now)
	for _, c := range []v1.NodeCondition{
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: v1.NodeDiskPressure, Status: v1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: v1.NodePIDPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
	} {
		c.LastHeartbeatTime, c.LastTransitionTime = stamp, stamp
		if i, old := nodeutil.GetNodeCondition(status, c.Type); old == nil {
			status.Conditions = append(status.Conditions, c)
		} else {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			status.Conditions[i] = c
		}
	}
}

// statusChanged tells whether two statuses differ in anything but heartbeat times: kubelet
// reports at once what changed, and only refreshes heartbeats every nodeStatusReportFrequency.
func statusChanged(old, current *v1.NodeStatus) bool {
	withoutHeartbeats := func(s *v1.NodeStatus) *v1.NodeStatus {
		s = s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return s
	}
	return !apiequality.Semantic.DeepEqual(withoutHeartbeats(old), withoutHeartbeats(current))
}

// register creates the Node as the node itself, so that the NodeRestriction admission plugin
// judges its labels and taints as it would a real kubelet's. A Node that already exists (a
// restart) keeps its labels and taints and gets its status refreshed, as kubelet does; created
// tells which happened. Transient failures are retried for about a minute; a refusal
// (forbidden, invalid) is final.
func register(ctx context.Context, client kubernetes.Interface, n node) (created bool, err error) {
	var lastErr error
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 15 * time.Second},
		func(ctx context.Context) (bool, error) {
			created, lastErr = tryRegister(ctx, client, n)
			switch {
			case lastErr == nil:
				return true, nil
			case apierrors.IsForbidden(lastErr) || apierrors.IsInvalid(lastErr) || apierrors.IsBadRequest(lastErr) || apierrors.IsUnauthorized(lastErr):
				return false, lastErr
			default:
				return false, nil
			}
		})
	if wait.Interrupted(err) && lastErr != nil {
		err = lastErr
	}
	return created, err
}

func tryRegister(ctx context.Context, client kubernetes.Interface, n node) (created bool, err error) {
	_, err = client.CoreV1().Nodes().Create(ctx, n.object(time.Now()), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err == nil, err
	}
	existing, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return false, patchStatus(ctx, client, n, existing, time.Now())
}

// patchStatus sends the difference between existing's status and n's, as kubelet does (a
// strategic merge patch of nodes/status, so that it never touches labels or taints).
func patchStatus(ctx context.Context, client kubernetes.Interface, n node, existing *v1.Node, now time.Time) error {
	updated := existing.DeepCopy()
	n.setStatus(updated, now)
	_, _, err := nodeutil.PatchNodeStatus(client.CoreV1(), types.NodeName(n.name), existing, updated)
	return err
}

// reportStatus is kubelet's node status loop: every nodeStatusUpdateFrequency it compares the
// status it would report with the API server's copy, and patches it if anything but the
// heartbeats differs (someone else changed it) or nodeStatusReportFrequency has passed. With
// the node lease on, the lease is the liveness signal and the status report is rare.
func reportStatus(ctx context.Context, client kubernetes.Interface, n node, config *kubeletv1beta1.KubeletConfiguration, logf func(string, ...any)) {
	lastReport := time.Now() // registration has just reported
	ticker := time.NewTicker(config.NodeStatusUpdateFrequency.Duration)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		existing, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				logf("node status: %v", err)
			}
			continue
		}
		now := time.Now()
		wanted := existing.DeepCopy()
		n.setStatus(wanted, now)
		if !statusChanged(&existing.Status, &wanted.Status) && now.Sub(lastReport) < config.NodeStatusReportFrequency.Duration {
			continue
		}
		if err := patchStatus(ctx, client, n, existing, now); err != nil {
			if ctx.Err() == nil {
				logf("node status: %v", err)
			}
			continue
		}
		lastReport = now
	}
}

// describe is the one line logged at registration.
func (n node) describe() string {
	return fmt.Sprintf("%d labels, %d taints, capacity %v", len(n.labels), len(n.taints), resourceString(n.capacity))
}

func resourceString(list v1.ResourceList) string {
	names := make([]string, 0, len(list))
	for name := range list {
		names = append(names, string(name))
	}
	sort.Strings(names)
	pairs := make([]string, len(names))
	for i, name := range names {
		quantity := list[v1.ResourceName(name)]
		pairs[i] = name + "=" + quantity.String()
	}
	return strings.Join(pairs, ",")
}
