// Command coredns is CoreDNS v1.15.0 with only the plugins a Kubernetes cluster's DNS needs: the plugins of
// kubeadm's default Corefile (cmd/kubeadm/app/phases/addons/dns/manifests.go of k8s.io/kubernetes v1.36.3), log,
// and template, which answers what the cluster does not serve on an air-gapped site (docs/rehearsal.md "Cluster
// DNS"). Upstream's own main (coredns.go) imports core/plugin, whose generated zplugin.go links every plugin of
// plugin.cfg, cloud SDKs included (route53, azure, clouddns). An external build imports coremain and the wanted
// plugin packages and narrows dnsserver.Directives to them (core/dnsserver/directives.go SetDirectives, v1.15.0).
// Build: tools/build.sh coredns
package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/template"
)

// plugins are the directives linked in above, by their Corefile names (plugin.cfg: "prometheus:metrics").
var plugins = []string{
	"cache", "errors", "forward", "health", "kubernetes", "loadbalance", "log", "loop", "prometheus", "ready",
	"reload", "template",
}

// directives keeps upstream's execution order (zdirectives.go, generated from plugin.cfg) for the linked plugins:
// the order decides what each plugin sees, so it is taken from upstream rather than written again here.
func directives() ([]string, error) {
	kept := slices.DeleteFunc(slices.Clone(dnsserver.Directives), func(d string) bool { return !slices.Contains(plugins, d) })
	if len(kept) != len(plugins) {
		return nil, fmt.Errorf("coredns: plugins %v are not all in upstream's directives %v", plugins, dnsserver.Directives)
	}
	return kept, nil
}

func main() {
	kept, err := directives()
	if err == nil {
		err = dnsserver.SetDirectives(kept)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	coremain.Run()
}
