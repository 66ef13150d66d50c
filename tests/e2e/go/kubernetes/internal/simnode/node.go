// Package simnode is what the harness's kubelet stand-ins (cmd/nodesim, one node joined as
// the node itself; cmd/fleet, thousands of nodes for the scale benchmark) say about a node and
// its pods: the Node a kubelet registers, the status its setters write, and the status it
// reports for a pod whose containers run. No API call is made here.
package simnode

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	nodeutil "k8s.io/component-helpers/node/util"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

const (
	// The simulated machines are the plan's Azure x86-64 Linux VMs, whatever runs the harness:
	// a pool's nodeSelector on kubernetes.io/arch=amd64 must match on an arm64 laptop too.
	OS   = "linux"
	Arch = "amd64"
	// What the node reports as its container runtime: there is none, and it says so.
	RuntimeVersion = "containerd://simulated"
	// The annotation kubelet sets so that the attach/detach controller, not the kubelet,
	// attaches volumes (kubelet's enableControllerAttachDetach, on by default).
	ControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"
	// kubelet's default port, which the node advertises in its status.
	KubeletPort = 10250
)

// Node is what a node says about itself.
type Node struct {
	Name        string
	IP          string
	Labels      map[string]string // the labels asked for, over kubelet's own (KubeletLabels)
	Taints      []v1.Taint        // registerWithTaints
	ProviderID  string
	Capacity    v1.ResourceList // pods included
	KubeletPort int32
	Version     string // kubeletVersion and kubeProxyVersion
}

// KubeletLabels are the labels kubelet always sets on its Node, the labels it is asked for
// (--node-labels) merged over them: they may override kubelet's.
func KubeletLabels(nodeName string, extra map[string]string) map[string]string {
	labels := map[string]string{
		v1.LabelHostname:      nodeName,
		v1.LabelOSStable:      OS,
		v1.LabelArchStable:    Arch,
		kubeletapis.LabelOS:   OS,
		kubeletapis.LabelArch: Arch,
	}
	for key, value := range extra {
		labels[key] = value
	}
	return labels
}

// Object is the Node kubelet would create for n: its labels, taints and providerID, and a
// first status that already says Ready (kubelet registers with its status set).
func (n Node) Object(now time.Time) *v1.Node {
	object := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      n.Labels,
			Annotations: map[string]string{ControllerManagedAttach: "true"},
		},
		Spec: v1.NodeSpec{ProviderID: n.ProviderID, Taints: n.Taints},
	}
	n.SetStatus(object, now)
	return object
}

// SetStatus writes what kubelet's status setters would into object's status: capacity,
// addresses, version information and the four conditions kubelet owns, leaving any condition
// others own (NetworkUnavailable, a problem detector's) alone. A condition's transition time
// moves only when its status does; its heartbeat is now.
func (n Node) SetStatus(object *v1.Node, now time.Time) {
	status := &object.Status
	status.Capacity = n.Capacity.DeepCopy()
	status.Allocatable = n.Capacity.DeepCopy() // nothing reserved for the system: no system runs
	status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: n.IP},
		{Type: v1.NodeHostName, Address: n.Name},
	}
	status.DaemonEndpoints.KubeletEndpoint.Port = n.KubeletPort
	status.NodeInfo = v1.NodeSystemInfo{
		KubeletVersion:          n.Version,
		KubeProxyVersion:        n.Version,
		OperatingSystem:         OS,
		Architecture:            Arch,
		ContainerRuntimeVersion: RuntimeVersion,
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

// StatusChanged tells whether two statuses differ in anything but heartbeat times: kubelet
// reports at once what changed, and only refreshes heartbeats every nodeStatusReportFrequency.
func StatusChanged(old, current *v1.NodeStatus) bool {
	withoutHeartbeats := func(s *v1.NodeStatus) *v1.NodeStatus {
		s = s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return s
	}
	return !apiequality.Semantic.DeepEqual(withoutHeartbeats(old), withoutHeartbeats(current))
}

// ParseResources reads resource=quantity pairs into a ResourceList; a negative quantity is
// refused. An error names the pair.
func ParseResources(pairs map[string]string) (v1.ResourceList, error) {
	list := v1.ResourceList{}
	for name, amount := range pairs {
		quantity, err := resource.ParseQuantity(amount)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, amount, err)
		}
		if quantity.Sign() < 0 {
			return nil, fmt.Errorf("%s=%s is negative", name, amount)
		}
		list[v1.ResourceName(name)] = quantity
	}
	return list, nil
}

// ResourceString is list as name=quantity pairs, sorted by name.
func ResourceString(list v1.ResourceList) string {
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

// LabelProblems lists, sorted, what kubelet refuses at startup in the labels it is asked to
// register with: labels in the kubernetes.io and k8s.io namespaces other than the ones a
// kubelet may set on its own Node (the NodeRestriction admission plugin would refuse them at
// registration anyway), and malformed keys or values. None: nil.
func LabelProblems(labels map[string]string) []string {
	var problems []string
	for key, value := range labels {
		if IsKubernetesNamespace(key) && !kubeletapis.IsKubeletLabel(key) {
			problems = append(problems, fmt.Sprintf("%s: not a label a kubelet may set in the kubernetes.io/k8s.io namespaces", key))
		}
		for _, msg := range validation.IsQualifiedName(key) {
			problems = append(problems, fmt.Sprintf("%s: %s", key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(value) {
			problems = append(problems, fmt.Sprintf("%s=%s: %s", key, value, msg))
		}
	}
	sort.Strings(problems)
	return problems
}

// IsKubernetesNamespace tells whether a label key's prefix is kubernetes.io or k8s.io, or a
// subdomain of either: the namespaces Kubernetes reserves.
func IsKubernetesNamespace(key string) bool {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return false
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
			return true
		}
	}
	return false
}
