package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigv1beta1 "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// loadConfig reads the KubeletConfiguration the way kubelet does: the --config file, then
// every *.conf drop-in under --config-dir in lexical order as a JSON merge patch over it, then
// kubelet's defaults, then kubelet's own validation. Unlike kubelet, which falls back to a
// lenient decode and only warns, an unknown or duplicated field is an error: the harness is
// where a misspelt rendered field must be caught. An empty path gives kubelet's defaults.
//
// A missing --config-dir is skipped; kubelet refuses to start without it, but on a real
// machine the providerID script (ExecStartPre) has created it before kubelet starts, and the
// harness does not run that script (it needs Azure's instance metadata).
func loadConfig(path, dropInDir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	merged := []byte("{}")
	if path != "" {
		base, err := readConfigFile(path)
		if err != nil {
			return nil, err
		}
		merged = base
	}
	if dropInDir != "" {
		if _, err := os.Stat(dropInDir); err == nil {
			if merged, err = mergeDropIns(merged, dropInDir); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}

	config := &kubeletv1beta1.KubeletConfiguration{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(merged, config); err != nil {
		return nil, fmt.Errorf("the merged kubelet config: %w", err)
	}
	kubeletconfigv1beta1.SetDefaults_KubeletConfiguration(config)

	internal := &kubeletconfig.KubeletConfiguration{}
	if err := kubeletconfigv1beta1.Convert_v1beta1_KubeletConfiguration_To_config_KubeletConfiguration(config, internal, nil); err != nil {
		return nil, err
	}
	if err := validation.ValidateKubeletConfiguration(internal, utilfeature.DefaultFeatureGate); err != nil {
		return nil, fmt.Errorf("kubelet would refuse its config: %w", err)
	}
	return config, nil
}

// readConfigFile decodes one KubeletConfiguration file strictly (unknown, duplicated or
// miscased fields are errors) and returns it as JSON, as written: no defaults, so that a
// drop-in patches only the fields it names.
func readConfigFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var config kubeletv1beta1.KubeletConfiguration
	strict, err := sigsjson.UnmarshalStrict(doc, &config, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.Join(strict...))
	}
	want := kubeletv1beta1.SchemeGroupVersion.WithKind("KubeletConfiguration")
	if got := config.GroupVersionKind(); got != want {
		return nil, fmt.Errorf("%s: apiVersion/kind %q, %q; want %q, %q", path, config.APIVersion, config.Kind,
			want.GroupVersion().String(), want.Kind)
	}
	return doc, nil
}

// mergeDropIns applies every *.conf file under dir, walked in lexical order as kubelet walks
// it, as a JSON merge patch over config.
func mergeDropIns(config []byte, dir string) ([]byte, error) {
	err := filepath.WalkDir(dir, func(file string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() || filepath.Ext(file) != ".conf" {
			return err
		}
		patch, err := readConfigFile(file)
		if err != nil {
			return err
		}
		if config, err = jsonpatch.MergePatch(config, patch); err != nil {
			return fmt.Errorf("%s: merging over the config: %w", file, err)
		}
		return nil
	})
	return config, err
}
