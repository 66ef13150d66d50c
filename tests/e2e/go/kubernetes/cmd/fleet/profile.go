package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/component-base/version"
	sigsjson "sigs.k8s.io/json"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// profile is the --profile file: the pools whose nodes this process simulates.
type profile struct {
	Pools []pool `json:"pools"`
}

type pool struct {
	Name       string            `json:"name"`
	Count      int               `json:"count"`
	NamePrefix string            `json:"namePrefix"`
	Labels     map[string]string `json:"labels"`
	Taints     []taint           `json:"taints"`
	Capacity   map[string]amount `json:"capacity"` // resource: quantity, e.g. "memory": "1900Gi"
}

// amount is a quantity, written as a string ("1900Gi", "8") or as a plain JSON number (8).
type amount string

func (a *amount) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		var s string
		err := json.Unmarshal(data, &s)
		*a = amount(s)
		return err
	}
	var number json.Number
	if err := json.Unmarshal(data, &number); err != nil {
		return fmt.Errorf("a quantity is a string or a number, not %s", data)
	}
	*a = amount(number)
	return nil
}

// capacity is the pool's capacity as resource=quantity pairs.
func (pl pool) capacity() map[string]string {
	pairs := make(map[string]string, len(pl.Capacity))
	for name, value := range pl.Capacity {
		pairs[name] = string(value)
	}
	return pairs
}

type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

const (
	// kubelet's default maxPods: the pods capacity of a pool whose capacity does not say.
	defaultMaxPods = 110
	// Node indexes are printed with at least this many digits.
	indexDigits = 6
	// Each pool's nodes take a block of --node-cidr this large (pool p's node i is (p<<16)+i+1).
	poolAddressBits = 16
)

// readProfile reads and checks a profile file.
func readProfile(path string) (profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return profile{}, err
	}
	p, err := parseProfile(data)
	if err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// parseProfile decodes a profile strictly (an unknown, duplicated or miscased field is an
// error: a misspelt "taint" must not silently give untainted nodes) and checks each pool.
func parseProfile(data []byte) (profile, error) {
	var p profile
	strict, err := sigsjson.UnmarshalStrict(data, &p, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return p, err
	}
	if len(strict) > 0 {
		return p, errors.Join(strict...)
	}
	if len(p.Pools) == 0 {
		return p, errors.New("no pools")
	}
	seen := map[string]bool{}
	var problems []string
	for i, pl := range p.Pools {
		what := fmt.Sprintf("pools[%d]", i)
		if pl.Name != "" {
			what = fmt.Sprintf("pool %q", pl.Name)
		}
		for _, problem := range pl.problems() {
			problems = append(problems, what+": "+problem)
		}
		if pl.Name != "" && seen[pl.Name] {
			problems = append(problems, what+": a second pool of that name")
		}
		seen[pl.Name] = true
	}
	if len(problems) > 0 {
		return p, errors.New(strings.Join(problems, "; "))
	}
	return p, nil
}

