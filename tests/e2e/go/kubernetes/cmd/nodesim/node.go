package main

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version"
	nodeutil "k8s.io/component-helpers/node/util"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// node is what this node says about itself: the flags and the kubelet config folded together.
type node = simnode.Node

// newNode folds the flags and the kubelet config into what the node reports.
func newNode(o options, config *kubeletv1beta1.KubeletConfiguration) node {
	// Like kubelet, the labels it always sets come first and --node-labels may override them.
	labels := simnode.KubeletLabels(o.nodeName, o.nodeLabels)
	capacity := o.capacity.DeepCopy()
	if capacity == nil {
		capacity = v1.ResourceList{}
	}
	// kubelet's capacity for pods is maxPods, whatever --sim-capacity says.
	capacity[v1.ResourcePods] = *resource.NewQuantity(int64(config.MaxPods), resource.DecimalSI)
	return node{
		Name:        o.nodeName,
		IP:          o.nodeIP,
		Labels:      labels,
		Taints:      config.RegisterWithTaints,
		ProviderID:  config.ProviderID,
		Capacity:    capacity,
		KubeletPort: config.Port,
		Version:     version.Get().GitVersion,
	}
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
	_, err = client.CoreV1().Nodes().Create(ctx, n.Object(time.Now()), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err == nil, err
	}
	existing, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return false, patchStatus(ctx, client, n, existing, time.Now())
}

// patchStatus sends the difference between existing's status and n's, as kubelet does (a
// strategic merge patch of nodes/status, so that it never touches labels or taints).
func patchStatus(ctx context.Context, client kubernetes.Interface, n node, existing *v1.Node, now time.Time) error {
	updated := existing.DeepCopy()
	n.SetStatus(updated, now)
	_, _, err := nodeutil.PatchNodeStatus(client.CoreV1(), types.NodeName(n.Name), existing, updated)
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
		existing, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				logf("node status: %v", err)
			}
			continue
		}
		now := time.Now()
		wanted := existing.DeepCopy()
		n.SetStatus(wanted, now)
		if !simnode.StatusChanged(&existing.Status, &wanted.Status) && now.Sub(lastReport) < config.NodeStatusReportFrequency.Duration {
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
func describe(n node) string {
	return fmt.Sprintf("%d labels, %d taints, capacity %v", len(n.Labels), len(n.Taints), simnode.ResourceString(n.Capacity))
}
