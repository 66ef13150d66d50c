package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// clients are the process's API clients, all with the admin credentials of --kubeconfig and one
// shared client-side rate limiter (--client-qps, --client-burst).
type clients struct {
	// nodes[i] has a TCP connection of its own: the load balancer in front of the apiservers
	// spreads connections, not requests, so one connection would put every node on one apiserver.
	nodes []kubernetes.Interface
	// watch serves the informers (pods, nodes) and the pod updates, on a connection of its own.
	watch kubernetes.Interface
	// admin is watch's connection without impersonation, for what no node would do (deleting
	// Nodes on exit).
	admin kubernetes.Interface
}

// As kubelet (its default kubeAPIContentType): protobuf, the apiserver's cheapest encoding.
const protobuf = "application/vnd.kubernetes.protobuf"

func newClients(o options, st *stats) (clients, error) {
	base, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return clients{}, err
	}
	base = rest.AddUserAgent(base, "fleet")
	base.ContentType = protobuf
	base.AcceptContentTypes = protobuf + ",application/json"
	base.WarningHandler = rest.NoWarnings{}
	base.Timeout = 0 // each call has its own deadline; watches have none
	if o.clientQPS > 0 {
		base.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(float32(o.clientQPS), o.clientBurst)
	} else {
		base.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	}
	base.Wrap(func(next http.RoundTripper) http.RoundTripper { return &countingTransport{next: next, st: st} })
	admin := rest.CopyConfig(base)
	if o.asNodes {
		base.Wrap(func(next http.RoundTripper) http.RoundTripper { return &impersonatingTransport{next: next} })
	}

	// client-go shares one transport (so one HTTP/2 connection) between configs with equal TLS
	// settings; a dialer of its own gives a config a transport, and a connection, of its own.
	connection := func(config *rest.Config) (kubernetes.Interface, error) {
		config = rest.CopyConfig(config)
		config.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		return kubernetes.NewForConfig(config)
	}
	var c clients
	for i := 0; i < o.connections; i++ {
		client, err := connection(base)
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, client)
	}
	if c.watch, err = connection(base); err != nil {
		return c, err
	}
	c.admin, err = connection(admin)
	return c, err
}

// countingTransport counts every answer the apiservers give, including the 429s client-go
// retries by itself when they carry a Retry-After (as API Priority and Fairness's do).
type countingTransport struct {
	next http.RoundTripper
	st   *stats
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	t.st.requests.Add(1)
	if err == nil {
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			t.st.throttled.Add(1)
		case resp.StatusCode >= 500:
			t.st.serverErrors.Add(1)
		}
	}
	return resp, err
}

// asNode is the context key of the node a request is made for.
type asNode struct{}

// forNode marks ctx's requests as made by node name (impersonated with --as-nodes).
func forNode(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, asNode{}, name)
}

// impersonatingTransport makes a request marked by forNode as that node's kubelet would: as
// user system:node:<name> in group system:nodes (the apiserver adds system:authenticated).
// The admin credentials allow impersonation; the apiserver then authorizes the request with the
// Node authorizer, admits it through NodeRestriction, and classifies it for API Priority and
// Fairness, as the node's own.
type impersonatingTransport struct {
	next http.RoundTripper
}

func (t *impersonatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if name, ok := req.Context().Value(asNode{}).(string); ok {
		req = req.Clone(req.Context())
		req.Header.Set("Impersonate-User", "system:node:"+name)
		req.Header.Set("Impersonate-Group", "system:nodes")
	}
	return t.next.RoundTrip(req)
}
