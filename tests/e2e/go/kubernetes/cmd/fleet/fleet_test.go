package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

const exampleProfile = `{"pools": [
  {"name": "h100a", "count": 3, "namePrefix": "h100a-s",
   "labels": {"supercluster.io/pool": "h100a", "node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5"},
   "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
   "capacity": {"cpu": "96", "memory": "1900Gi", "nvidia.com/gpu": "8", "pods": "8"}},
  {"name": "cpu", "count": 2, "namePrefix": "cpu-s", "capacity": {"cpu": 16}}
]}`

func mustFlags(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseFlags(args)
	if err != nil {
		t.Fatalf("parseFlags(%q): %v", args, err)
	}
	return o
}

func TestFlagDefaultsAreKubelets(t *testing.T) {
	o := mustFlags(t, "--kubeconfig=k", "--profile=p")
	if o.leaseDuration != 40*time.Second || o.statusUpdate != 10*time.Second || o.statusReport != 5*time.Minute {
		t.Errorf("lease %s, update %s, report %s", o.leaseDuration, o.statusUpdate, o.statusReport)
	}
	if o.clientQPS != 2000 || o.clientBurst != 4000 || o.registerQPS != 0 || !o.runPods || o.deleteOnExit ||
		o.reportEvery != 10*time.Second || o.offset != 0 || o.asNodes {
		t.Errorf("%+v", o)
	}
	if o.nodeCIDR.String() != "100.64.0.0/11" || o.podCIDR.String() != "100.96.0.0/11" {
		t.Errorf("cidrs %s %s", o.nodeCIDR, o.podCIDR)
	}
	o = mustFlags(t, "--kubeconfig=k", "--profile=p", "--offset=3000", "--register-qps=50", "--register-burst=10",
		"--lease-duration=20s", "--run-pods=false", "--delete-on-exit", "--node-cidr=10.1.2.3/16")
	if o.offset != 3000 || o.registerQPS != 50 || o.registerBurst != 10 || o.leaseDuration != 20*time.Second ||
		o.runPods || !o.deleteOnExit || o.nodeCIDR.String() != "10.1.0.0/16" {
		t.Errorf("%+v", o)
	}
}

func TestBadFlagsAreRefusedInOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"--profile=p"},
		{"--kubeconfig=k"},
		{"--kubeconfig=k", "--profile=p", "--lease-duration=1500ms"},
		{"--kubeconfig=k", "--profile=p", "--offset=-1"},
		{"--kubeconfig=k", "--profile=p", "--workers=0"},
		{"--kubeconfig=k", "--profile=p", "--node-cidr=fd00::/64"},
		{"--kubeconfig=k", "--profile=p", "--pod-cidr=10.0.0.0/31"},
		{"--kubeconfig=k", "--profile=p", "--nodes=3"},
		{"--kubeconfig=k", "--profile=p", "extra"},
	} {
		_, err := parseFlags(args)
		if err == nil {
			t.Errorf("%q accepted", args)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: not one line: %q", args, err)
		}
	}
	if _, err := parseFlags([]string{"--nodes=3"}); err == nil || !strings.Contains(err.Error(), "--nodes") {
		t.Errorf("unknown flag: %v", err)
	}
}

