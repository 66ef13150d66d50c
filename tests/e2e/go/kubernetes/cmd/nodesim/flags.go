package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	cliflag "k8s.io/component-base/cli/flag"
	nodeutil "k8s.io/component-helpers/node/util"
	"sigs.k8s.io/yaml"

	"supercluster.dev/e2e/kubernetes/internal/simnode"
)

// options are nodesim's command line: the kubelet flags the rendered unit passes, then the
// harness's own --sim-* flags.
type options struct {
	bootstrapKubeconfig string
	certDir             string
	config              string
	configDir           string
	kubeconfig          string
	nodeLabels          map[string]string
	nodeName            string // --hostname-override, or this machine's hostname, as kubelet
	nodeIP              string
	// --image-credential-provider-config and --image-credential-provider-bin-dir: checked as kubelet
	// checks them at startup (each configured provider's executable must be in the directory).
	credentialProviderConfig string
	credentialProviderBinDir string

	capacity v1.ResourceList // --sim-capacity: what the simulated machine has
	runPods  bool            // --sim-run-pods: mark the pods bound to the node running
	podIPs   []string        // --sim-pod-ips: addresses handed to pods that are not hostNetwork
}

// parseFlags reads args (without the program name). Only the flags the rendered kubelet unit
// passes are known, so a flag that rendering starts to pass fails here, loudly, instead of
// being silently dropped by a stand-in that would then not test it.
func parseFlags(args []string) (options, error) {
	o := options{nodeLabels: map[string]string{}}
	var hostnameOverride, capacity, podIPs string

	fs := flag.NewFlagSet("nodesim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, as one line, by the caller
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig holding the bootstrap token, used to request the node's client certificate")
	fs.StringVar(&o.certDir, "cert-dir", "/var/lib/kubelet/pki", "where the client certificate and key are written (kubelet's default)")
	fs.StringVar(&o.config, "config", "", "KubeletConfiguration file")
	fs.StringVar(&o.configDir, "config-dir", "", "KubeletConfiguration drop-ins (*.conf), merged over --config in lexical order")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the node's own kubeconfig, written by the TLS bootstrap")
	// The same parser as kubelet's --node-labels: k=v pairs split on ",", a bare key has value "".
	nodeLabels := cliflag.ConfigurationMap(o.nodeLabels)
	fs.Var(&nodeLabels, "node-labels", "labels to register the node with (k=v,...)")
	fs.StringVar(&hostnameOverride, "hostname-override", "", "the node's name")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the node's InternalIP")
	fs.StringVar(&o.credentialProviderConfig, "image-credential-provider-config", "", "CredentialProviderConfig file")
	fs.StringVar(&o.credentialProviderBinDir, "image-credential-provider-bin-dir", "", "where the credential provider executables are")
	fs.StringVar(&capacity, "sim-capacity", "", "the node's capacity, resource=quantity,... (e.g. cpu=96,memory=1900Gi,nvidia.com/gpu=8)")
	fs.BoolVar(&o.runPods, "sim-run-pods", true, "mark the pods bound to the node running, as a kubelet that started them would")
	fs.StringVar(&podIPs, "sim-pod-ips", "", "pod addresses (a,b,...) for pods that are not hostNetwork; empty: the node IP")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, usageError(fs)
		}
		// The standard library's message names the flag with one dash, whatever was typed.
		return o, fmt.Errorf("%s (nodesim accepts only the flags the rendered kubelet unit passes, plus --sim-*)",
			strings.Replace(err.Error(), "provided but not defined: -", "not known to nodesim: --", 1))
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: kubelet takes flags only", fs.Arg(0))
	}
	if o.kubeconfig == "" {
		return o, errors.New("--kubeconfig is required: the node's API client is built from it")
	}

	var err error
	if err = validateNodeLabels(o.nodeLabels); err != nil {
		return o, err
	}
	if o.nodeName, err = nodeutil.GetHostname(hostnameOverride); err != nil {
		return o, err
	}
	if o.nodeIP, err = parseNodeIP(o.nodeIP); err != nil {
		return o, err
	}
	if err = checkCredentialProviders(o.credentialProviderConfig, o.credentialProviderBinDir); err != nil {
		return o, err
	}
	if o.capacity, err = parseCapacity(capacity); err != nil {
		return o, err
	}
	if o.podIPs, err = parseIPList(podIPs); err != nil {
		return o, fmt.Errorf("--sim-pod-ips: %w", err)
	}
	return o, nil
}