// problems are what is wrong with a pool on its own; the names of its nodes are checked once
// the offset is known (nodes).
func (pl pool) problems() []string {
	var problems []string
	if pl.Name == "" {
		problems = append(problems, "no name")
	}
	if pl.Count < 1 {
		problems = append(problems, fmt.Sprintf("count %d: at least 1", pl.Count))
	}
	problems = append(problems, simnode.LabelProblems(pl.Labels)...)
	seen := map[string]bool{}
	for _, t := range pl.Taints {
		switch v1.TaintEffect(t.Effect) {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			problems = append(problems, fmt.Sprintf("taint %s: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect))
		}
		for _, msg := range validation.IsQualifiedName(t.Key) {
			problems = append(problems, fmt.Sprintf("taint %q: %s", t.Key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			problems = append(problems, fmt.Sprintf("taint %s=%q: %s", t.Key, t.Value, msg))
		}
		if seen[t.Key+":"+t.Effect] {
			problems = append(problems, fmt.Sprintf("taint %s:%s twice", t.Key, t.Effect))
		}
		seen[t.Key+":"+t.Effect] = true
	}
	for name := range pl.Capacity {
		for _, msg := range validation.IsQualifiedName(name) {
			problems = append(problems, fmt.Sprintf("capacity %s: %s", name, msg))
		}
	}
	if _, err := simnode.ParseResources(pl.capacity()); err != nil {
		problems = append(problems, "capacity "+err.Error())
	}
	return problems
}

// nodeName is the name of a pool's node at index.
func nodeName(prefix string, index int) string {
	return fmt.Sprintf("%s%0*d", prefix, indexDigits, index)
}

// nodes are the nodes of every pool, pool by pool: count of each, from index offset. Pool p's
// node at index i has address (p<<16)+i+1 of nodeCIDR, so processes that share a profile and
// split it by offset give every node its own address.
func (p profile) nodes(offset int, nodeCIDR netip.Prefix, kubeletVersion string) ([]simnode.Node, error) {
	var nodes []simnode.Node
	names := map[string]string{}
	for position, pl := range p.Pools {
		taints := make([]v1.Taint, len(pl.Taints))
		for i, t := range pl.Taints {
			taints[i] = v1.Taint{Key: t.Key, Value: t.Value, Effect: v1.TaintEffect(t.Effect)}
		}
		capacity, err := simnode.ParseResources(pl.capacity())
		if err != nil {
			return nil, fmt.Errorf("pool %q: capacity %w", pl.Name, err)
		}
		if _, ok := capacity[v1.ResourcePods]; !ok {
			capacity[v1.ResourcePods] = *resource.NewQuantity(defaultMaxPods, resource.DecimalSI)
		}
		last := offset + pl.Count - 1
		if last+1 >= 1<<poolAddressBits {
			return nil, fmt.Errorf("pool %q: node index %d: at most %d per pool (each pool has %d addresses)",
				pl.Name, last, 1<<poolAddressBits-2, 1<<poolAddressBits)
		}
		if _, ok := addressAt(nodeCIDR, uint64(position)<<poolAddressBits+uint64(last)+1); !ok {
			return nil, fmt.Errorf("pool %q: --node-cidr %s is too small for %d pools", pl.Name, nodeCIDR, len(p.Pools))
		}
		for _, index := range []int{offset, last} {
			if msgs := nameProblems(nodeName(pl.NamePrefix, index)); len(msgs) > 0 {
				return nil, fmt.Errorf("pool %q: node name %q: %s", pl.Name, nodeName(pl.NamePrefix, index), strings.Join(msgs, "; "))
			}
		}
		for i := 0; i < pl.Count; i++ {
			name := nodeName(pl.NamePrefix, offset+i)
			if other, ok := names[name]; ok {
				return nil, fmt.Errorf("pools %q and %q both name a node %s", other, pl.Name, name)
			}
			names[name] = pl.Name
			ip, _ := addressAt(nodeCIDR, uint64(position)<<poolAddressBits+uint64(offset+i)+1)
			nodes = append(nodes, simnode.Node{
				Name:        name,
				IP:          ip.String(),
				Labels:      simnode.KubeletLabels(name, pl.Labels),
				Taints:      taints, // shared: never modified
				Capacity:    capacity,
				KubeletPort: simnode.KubeletPort,
				Version:     kubeletVersion,
			})
		}
	}
	return nodes, nil
}

// nameProblems: a node name is a DNS subdomain, and the value of its kubernetes.io/hostname
// label.
func nameProblems(name string) []string {
	return append(validation.IsDNS1123Subdomain(name), validation.IsValidLabelValue(name)...)
}

// addressAt is the n-th address of prefix, if it is neither the network's nor its broadcast
// address.
func addressAt(prefix netip.Prefix, n uint64) (netip.Addr, bool) {
	size := uint64(1) << (32 - prefix.Bits())
	if n == 0 || n >= size-1 {
		return netip.Addr{}, false
	}
	base := prefix.Masked().Addr().As4()
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], binary.BigEndian.Uint32(base[:])+uint32(n))
	return netip.AddrFrom4(out), true
}

// kubeletVersion is the version the nodes report: the one stamped into the binary
// (scripts/build-binaries.sh stamps it), or else the Kubernetes release of the staging modules
// this module builds with (component-base v0.33.4 is Kubernetes v1.33.4), rather than the
// unstamped "v0.0.0-master".
func kubeletVersion() string {
	stamped := version.Get().GitVersion
	if !strings.HasPrefix(stamped, "v0.0.0") {
		return stamped
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path != "k8s.io/component-base" {
				continue
			}
			if dep.Replace != nil {
				dep = dep.Replace
			}
			if release, ok := strings.CutPrefix(dep.Version, "v0."); ok {
				return "v1." + release
			}
		}
	}
	return stamped
}