func mustProfile(t *testing.T, text string) profile {
	t.Helper()
	p, err := parseProfile([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheProfileGivesNamedNodesWithKubeletsLabels(t *testing.T) {
	prefix := netip.MustParsePrefix("100.64.0.0/11")
	nodes, err := mustProfile(t, exampleProfile).nodes(0, prefix, "v1.33.4")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if got := strings.Join(names, " "); got != "h100a-s000000 h100a-s000001 h100a-s000002 cpu-s000000 cpu-s000001" {
		t.Errorf("names: %s", got)
	}
	gpu := nodes[1]
	for key, value := range map[string]string{
		"kubernetes.io/hostname": "h100a-s000001", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "supercluster.io/pool": "h100a",
		"node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
	} {
		if gpu.Labels[key] != value {
			t.Errorf("label %s=%q, want %q", key, gpu.Labels[key], value)
		}
	}
	if len(gpu.Labels) != 7 {
		t.Errorf("labels %v", gpu.Labels)
	}
	if len(gpu.Taints) != 1 || gpu.Taints[0] != (v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule}) {
		t.Errorf("taints %v", gpu.Taints)
	}
	if got := simnode.ResourceString(gpu.Capacity); got != "cpu=96,memory=1900Gi,nvidia.com/gpu=8,pods=8" {
		t.Errorf("capacity %s", got)
	}
	if got := simnode.ResourceString(nodes[3].Capacity); got != "cpu=16,pods=110" {
		t.Errorf("capacity without pods: %s", got)
	}
	if len(nodes[3].Taints) != 0 || len(nodes[3].Labels) != 5 {
		t.Errorf("cpu node %+v", nodes[3])
	}
	// Pool p's node i is address (p<<16)+i+1.
	for i, want := range []string{"100.64.0.1", "100.64.0.2", "100.64.0.3", "100.65.0.1", "100.65.0.2"} {
		if nodes[i].IP != want {
			t.Errorf("%s: address %s, want %s", nodes[i].Name, nodes[i].IP, want)
		}
	}
	object := gpu.Object(time.Now())
	if object.Name != "h100a-s000001" || object.Status.NodeInfo.KubeletVersion != "v1.33.4" ||
		object.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 || object.Status.Addresses[0].Address != "100.64.0.2" {
		t.Errorf("node object %+v", object)
	}
}

func TestOffsetsSplitAPoolBetweenProcesses(t *testing.T) {
	p := mustProfile(t, exampleProfile)
	prefix := netip.MustParsePrefix("100.64.0.0/11")
	first, _ := p.nodes(0, prefix, "v")
	second, err := p.nodes(3, prefix, "v")
	if err != nil {
		t.Fatal(err)
	}
	if second[0].Name != "h100a-s000003" || second[2].Name != "h100a-s000005" || second[3].Name != "cpu-s000003" {
		t.Errorf("names %s %s %s", second[0].Name, second[2].Name, second[3].Name)
	}
	seen := map[string]bool{}
	for _, n := range append(first, second...) {
		if seen[n.IP] {
			t.Errorf("address %s twice", n.IP)
		}
		seen[n.IP] = true
	}
	if n, _ := p.nodes(1234567, netip.MustParsePrefix("10.0.0.0/8"), "v"); n != nil {
		t.Error("a node index past a pool's address block was accepted")
	}
	if name := nodeName("x-", 1234567); name != "x-1234567" {
		t.Error(name)
	}
}

func TestBadProfilesAreRefused(t *testing.T) {
	pool := func(fields string) string {
		return `{"pools": [{"name": "a", "count": 2, "namePrefix": "a-"` + fields + `}]}`
	}
	for name, text := range map[string]string{
		"not json":          `{"pools": [`,
		"no pools":          `{"pools": []}`,
		"unknown field":     pool(`, "taint": []`),
		"miscased field":    pool(`, "Labels": {}`),
		"duplicate field":   pool(`, "count": 3`),
		"no name":           `{"pools": [{"count": 1, "namePrefix": "a-"}]}`,
		"two pools a":       `{"pools": [{"name": "a", "count": 1, "namePrefix": "a-"}, {"name": "a", "count": 1, "namePrefix": "b-"}]}`,
		"zero count":        `{"pools": [{"name": "a", "count": 0, "namePrefix": "a-"}]}`,
		"bad effect":        pool(`, "taints": [{"key": "k", "value": "v", "effect": "NoWay"}]`),
		"bad taint key":     pool(`, "taints": [{"key": "a b", "effect": "NoSchedule"}]`),
		"same taint twice":  pool(`, "taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "x", "effect": "NoSchedule"}]`),
		"not kubelet's":     pool(`, "labels": {"node-role.kubernetes.io/gpu": ""}`),
		"bad label value":   pool(`, "labels": {"a": "has space"}`),
		"bad quantity":      pool(`, "capacity": {"cpu": "lots"}`),
		"negative quantity": pool(`, "capacity": {"memory": "-1Gi"}`),
		"boolean quantity":  pool(`, "capacity": {"cpu": true}`),
		"bad resource name": pool(`, "capacity": {"a b": "1"}`),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseProfile([]byte(text))
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}

	prefix := netip.MustParsePrefix("100.64.0.0/11")
	for name, text := range map[string]string{
		"uppercase name":   `{"pools": [{"name": "a", "count": 1, "namePrefix": "A-"}]}`,
		"same names":       `{"pools": [{"name": "a", "count": 1, "namePrefix": "x-"}, {"name": "b", "count": 1, "namePrefix": "x-"}]}`,
		"name too long":    `{"pools": [{"name": "a", "count": 1, "namePrefix": "` + strings.Repeat("x", 60) + `"}]}`,
		"prefix too small": exampleProfile,
	} {
		t.Run(name, func(t *testing.T) {
			cidr := prefix
			if name == "prefix too small" {
				cidr = netip.MustParsePrefix("10.0.0.0/16") // one pool's block: not two
			}
			if _, err := mustProfile(t, text).nodes(0, cidr, "v"); err == nil {
				t.Fatal("accepted")
			} else {
				t.Log(err)
			}
		})
	}
}

func TestReadProfileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pools.json")
	if err := os.WriteFile(path, []byte(`{"pools": [{"name": "a"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readProfile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("%v", err)
	}
}

// Nodes that register at the same moment have their first renewals spread evenly over the
// renew interval, then renew every interval plus at most 4%.
func TestRenewalsAreSpreadThenPeriodic(t *testing.T) {
	const nodes, bins = 20000, 10
	interval := 10 * time.Second
	counts := make([]int, bins)
	for i := 0; i < nodes; i++ {
		d := spread(rand.Float64(), interval)
		if d < 0 || d >= interval {
			t.Fatalf("first renewal after %s", d)
		}
		counts[int(d*bins/interval)]++
	}
	for bin, count := range counts {
		if math.Abs(float64(count)-nodes/bins) > 0.1*nodes/bins {
			t.Errorf("second %d of the interval has %d first renewals, want about %d", bin, count, nodes/bins)
		}
	}
	if spread(0, interval) != 0 || spread(0.5, interval) != 5*time.Second {
		t.Error("spread is not linear")
	}
	for _, u := range []float64{0, 0.5, 0.999999} {
		d := jitter(u, interval)
		if d < interval || d >= interval+interval*4/100 {
			t.Errorf("jitter(%g) = %s", u, d)
		}
	}
	var got []time.Duration
	var wait time.Duration
	for i := 0; i < 7; i++ {
		wait = backoff(wait, 200*time.Millisecond, 7*time.Second)
		got = append(got, wait)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 7 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("backoff %v, want %v", got, want)
			break
		}
	}
}

func TestPercentilesAreNearestRank(t *testing.T) {
	samples := make([]float64, 100)
	for i := range samples {
		samples[i] = float64(100 - i) // 100 down to 1, unsorted
	}
	for q, want := range map[float64]float64{0.5: 50, 0.99: 99, 1: 100, 0.001: 1} {
		if got := percentile(samples, q); got != want {
			t.Errorf("p%g = %g, want %g", q*100, got, want)
		}
	}
	if got := percentile([]float64{7}, 0.99); got != 7 {
		t.Errorf("one sample: %g", got)
	}
	if got := percentile([]float64{1, 2, 3, 4}, 0.5); got != 2 {
		t.Errorf("even count: %g", got)
	}
	if !math.IsNaN(percentile(nil, 0.5)) || rounded(math.NaN()) != nil || *rounded(1.23456) != 1.235 {
		t.Error("no samples is null, others are rounded to 3 decimals")
	}
}

func TestReportsAreOneJSONObjectALine(t *testing.T) {
	st := &stats{registrationStarted: time.Now()}
	st.renewed(12 * time.Millisecond)
	st.renewed(30 * time.Millisecond)
	st.late(time.Millisecond)
	var out bytes.Buffer
	e := &emitter{out: &out}
	e.emit(st.report(time.Unix(1700000000, 0), false))
	e.emit(st.report(time.Unix(1700000010, 0), true)) // no renewal since the last report
	if st.nodeRegistered(1500*time.Millisecond, false, 2) || !st.nodeRegistered(2*time.Second, true, 2) {
		t.Error("the second of two registrations is the last")
	}
	e.emit(st.registeredEvent(2))

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %q", len(lines), out.String())
	}
	var first, final, registered map[string]any
	for i, into := range []*map[string]any{&first, &final, &registered} {
		if err := json.Unmarshal([]byte(lines[i]), into); err != nil {
			t.Fatalf("%s: %v", lines[i], err)
		}
	}
	for _, key := range []string{"event", "t", "nodes", "leaseRenewals", "leaseErrors", "statusUpdates", "podsStarted", "renewP99Ms"} {
		if _, ok := first[key]; !ok {
			t.Errorf("report has no %s: %s", key, lines[0])
		}
	}
	if first["event"] != "report" || first["t"] != 1700000000.0 || first["leaseRenewals"] != 2.0 ||
		first["renewP99Ms"] != 30.0 || first["renewP50Ms"] != 12.0 || first["lagP99Ms"] != 1.0 || first["final"] != nil {
		t.Errorf("report %s", lines[0])
	}
	if final["final"] != true || final["renewP99Ms"] != nil || final["leaseRenewals"] != 2.0 {
		t.Errorf("final report %s", lines[1])
	}
	if registered["event"] != "registered" || registered["nodes"] != 2.0 || registered["existed"] != 1.0 ||
		registered["p50"] != 1.5 || registered["p99"] != 2.0 || registered["errors"] != 0.0 {
		t.Errorf("registered %s", lines[2])
	}
}

func TestAStatusRefreshPatchesTheHeartbeatsOnly(t *testing.T) {
	n := simnode.Node{Name: "n1", IP: "100.64.0.1", Labels: simnode.KubeletLabels("n1", nil),
		Capacity: v1.ResourceList{}, KubeletPort: 10250, Version: "v1.33.4"}
	registered := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	existing := n.Object(registered)
	wanted := existing.DeepCopy()
	n.SetStatus(wanted, registered.Add(5*time.Minute))

	patch, err := statusPatch(existing, wanted)
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Status map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(patch, &decoded); err != nil {
		t.Fatal(err)
	}
	for key := range decoded.Status {
		if key != "conditions" && key != "$setElementOrder/conditions" {
			t.Errorf("the patch sends %s: %s", key, patch)
		}
	}
	if !strings.Contains(string(patch), `"lastHeartbeatTime":"2025-01-01T00:05:00Z"`) ||
		strings.Contains(string(patch), "lastTransitionTime") || strings.Contains(string(patch), "metadata") {
		t.Errorf("patch %s", patch)
	}
}

func testFleet(t *testing.T, client kubernetes.Interface, nodes ...simnode.Node) (*fleet, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	o := mustFlags(t, "--kubeconfig=k", "--profile=p")
	var out bytes.Buffer
	f := newFleet(ctx, cancel, o, nodes, clients{nodes: []kubernetes.Interface{client}}, &stats{registrationStarted: time.Now()},
		&emitter{out: &out}, t.Logf)
	return f, &out
}

func verbs(client *fake.Clientset, resource string) string {
	var got []string
	for _, a := range client.Actions() {
		if a.GetResource().Resource == resource {
			got = append(got, a.GetVerb())
		}
	}
	return strings.Join(got, ",")
}

// A renewal is one Update of the Lease last returned; the lease is fetched only after a conflict.
func TestALeaseIsUpdatedNotFetched(t *testing.T) {
	client := fake.NewSimpleClientset()
	f, _ := testFleet(t, client, simnode.Node{Name: "n1"})
	n := f.nodes[0]
	n.uid = "uid-1"
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := f.writeLease(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := verbs(client, "leases"); got != "create,update,update" {
		t.Errorf("requests %s", got)
	}
	lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != "n1" || *lease.Spec.LeaseDurationSeconds != 40 || lease.Spec.RenewTime == nil ||
		len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != "uid-1" || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease %+v", lease)
	}

	conflicts := 1
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("stale"))
		}
		return false, nil, nil
	})
	client.ClearActions()
	if _, err := f.writeLease(ctx, n); !apierrors.IsConflict(err) {
		t.Fatalf("conflict: %v", err)
	}
	for i := 0; i < 2; i++ {
		if _, err := f.writeLease(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if got := verbs(client, "leases"); got != "update,get,update,update" {
		t.Errorf("after a conflict: %s", got)
	}

	// A lease left by an earlier run is fetched once, then updated.
	stale := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n2", Namespace: "kube-node-lease"}}
	client = fake.NewSimpleClientset(stale)
	f, _ = testFleet(t, client, simnode.Node{Name: "n2"})
	for i := 0; i < 2; i++ {
		if _, err := f.writeLease(ctx, f.nodes[0]); err != nil {
			t.Fatal(err)
		}
	}
	if got := verbs(client, "leases"); got != "create,get,update,update" {
		t.Errorf("an existing lease: %s", got)
	}
}

func TestRegistrationCreatesOrRefreshesTheNode(t *testing.T) {
	nodes, err := mustProfile(t, exampleProfile).nodes(0, netip.MustParsePrefix("100.64.0.0/11"), "v1.33.4")
	if err != nil {
		t.Fatal(err)
	}
	// The first node exists already, with a label of its own and a stale status.
	existing := nodes[0].Object(time.Now().Add(-time.Hour))
	existing.Labels = map[string]string{"kept": "yes"}
	existing.Status.Conditions[3].Status = v1.ConditionUnknown
	client := fake.NewSimpleClientset(existing)
	f, out := testFleet(t, client, nodes[:2]...)

	for _, n := range f.nodes {
		f.register(n)
	}
	created, err := client.CoreV1().Nodes().Get(context.Background(), nodes[1].Name, metav1.GetOptions{})
	if err != nil || created.Labels["supercluster.io/pool"] != "h100a" || len(created.Spec.Taints) != 1 {
		t.Errorf("created %+v, %v", created, err)
	}
	refreshed, err := client.CoreV1().Nodes().Get(context.Background(), nodes[0].Name, metav1.GetOptions{})
	if err != nil || refreshed.Labels["kept"] != "yes" || refreshed.Status.Conditions[3].Status != v1.ConditionTrue {
		t.Errorf("refreshed %+v, %v", refreshed, err)
	}
	var event registeredEvent
	if err := json.Unmarshal(out.Bytes(), &event); err != nil || event.Nodes != 2 || event.Existed != 1 || event.P99 == nil {
		t.Errorf("registered event %q: %v", out.String(), err)
	}
	// Each node's lease is due at once; its status loop starts within the update period.
	for range f.nodes {
		select {
		case j := <-f.scheduled:
			if j.kind != leaseJob {
				t.Errorf("job %v", j.kind)
			}
		default:
			t.Error("no lease job queued")
		}
	}
}

func TestAnUnauthorizedCallEndsTheRun(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("no")
	})
	f, _ := testFleet(t, client, simnode.Node{Name: "n1"})
	f.register(f.nodes[0])
	var fatal *fatalError
	if !errors.As(context.Cause(f.ctx), &fatal) || !strings.Contains(fatal.Error(), "registering node n1") {
		t.Errorf("cause %v", context.Cause(f.ctx))
	}
	if f.st.registerErrors.Load() != 1 {
		t.Error("not counted")
	}

	for err, want := range map[error]bool{
		apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n", errors.New("no")): true,
		apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n", nil):                         true,
		apierrors.NewTooManyRequests("slow down", 1):                                           false,
		apierrors.NewServiceUnavailable("later"):                                               false,
		apierrors.NewTimeoutError("slow", 1):                                                   false,
		apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, "n", errors.New("x")):  false,
		context.DeadlineExceeded:                                                               false,
	} {
		if isFatal(err) != want {
			t.Errorf("isFatal(%v) = %v", err, !want)
		}
	}
}

func TestATransientErrorIsRetriedWithBackoff(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("slow down", 1)
	})
	f, _ := testFleet(t, client, simnode.Node{Name: "n1"})
	n := f.nodes[0]
	f.renew(n)
	f.renew(n)
	if f.ctx.Err() != nil || f.st.leaseErrors.Load() != 2 || n.leaseBackoff != 400*time.Millisecond {
		t.Errorf("errors %d, backoff %s, %v", f.st.leaseErrors.Load(), n.leaseBackoff, f.ctx.Err())
	}
}

func TestPodAddressesAreHandedOutInTurn(t *testing.T) {
	p := newAddressPool(netip.MustParsePrefix("10.0.0.0/30")) // two usable addresses
	a, b := p.get("a", "node"), p.get("b", "node")
	if a != "10.0.0.1" || b != "10.0.0.2" || p.get("a", "node") != a {
		t.Errorf("%s %s", a, b)
	}
	if c := p.get("c", "node"); c != "node" {
		t.Errorf("pool used up: %s", c)
	}
	p.release("a")
	if c := p.get("c", "node"); c != "10.0.0.1" {
		t.Errorf("a freed address: %s", c)
	}
	if addr, ok := addressAt(netip.MustParsePrefix("10.0.0.0/30"), 3); ok {
		t.Errorf("the broadcast address %s", addr)
	}
}

type recordingTransport struct{ got *http.Request }

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.got = req
	return &http.Response{StatusCode: http.StatusTooManyRequests, Body: http.NoBody}, nil
}

func TestRequestsForANodeImpersonateIt(t *testing.T) {
	inner := &recordingTransport{}
	st := &stats{}
	rt := &impersonatingTransport{next: &countingTransport{next: inner, st: st}}
	req, _ := http.NewRequestWithContext(forNode(context.Background(), "n1"), "GET", "https://x/api", nil)
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if inner.got.Header.Get("Impersonate-User") != "system:node:n1" || inner.got.Header.Get("Impersonate-Group") != "system:nodes" {
		t.Errorf("headers %v", inner.got.Header)
	}
	if req.Header.Get("Impersonate-User") != "" {
		t.Error("the caller's request was modified")
	}
	plain, _ := http.NewRequest("GET", "https://x/api", nil)
	if _, err := rt.RoundTrip(plain); err != nil {
		t.Fatal(err)
	}
	if inner.got.Header.Get("Impersonate-User") != "" {
		t.Error("a request for no node impersonates")
	}
	if st.requests.Load() != 2 || st.throttled.Load() != 2 {
		t.Errorf("counted %d requests, %d throttled", st.requests.Load(), st.throttled.Load())
	}
}

func TestNodesReportTheKubernetesReleaseTheyAreBuiltWith(t *testing.T) {
	if v := kubeletVersion(); !strings.HasPrefix(v, "v1.") || strings.Contains(v, "master") {
		t.Errorf("kubeletVersion %q", v)
	}
}

// With --kubelet-watches a node lists and watches what kubelet does, with kubelet's field
// selectors, and one Secret or ConfigMap at a time for as long as a pod of it references it.
func TestEachNodeWatchesWhatItsKubeletWatches(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: v1.PodSpec{
			NodeName: "n1",
			Volumes:  []v1.Volume{{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s1"}}}},
			Containers: []v1.Container{{Name: "c", EnvFrom: []v1.EnvFromSource{
				{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "c1"}}}}}},
		},
	}
	client := fake.NewSimpleClientset(pod)
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	o := mustFlags(t, "--kubeconfig=k", "--profile=p", "--kubelet-watches")
	st := &stats{registrationStarted: time.Now()}
	f := newFleet(ctx, cancel, o, []simnode.Node{{Name: "n1"}}, clients{nodes: []kubernetes.Interface{client}}, st,
		&emitter{out: &bytes.Buffer{}}, t.Logf)
	pods, err := newPodRunner(f, client, false)
	if err != nil {
		t.Fatal(err)
	}
	f.pods = pods
	f.nodes[0].watches.start(ctx)

	watched := func() map[string]string {
		got := map[string]string{}
		for _, a := range client.Actions() {
			if w, ok := a.(k8stesting.WatchAction); ok {
				key := a.GetResource().Resource
				if a.GetNamespace() != "" && (key == "secrets" || key == "configmaps") {
					key += " " + a.GetNamespace()
				}
				got[key] = w.GetWatchRestrictions().Fields.String()
			}
		}
		return got
	}
	want := map[string]string{
		"nodes":          "metadata.name=n1",
		"pods":           "spec.nodeName=n1",
		"services":       "spec.clusterIP!=None",
		"runtimeclasses": "",
		"csidrivers":     "",
		"secrets ns":     "metadata.name=s1",
		"configmaps ns":  "metadata.name=c1",
	}
	eventually(t, "a kubelet's watches", func() bool { return reflect.DeepEqual(watched(), want) && st.watches.Load() == 7 },
		func() string { return fmt.Sprintf("%v, %d running", watched(), st.watches.Load()) })
	if _, err := pods.lister.Pods("ns").Get("p"); err != nil {
		t.Errorf("the pod runner does not have the node's pod: %v", err)
	}

	// The pod goes: nothing references s1 and c1 any more, so their watches stop.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod's references unwatched", func() bool { return st.watches.Load() == 5 },
		func() string { return fmt.Sprintf("%d running", st.watches.Load()) })
}

func eventually(t *testing.T, what string, ok func() bool, state func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s: %s", what, state())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