func usageError(fs *flag.FlagSet) error {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	return fmt.Errorf("usage: nodesim %s", strings.Join(names, " "))
}

// validateNodeLabels refuses what kubelet refuses at startup (simnode.LabelProblems).
func validateNodeLabels(labels map[string]string) error {
	if problems := simnode.LabelProblems(labels); len(problems) > 0 {
		return fmt.Errorf("--node-labels: %s", strings.Join(problems, "; "))
	}
	return nil
}

// parseNodeIP checks --node-ip, or when it is empty picks the address kubelet falls back to:
// the one on the interface that holds the default route.
func parseNodeIP(value string) (string, error) {
	if value == "" {
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			return "", fmt.Errorf("no --node-ip and no default route to take it from: %w", err)
		}
		return ip.String(), nil
	}
	ip := net.ParseIP(value)
	if ip == nil {
		return "", fmt.Errorf("--node-ip: %q is not one IP address", value)
	}
	return ip.String(), nil
}

// parseCapacity reads --sim-capacity (resource=quantity,...) with kubelet's own k=v parser.
func parseCapacity(value string) (v1.ResourceList, error) {
	pairs := cliflag.ConfigurationMap{}
	if err := pairs.Set(value); err != nil {
		return nil, err
	}
	capacity, err := simnode.ParseResources(pairs)
	if err != nil {
		return nil, fmt.Errorf("--sim-capacity: %w", err)
	}
	return capacity, nil
}

// parseIPList reads a comma-separated list of IP addresses; empty gives none.
func parseIPList(value string) ([]string, error) {
	var ips []string
	for _, item := range strings.Split(value, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		ip := net.ParseIP(item)
		if ip == nil {
			return nil, fmt.Errorf("%q is not an IP address", item)
		}
		ips = append(ips, ip.String())
	}
	return ips, nil
}

// checkCredentialProviders refuses what kubelet refuses when it loads its image credential providers:
// one flag without the other, a config that is not a CredentialProviderConfig, and a provider whose
// executable (named after it) is not in the bin directory.
func checkCredentialProviders(configPath, binDir string) error {
	if configPath == "" && binDir == "" {
		return nil
	}
	if configPath == "" || binDir == "" {
		return errors.New("--image-credential-provider-config and --image-credential-provider-bin-dir go together")
	}
	data, err := os.ReadFile(configPath)
	if err != nil {
		return fmt.Errorf("--image-credential-provider-config: %w", err)
	}
	var config struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Providers  []struct {
			Name                 string   `json:"name"`
			APIVersion           string   `json:"apiVersion"`
			MatchImages          []string `json:"matchImages"`
			DefaultCacheDuration string   `json:"defaultCacheDuration"`
			Args                 []string `json:"args"`
			Env                  []struct {
				Name  string `json:"name"`
				Value string `json:"value"`
			} `json:"env"`
		} `json:"providers"`
	}
	if err := yaml.UnmarshalStrict(data, &config); err != nil {
		return fmt.Errorf("--image-credential-provider-config: %w", err)
	}
	if config.Kind != "CredentialProviderConfig" || config.APIVersion != "kubelet.config.k8s.io/v1" {
		return fmt.Errorf("--image-credential-provider-config: %s/%s is not a kubelet.config.k8s.io/v1 CredentialProviderConfig",
			config.APIVersion, config.Kind)
	}
	for _, provider := range config.Providers {
		if provider.APIVersion != "credentialprovider.kubelet.k8s.io/v1" || len(provider.MatchImages) == 0 {
			return fmt.Errorf("credential provider %q: apiVersion credentialprovider.kubelet.k8s.io/v1 and matchImages required", provider.Name)
		}
		info, err := os.Stat(filepath.Join(binDir, provider.Name))
		if err != nil || info.Mode()&0o111 == 0 {
			return fmt.Errorf("credential provider %q: no executable %s", provider.Name, filepath.Join(binDir, provider.Name))
		}
	}
	return nil
}
