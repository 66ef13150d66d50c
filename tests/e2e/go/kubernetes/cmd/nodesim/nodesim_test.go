package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// renderedUnit is the kubelet ExecStart of a GPU node as infra/node/kubelet.py renders it.
var renderedUnit = []string{
	"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
	"--cert-dir=/var/lib/kubelet/pki",
	"--config=/etc/kubernetes/kubelet-config.yaml",
	"--config-dir=/etc/kubernetes/kubelet.conf.d",
	"--kubeconfig=/var/lib/kubelet/kubeconfig",
	"--node-labels=kubernetes.azure.com/accelerator=nvidia,node.kubernetes.io/instance-type=Standard_ND96isr_H100_v5," +
		"supercluster.io/pool=gpu,supercluster.io/role=gpu,topology.kubernetes.io/region=eastus",
}

// harnessFlags are what tests/e2e/cluster.py adds to it.
var harnessFlags = []string{"--hostname-override=prod-gpu-s000_0", "--node-ip=10.1.0.4",
	"--sim-capacity=cpu=96,memory=1900Gi,nvidia.com/gpu=8,ephemeral-storage=1000Gi"}

// renderedConfig is a KubeletConfiguration as infra/node/kubelet.py renders it.
const renderedConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
readOnlyPort: 0
tlsCipherSuites:
- TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
- TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
rotateCertificates: true
protectKernelDefaults: true
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
resolvConf: /run/systemd/resolve/resolv.conf
maxPods: 30
serializeImagePulls: false
maxParallelImagePulls: 10
registerWithTaints:
- key: nvidia.com/gpu
  value: present
  effect: NoSchedule
