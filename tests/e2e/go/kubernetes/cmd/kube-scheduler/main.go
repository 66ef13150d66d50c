// Command kube-scheduler is the upstream scheduler with the scheduler-plugins Coscheduling
// plugin registered, the build the control plane runs (infra/catalog/versions.py
// SCHEDULER_PLUGINS_BY_KUBERNETES_MINOR): the rendered KubeSchedulerConfiguration names
// Coscheduling as a queue-sort plugin, which the stock scheduler refuses.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme" // CoschedulingArgs in the config scheme
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))))
}
