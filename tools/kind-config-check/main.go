// kind-config-check loads a kind cluster configuration with kind's own loader and validator and prints
// what kind would create, as JSON. It is built inside the kind module (tools/build.sh kind copies the
// module and adds this directory as pkg/cmd/trainyard-kind-config-check), because kind's loader lives in its internal
// packages: sigs.k8s.io/kind/pkg/internal/apis/config/encoding.Load (strict YAML, v1alpha4 conversion,
// defaults) and (*config.Cluster).Validate, the very functions `kind create cluster --config` calls.
//
//	kind-config-check FILE      exit 0 and a JSON summary, or exit 1 with kind's error
//	kind-config-check -default  print kind's default node image
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/internal/apis/config/encoding"
)

type node struct {
	Role   string            `json:"role"`
	Image  string            `json:"image"`
	Labels map[string]string `json:"labels,omitempty"`
}

type summary struct {
	Name             string `json:"name"`
	APIServerAddress string `json:"apiServerAddress"`
	APIServerPort    int32  `json:"apiServerPort"`
	IPFamily         string `json:"ipFamily"`
	PodSubnet        string `json:"podSubnet"`
	ServiceSubnet    string `json:"serviceSubnet"`
	Nodes            []node `json:"nodes"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kind-config-check FILE | -default")
		os.Exit(2)
	}
	if os.Args[1] == "-default" {
		fmt.Println(defaults.Image)
		return
	}
	cfg, err := encoding.Load(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kind could not load %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "kind refuses %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	out := summary{Name: cfg.Name, APIServerAddress: cfg.Networking.APIServerAddress,
		APIServerPort: cfg.Networking.APIServerPort, IPFamily: string(cfg.Networking.IPFamily),
		PodSubnet: cfg.Networking.PodSubnet, ServiceSubnet: cfg.Networking.ServiceSubnet}
	for _, n := range cfg.Nodes {
		out.Nodes = append(out.Nodes, node{Role: string(n.Role), Image: n.Image, Labels: n.Labels})
	}
	encoded, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(encoded))
}