`

func mustParse(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseFlags(args)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	return o
}

func parseError(t *testing.T, args ...string) string {
	t.Helper()
	_, err := parseFlags(args)
	if err == nil {
		t.Fatalf("parseFlags(%q) accepted", args)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	return err.Error()
}

func TestTheRenderedUnitsFlagsAreAccepted(t *testing.T) {
	o := mustParse(t, append(renderedUnit, harnessFlags...)...)
	if o.bootstrapKubeconfig != "/etc/kubernetes/bootstrap-kubelet.conf" || o.certDir != "/var/lib/kubelet/pki" ||
		o.config != "/etc/kubernetes/kubelet-config.yaml" || o.configDir != "/etc/kubernetes/kubelet.conf.d" ||
		o.kubeconfig != "/var/lib/kubelet/kubeconfig" {
		t.Errorf("paths: %+v", o)
	}
	if o.nodeName != "prod-gpu-s000_0" || o.nodeIP != "10.1.0.4" || !o.runPods || o.podIPs != nil {
		t.Errorf("node: %+v", o)
	}
	if len(o.nodeLabels) != 5 || o.nodeLabels["supercluster.io/pool"] != "gpu" ||
		o.nodeLabels["node.kubernetes.io/instance-type"] != "Standard_ND96isr_H100_v5" {
		t.Errorf("labels: %v", o.nodeLabels)
	}
	if got := simnode.ResourceString(o.capacity); got != "cpu=96,ephemeral-storage=1000Gi,memory=1900Gi,nvidia.com/gpu=8" {
		t.Errorf("capacity: %s", got)
	}
}

func TestFlagsNotInTheRenderedUnitAreRefused(t *testing.T) {
	for _, flag := range []string{"--register-node=false", "--max-pods=10", "--v=2", "-x"} {
		msg := parseError(t, "--kubeconfig=k", "--node-ip=10.0.0.1", flag)
		if name := strings.SplitN(strings.TrimLeft(flag, "-"), "=", 2)[0]; !strings.Contains(msg, "--"+name) {
			t.Errorf("%s: the error does not name it: %s", flag, msg)
		}
	}
	parseError(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "extra")
	parseError(t, "--node-ip=10.0.0.1") // no --kubeconfig
}

func TestSimFlags(t *testing.T) {
	o := mustParse(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--hostname-override=N1", "--sim-run-pods=false",
		"--sim-pod-ips=10.0.0.10, 10.0.0.11")
	if o.runPods || len(o.podIPs) != 2 || o.podIPs[1] != "10.0.0.11" {
		t.Errorf("%+v", o)
	}
	if o.nodeName != "n1" { // kubelet lowercases the hostname it registers as
		t.Errorf("node name %q", o.nodeName)
	}
	parseError(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--sim-pod-ips=10.0.0.300")
	parseError(t, "--kubeconfig=k", "--node-ip=10.0.0.1,10.0.0.2")
}

func TestNodeLabelsAreParsedAndCheckedAsKubeletDoes(t *testing.T) {
	o := mustParse(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--node-labels= a=1 ,b=x.y,bare,,topology.kubernetes.io/zone=eastus-1")
	want := map[string]string{"a": "1", "b": "x.y", "bare": "", "topology.kubernetes.io/zone": "eastus-1"}
	if len(o.nodeLabels) != len(want) {
		t.Errorf("got %v, want %v", o.nodeLabels, want)
	}
	for key, value := range want {
		if o.nodeLabels[key] != value {
			t.Errorf("%s: got %q, want %q", key, o.nodeLabels[key], value)
		}
	}
	for _, bad := range []string{
		"kubernetes.io/role=gpu",                // not a kubelet label: kubelet refuses to start
		"node-restriction.kubernetes.io/pool=a", // reserved for the cluster admin
		"example.k8s.io/x=y",
		"supercluster.io/pool=has space",
		"-bad=1",
		"b=x=y", // split at the first "=": the value holds one
	} {
		if msg := parseError(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--node-labels="+bad); !strings.Contains(msg, "--node-labels") {
			t.Errorf("%s: %s", bad, msg)
		}
	}
	mustParse(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--node-labels=node.kubernetes.io/exclude-from-external-load-balancers=true,kubelet.kubernetes.io/x=y")
}

func TestCapacityParsing(t *testing.T) {
	capacity, err := parseCapacity("cpu=2500m, memory=16Gi,nvidia.com/gpu=8")
	if err != nil {
		t.Fatal(err)
	}
	if cpu := capacity[v1.ResourceCPU]; cpu.MilliValue() != 2500 {
		t.Errorf("cpu %s", cpu.String())
	}
	if gpu := capacity["nvidia.com/gpu"]; gpu.Value() != 8 {
		t.Errorf("gpu %s", gpu.String())
	}
	if capacity, err := parseCapacity(""); err != nil || len(capacity) != 0 {
		t.Errorf("empty: %v %v", capacity, err)
	}
	for _, bad := range []string{"cpu=lots", "cpu", "memory=-1Gi"} {
		if _, err := parseCapacity(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTheRenderedConfigLoadsWithKubeletsDefaults(t *testing.T) {
	dir := t.TempDir()
	config, err := loadConfig(writeFile(t, filepath.Join(dir, "kubelet-config.yaml"), renderedConfig), filepath.Join(dir, "missing.d"))
	if err != nil {
		t.Fatal(err)
	}
	if config.MaxPods != 30 || len(config.ClusterDNS) != 1 || config.ClusterDNS[0] != "10.96.0.10" {
		t.Errorf("maxPods %d, clusterDNS %v", config.MaxPods, config.ClusterDNS)
	}
	want := v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule}
	if len(config.RegisterWithTaints) != 1 || config.RegisterWithTaints[0] != want {
		t.Errorf("taints %v", config.RegisterWithTaints)
	}
	if config.NodeLeaseDurationSeconds != 40 || config.NodeStatusUpdateFrequency.Duration != 10*time.Second ||
		config.NodeStatusReportFrequency.Duration != 5*time.Minute || config.Port != 10250 {
		t.Errorf("defaults: lease %d, update %s, report %s, port %d", config.NodeLeaseDurationSeconds,
			config.NodeStatusUpdateFrequency.Duration, config.NodeStatusReportFrequency.Duration, config.Port)
	}

	config, err = loadConfig("", "")
	if err != nil || config.MaxPods != 110 {
		t.Errorf("no config: maxPods %d, %v", config.MaxPods, err)
	}
}

func TestDropInsAreMergedInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	base := writeFile(t, filepath.Join(dir, "kubelet-config.yaml"), renderedConfig)
	dropIns := filepath.Join(dir, "kubelet.conf.d")
	const header = `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", `
	writeFile(t, filepath.Join(dropIns, "10-provider-id.conf"), header+`"providerID": "azure:///x", "maxPods": 50}`)
	writeFile(t, filepath.Join(dropIns, "20-pods.conf"), header+`"maxPods": 60, "nodeLeaseDurationSeconds": 20}`)
	writeFile(t, filepath.Join(dropIns, "99-ignored.yaml"), "not: a drop-in")

	config, err := loadConfig(base, dropIns)
	if err != nil {
		t.Fatal(err)
	}
	if config.ProviderID != "azure:///x" || config.MaxPods != 60 || config.NodeLeaseDurationSeconds != 20 {
		t.Errorf("providerID %q, maxPods %d, lease %d", config.ProviderID, config.MaxPods, config.NodeLeaseDurationSeconds)
	}
	if len(config.RegisterWithTaints) != 1 || config.ClusterDomain != "cluster.local" {
		t.Errorf("the drop-ins lost the base config's fields: %+v", config)
	}

	writeFile(t, filepath.Join(dropIns, "30-typo.conf"), header+`"maxpods": 70}`)
	if _, err := loadConfig(base, dropIns); err == nil || !strings.Contains(err.Error(), "30-typo.conf") {
		t.Errorf("a drop-in's unknown field: %v", err)
	}
}

