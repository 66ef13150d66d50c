package simnode

import (
	"crypto/sha256"
	"encoding/hex"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// RunningStatus is the status kubelet reports once pod's containers all run: phase Running,
// its addresses, init containers completed (sidecars running), every container running and,
// with no probes to run, ready; and the pod conditions kubelet owns. Conditions others own
// (a readiness gate's) are kept, and the pod is Ready only if its readiness gates are.
func RunningStatus(pod *v1.Pod, hostIP, podIP string, now metav1.Time) v1.PodStatus {
	status := *pod.Status.DeepCopy()
	status.Phase = v1.PodRunning
	status.HostIP, status.HostIPs = hostIP, []v1.HostIP{{IP: hostIP}}
	status.PodIP, status.PodIPs = podIP, []v1.PodIP{{IP: podIP}}
	if status.StartTime == nil {
		status.StartTime = &now
	}

	status.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		s := containerStatus(pod, c, now)
		if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways { // not a sidecar: it ran and exited
			s.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: s.ContainerID,
			}}
			s.Started = ptr.To(false)
		}
		status.InitContainerStatuses = append(status.InitContainerStatuses, s)
	}
	status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, containerStatus(pod, c, now))
	}

	ready, readyReason := v1.ConditionTrue, ""
	for _, gate := range pod.Spec.ReadinessGates {
		if c := PodCondition(&status, gate.ConditionType); c == nil || c.Status != v1.ConditionTrue {
			ready, readyReason = v1.ConditionFalse, "ReadinessGatesNotReady"
		}
	}
	setPodCondition(&status, v1.PodScheduled, v1.ConditionTrue, "", now)
	setPodCondition(&status, v1.PodReadyToStartContainers, v1.ConditionTrue, "", now)
	setPodCondition(&status, v1.PodInitialized, v1.ConditionTrue, "", now)
	setPodCondition(&status, v1.ContainersReady, v1.ConditionTrue, "", now)
	setPodCondition(&status, v1.PodReady, ready, readyReason, now)
	return status
}

// containerStatus is container c running and ready since now. Its IDs are made up but stable,
// in containerd's formats.
func containerStatus(pod *v1.Pod, c v1.Container, now metav1.Time) v1.ContainerStatus {
	return v1.ContainerStatus{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     "sha256:" + digest(c.Image),
		ContainerID: "containerd://" + digest(string(pod.UID)+"/"+c.Name),
		State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
		Ready:       true,
		Started:     ptr.To(true),
	}
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// PodCondition is status's condition of type t, or nil.
func PodCondition(status *v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			return &status.Conditions[i]
		}
	}
	return nil
}

// setPodCondition sets a condition kubelet owns; its transition time moves only when its
// status does.
func setPodCondition(status *v1.PodStatus, t v1.PodConditionType, s v1.ConditionStatus, reason string, now metav1.Time) {
	if c := PodCondition(status, t); c != nil {
		if c.Status != s {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = s, reason, ""
		return
	}
	status.Conditions = append(status.Conditions, v1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
}
