package simnode

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestKubeletsOwnLabelsMayBeOverridden(t *testing.T) {
	labels := KubeletLabels("n1", map[string]string{"a": "1", "kubernetes.io/arch": "arm64"})
	want := map[string]string{"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
		"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "a": "1"}
	if len(labels) != len(want) {
		t.Errorf("%v", labels)
	}
	for key, value := range want {
		if labels[key] != value {
			t.Errorf("%s=%q, want %q", key, labels[key], value)
		}
	}
}

func TestLabelProblemsAreSortedAndNamed(t *testing.T) {
	if problems := LabelProblems(map[string]string{"supercluster.io/pool": "gpu", "node.kubernetes.io/instance-type": "x"}); problems != nil {
		t.Errorf("%v", problems)
	}
	problems := LabelProblems(map[string]string{"kubernetes.io/role": "gpu", "b": "has space"})
	if len(problems) != 2 || !strings.HasPrefix(problems[0], "b=has space") || !strings.HasPrefix(problems[1], "kubernetes.io/role") {
		t.Errorf("%q", problems)
	}
}

func TestResourcesAreParsedAndPrinted(t *testing.T) {
	list, err := ParseResources(map[string]string{"cpu": "2500m", "nvidia.com/gpu": "8"})
	if err != nil || ResourceString(list) != "cpu=2500m,nvidia.com/gpu=8" {
		t.Errorf("%v %v", list, err)
	}
	for _, bad := range []map[string]string{{"cpu": "lots"}, {"memory": "-1Gi"}} {
		if _, err := ParseResources(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestARegisteredNodeIsReady(t *testing.T) {
	n := Node{Name: "n1", IP: "10.0.0.1", Capacity: v1.ResourceList{}, KubeletPort: KubeletPort, Version: "v1.33.4"}
	object := n.Object(time.Now())
	if object.Annotations[ControllerManagedAttach] != "true" || len(object.Status.Conditions) != 4 ||
		object.Status.Conditions[3].Type != v1.NodeReady || object.Status.Conditions[3].Status != v1.ConditionTrue {
		t.Errorf("%+v", object)
	}
}