func TestConfigsKubeletWouldNotRunAreRefused(t *testing.T) {
	for name, config := range map[string]string{
		"unknown field":   renderedConfig + "registerWithTaint: []\n",
		"miscased field":  strings.Replace(renderedConfig, "maxPods", "MaxPods", 1),
		"duplicate field": renderedConfig + "maxPods: 40\n",
		"unknown taint":   strings.Replace(renderedConfig, "  effect: NoSchedule", "  effect: NoSchedule\n  operator: Exists", 1),
		"wrong kind":      strings.Replace(renderedConfig, "kind: KubeletConfiguration", "kind: KubeProxyConfiguration", 1),
		"old apiVersion":  strings.Replace(renderedConfig, "v1beta1", "v1alpha1", 1),
		"empty":           "",
		"invalid value":   strings.Replace(renderedConfig, "maxPods: 30", "maxPods: -1", 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig(writeFile(t, filepath.Join(t.TempDir(), "c.yaml"), config), "")
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
}

func testNode(t *testing.T) node {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "conf.d", "10-provider-id.conf"),
		`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","providerID":"azure:///vm/0"}`)
	config, err := loadConfig(writeFile(t, filepath.Join(dir, "kubelet-config.yaml"), renderedConfig), filepath.Join(dir, "conf.d"))
	if err != nil {
		t.Fatal(err)
	}
	return newNode(mustParse(t, append(renderedUnit, harnessFlags...)...), config)
}

func TestTheNodeIsTheOneKubeletWouldRegister(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	object := testNode(t).Object(now)

	if object.Name != "prod-gpu-s000_0" || object.Spec.ProviderID != "azure:///vm/0" {
		t.Errorf("name %q, providerID %q", object.Name, object.Spec.ProviderID)
	}
	for key, value := range map[string]string{
		"kubernetes.io/hostname": "prod-gpu-s000_0", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
		"supercluster.io/pool": "gpu", "topology.kubernetes.io/region": "eastus",
	} {
		if object.Labels[key] != value {
			t.Errorf("label %s=%q, want %q", key, object.Labels[key], value)
		}
	}
	if len(object.Labels) != 10 {
		t.Errorf("labels: %v", object.Labels)
	}
	if len(object.Spec.Taints) != 1 || object.Spec.Taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("taints: %v", object.Spec.Taints)
	}

	status := object.Status
	if got := simnode.ResourceString(status.Capacity); got != "cpu=96,ephemeral-storage=1000Gi,memory=1900Gi,nvidia.com/gpu=8,pods=30" {
		t.Errorf("capacity %s", got)
	}
	if simnode.ResourceString(status.Allocatable) != simnode.ResourceString(status.Capacity) {
		t.Errorf("allocatable %v", status.Allocatable)
	}
	if len(status.Addresses) != 2 || status.Addresses[0] != (v1.NodeAddress{Type: v1.NodeInternalIP, Address: "10.1.0.4"}) ||
		status.Addresses[1] != (v1.NodeAddress{Type: v1.NodeHostName, Address: "prod-gpu-s000_0"}) {
		t.Errorf("addresses %v", status.Addresses)
	}
	info := status.NodeInfo
	if info.KubeletVersion == "" || info.KubeProxyVersion != info.KubeletVersion || info.OperatingSystem != "linux" ||
		info.Architecture != "amd64" || info.ContainerRuntimeVersion != "containerd://simulated" {
		t.Errorf("nodeInfo %+v", info)
	}
	want := map[v1.NodeConditionType]v1.ConditionStatus{
		v1.NodeReady: v1.ConditionTrue, v1.NodeMemoryPressure: v1.ConditionFalse,
		v1.NodeDiskPressure: v1.ConditionFalse, v1.NodePIDPressure: v1.ConditionFalse,
	}
	if len(status.Conditions) != len(want) {
		t.Errorf("conditions %v", status.Conditions)
	}
	for _, c := range status.Conditions {
		if c.Status != want[c.Type] || !c.LastHeartbeatTime.Time.Equal(now) || !c.LastTransitionTime.Time.Equal(now) {
			t.Errorf("condition %+v", c)
		}
		if c.Type == v1.NodeReady && c.Reason != "KubeletReady" {
			t.Errorf("ready reason %q", c.Reason)
		}
	}
}

