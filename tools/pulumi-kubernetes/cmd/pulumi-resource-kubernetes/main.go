// Command pulumi-resource-kubernetes is the Pulumi Kubernetes resource provider,
// built from github.com/pulumi/pulumi-kubernetes/provider/v4.
//
// It mirrors upstream's provider/cmd/pulumi-resource-kubernetes/main.go: that
// main go:embeds schema-embed.json and terraform-mapping-embed.json, which
// upstream's `go generate` writes and which are not in the module zip, so
// tools/build.sh writes them next to this file (cmd/gen-embed) from the
// schema.json and terraform-mapping.json that the module does ship. The
// version comes from -X .../provider/v4/pkg/version.Version, like upstream.
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

var providerName = "kubernetes"

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve(providerName, version.Version, pulumiSchema, terraformMapping)
}
