// Command nodesim stands in for kubelet in the cluster-in-a-box harness (tests/e2e), where a
// real kubelet cannot run: the rendered config asks for the systemd cgroup driver (there is no
// systemd), pods need Azure CNI, and GPU pools need GPUs.
//
// It takes the rendered kubelet unit's flags unchanged and joins through the same files and
// the same identity a kubelet would: kubelet's own TLS bootstrap code turns the bootstrap token
// into the node's client certificate, the Node is registered as system:node:<name> (so the
// NodeRestriction admission plugin judges it), the node lease and status are renewed at
// kubelet's cadence, and the pods bound to the node are reported running. No container runs.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/apimachinery/lease"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/utils/clock"
)

// How long the TLS bootstrap may wait for the controller-manager to approve and sign the
// node's certificate request: kubelet waits up to an hour, the harness gives up much sooner.
const bootstrapTimeout = 3 * time.Minute

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodesim: %s\n", oneLine(err))
		os.Exit(2)
	}
	logger := log.New(os.Stderr, "nodesim "+o.nodeName+": ", 0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	err = run(ctx, o, logger.Printf)
	if ctx.Err() != nil { // a signal: stop, as kubelet does, leaving the Node registered
		logger.Print("stopped")
		return
	}
	if err != nil {
		logger.Print(oneLine(err))
		stop()
		os.Exit(1)
	}
}

// run joins the node, then keeps it alive until ctx ends. Each step logs one line.
func run(ctx context.Context, o options, logf func(string, ...any)) error {
	config, err := loadConfig(o.config, o.configDir)
	if err != nil {
		return fmt.Errorf("kubelet config: %w", err)
	}
	logf("config loaded: maxPods=%d, %d taints to register with, clusterDNS=%s, lease %ds",
		config.MaxPods, len(config.RegisterWithTaints), strings.Join(config.ClusterDNS, ","), config.NodeLeaseDurationSeconds)

	// kubelet bootstraps only when given a bootstrap kubeconfig; otherwise --kubeconfig must work.
	if o.bootstrapKubeconfig != "" {
		bootstrapCtx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
		err := bootstrap.LoadClientCert(bootstrapCtx, o.kubeconfig, o.bootstrapKubeconfig, o.certDir, types.NodeName(o.nodeName))
		cancel()
		if err != nil {
			return fmt.Errorf("TLS bootstrap with %s (within %s): %w", o.bootstrapKubeconfig, bootstrapTimeout, err)
		}
		logf("bootstrapped: client certificate in %s, kubeconfig %s", o.certDir, o.kubeconfig)
	}

	client, heartbeat, err := clients(o.kubeconfig, config)
	if err != nil {
		return err
	}
	n := newNode(o, config)
	created, err := register(ctx, client, n)
	if err != nil {
		return fmt.Errorf("registering Node %s as system:node:%s: %w", n.Name, n.Name, err)
	}
	if created {
		logf("registered: %s", describe(n))
	} else {
		logf("registered already: status refreshed, labels and taints left as they are")
	}

	var pods *podRunner
	if o.runPods {
		if pods, err = newPodRunner(client, n.Name, n.IP, o.podIPs, logf); err != nil {
			return err
		}
	}

	// kubelet renews its lease every quarter of the lease's duration (nodeLeaseRenewIntervalFraction),
	// with the lease owned by the Node so that deleting the Node deletes the lease.
	leaseDuration := time.Duration(config.NodeLeaseDurationSeconds) * time.Second
	leases := lease.NewController(clock.RealClock{}, heartbeat, n.Name, config.NodeLeaseDurationSeconds, nil,
		leaseDuration/4, n.Name, v1.NamespaceNodeLease, kubeletutil.SetNodeOwnerFunc(heartbeat, n.Name))

	var loops sync.WaitGroup
	start := func(loop func(context.Context)) {
		loops.Add(1)
		go func() {
			defer loops.Done()
			loop(ctx)
		}()
	}
	start(leases.Run)
	start(func(ctx context.Context) { reportStatus(ctx, heartbeat, n, config, logf) })
	logf("heartbeating: lease %s/%s every %s, status checked every %s and reported every %s or on change",
		v1.NamespaceNodeLease, n.Name, leaseDuration/4, config.NodeStatusUpdateFrequency.Duration, config.NodeStatusReportFrequency.Duration)
	if pods != nil {
		start(pods.run)
		logf("running pods: %s", describePool(o.podIPs, n.IP))
	}
	loops.Wait()
	return nil
}

// clients builds the node's API clients from the kubeconfig the bootstrap wrote, tuned as
// kubelet tunes its own: the config's QPS and burst for the main client, and a
// separate heartbeat client, never rate limited and with a short timeout, so that pod status
// traffic cannot delay the lease.
func clients(kubeconfig string, config *kubeletv1beta1.KubeletConfiguration) (client, heartbeat kubernetes.Interface, err error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("the node's kubeconfig: %w", err)
	}
	restConfig = rest.AddUserAgent(restConfig, "nodesim")
	restConfig.QPS = float32(*config.KubeAPIQPS)
	restConfig.Burst = int(config.KubeAPIBurst)
	if client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, nil, err
	}

	heartbeatConfig := rest.CopyConfig(restConfig)
	heartbeatConfig.QPS = -1
	heartbeatConfig.Timeout = min(config.NodeStatusUpdateFrequency.Duration, time.Duration(config.NodeLeaseDurationSeconds)*time.Second)
	if heartbeat, err = kubernetes.NewForConfig(heartbeatConfig); err != nil {
		return nil, nil, err
	}
	return client, heartbeat, nil
}

// oneLine keeps an error to the one line the harness's log shows per step.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