func TestMaxPodsIsThePodCapacity(t *testing.T) {
	o := mustParse(t, "--kubeconfig=k", "--node-ip=10.0.0.1", "--sim-capacity=pods=500")
	config, err := loadConfig("", "")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(o, config)
	if pods := n.Capacity[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods %s", pods.String())
	}
	if pods := o.capacity[v1.ResourcePods]; pods.Value() != 500 {
		t.Error("the options were modified")
	}
}

func TestAStatusRefreshMovesHeartbeatsOnly(t *testing.T) {
	n := testNode(t)
	registered := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	object := n.Object(registered)
	// Someone else's condition, and the node lifecycle controller's verdict on a silent node.
	object.Status.Conditions = append(object.Status.Conditions, v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse})
	ready := &object.Status.Conditions[3]
	ready.Status, ready.Reason = v1.ConditionUnknown, "NodeStatusUnknown"
	original := object.DeepCopy()

	later := registered.Add(time.Hour)
	n.SetStatus(object, later)
	if !simnode.StatusChanged(&original.Status, &object.Status) {
		t.Error("Unknown back to Ready is a change")
	}
	if len(object.Status.Conditions) != 5 || object.Status.Conditions[4].Type != v1.NodeNetworkUnavailable {
		t.Errorf("another owner's condition was dropped: %v", object.Status.Conditions)
	}
	for _, c := range object.Status.Conditions[:4] {
		moved := c.Type == v1.NodeReady // only Ready changed status
		if !c.LastHeartbeatTime.Time.Equal(later) || c.LastTransitionTime.Time.Equal(later) != moved {
			t.Errorf("%s: heartbeat %s, transition %s", c.Type, c.LastHeartbeatTime, c.LastTransitionTime)
		}
	}

	refreshed := object.DeepCopy()
	n.SetStatus(refreshed, later.Add(time.Minute))
	if simnode.StatusChanged(&object.Status, &refreshed.Status) {
		t.Error("a heartbeat alone is not a change")
	}
}

func TestANewPodIsReportedRunning(t *testing.T) {
	now := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	scheduled := metav1.NewTime(now.Add(-time.Second))
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{
				{Name: "init", Image: "busybox"},
				{Name: "sidecar", Image: "envoy", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)},
			},
			Containers: []v1.Container{{Name: "a", Image: "nginx:1"}, {Name: "b", Image: "redis:7"}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBestEffort,
			Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: scheduled}}},
	}
	status := simnode.RunningStatus(pod, "10.1.0.4", "10.1.0.10", now)

	if status.Phase != v1.PodRunning || status.HostIP != "10.1.0.4" || status.PodIP != "10.1.0.10" ||
		len(status.PodIPs) != 1 || status.PodIPs[0].IP != "10.1.0.10" || len(status.HostIPs) != 1 ||
		status.StartTime == nil || !status.StartTime.Equal(&now) || status.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("status %+v", status)
	}
	for _, c := range status.Conditions {
		if c.Status != v1.ConditionTrue {
			t.Errorf("condition %+v", c)
		}
		if c.Type == v1.PodScheduled && !c.LastTransitionTime.Equal(&scheduled) {
			t.Errorf("PodScheduled moved: %+v", c)
		}
	}
	if len(status.Conditions) != 5 || simnode.PodCondition(&status, v1.PodReady) == nil || simnode.PodCondition(&status, v1.ContainersReady) == nil {
		t.Errorf("conditions %+v", status.Conditions)
	}
	if len(status.ContainerStatuses) != 2 {
		t.Fatalf("container statuses %+v", status.ContainerStatuses)
	}
	for i, s := range status.ContainerStatuses {
		if s.Name != pod.Spec.Containers[i].Name || s.Image != pod.Spec.Containers[i].Image || !s.Ready ||
			s.State.Running == nil || !strings.HasPrefix(s.ContainerID, "containerd://") || s.ImageID == "" {
			t.Errorf("container %+v", s)
		}
	}
	if status.ContainerStatuses[0].ContainerID == status.ContainerStatuses[1].ContainerID {
		t.Error("two containers, one ID")
	}
	if len(status.InitContainerStatuses) != 2 {
		t.Fatalf("init container statuses %+v", status.InitContainerStatuses)
	}
	if s := status.InitContainerStatuses[0]; s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 || !s.Ready {
		t.Errorf("init container %+v", s)
	}
	if s := status.InitContainerStatuses[1]; s.State.Running == nil || !s.Ready {
		t.Errorf("sidecar %+v", s)
	}
	if pod.Status.Phase != v1.PodPending || len(pod.Status.Conditions) != 1 {
		t.Error("the informer's pod was modified")
	}
}

func TestAPodWaitsForItsReadinessGates(t *testing.T) {
	gate := v1.PodConditionType("example.com/load-balancer")
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers:     []v1.Container{{Name: "a", Image: "nginx"}},
		ReadinessGates: []v1.PodReadinessGate{{ConditionType: gate}},
	}}
	status := simnode.RunningStatus(pod, "10.1.0.4", "10.1.0.4", metav1.Now())
	if c := simnode.PodCondition(&status, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" {
		t.Errorf("ready %+v", c)
	}
	pod.Status.Conditions = []v1.PodCondition{{Type: gate, Status: v1.ConditionTrue}}
	status = simnode.RunningStatus(pod, "10.1.0.4", "10.1.0.4", metav1.Now())
	if c := simnode.PodCondition(&status, v1.PodReady); c.Status != v1.ConditionTrue || simnode.PodCondition(&status, gate) == nil {
		t.Errorf("ready %+v, conditions %+v", c, status.Conditions)
	}
}

func TestPodAddressesComeFromThePoolThenTheNode(t *testing.T) {
	pool := []string{"10.1.0.10", "10.1.0.11"}
	if ip := pickIP(pool, map[string]bool{}, "10.1.0.4"); ip != "10.1.0.10" {
		t.Error(ip)
	}
	if ip := pickIP(pool, map[string]bool{"10.1.0.10": true}, "10.1.0.4"); ip != "10.1.0.11" {
		t.Error(ip)
	}
	if ip := pickIP(pool, map[string]bool{"10.1.0.10": true, "10.1.0.11": true}, "10.1.0.4"); ip != "10.1.0.4" {
		t.Error(ip)
	}
	if ip := pickIP(nil, nil, "10.1.0.4"); ip != "10.1.0.4" {
		t.Error(ip)
	}
}

func TestCredentialProvidersAreCheckedAsKubeletChecksThem(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "providers.yaml")
	write := func(text string) {
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: acr
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [example.azurecr.io]
  defaultCacheDuration: 1h
  args: [example.azurecr.io]
`)
	if err := checkCredentialProviders(config, dir); err == nil || !strings.Contains(err.Error(), "no executable") {
		t.Fatalf("a missing provider executable: got %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "acr"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkCredentialProviders(config, dir); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
	if err := checkCredentialProviders(config, ""); err == nil {
		t.Fatal("the config without the bin dir was accepted")
	}
	write("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: acr\n  typo: 1\n")
	if err := checkCredentialProviders(config, dir); err == nil {
		t.Fatal("an unknown field was accepted")
	}
}
