// Command gen-embed writes the two files that the provider main go:embeds,
// doing what upstream's provider/cmd/pulumi-resource-kubernetes/generate.go
// does: schema.json with its "version" set, and terraform-mapping.json
// compacted. Inputs come from the provider module in the module cache.
//
//	go run ./cmd/gen-embed -provider DIR -version 4.25.0 -out ./cmd/pulumi-resource-kubernetes
package main

import (
	"encoding/json"
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

func main() {
	providerDir := flag.String("provider", "", "directory of github.com/pulumi/pulumi-kubernetes/provider/v4 (module root)")
	version := flag.String("version", "", "provider version to stamp into the schema (e.g. 4.25.0)")
	out := flag.String("out", ".", "output directory")
	flag.Parse()
	if *providerDir == "" || *version == "" {
		log.Fatal("gen-embed: -provider and -version are required")
	}
	src := filepath.Join(*providerDir, "cmd", "pulumi-resource-kubernetes")

	raw, err := os.ReadFile(filepath.Join(src, "schema.json"))
	if err != nil {
		log.Fatal(err)
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		log.Fatalf("cannot deserialize schema: %v", err)
	}
	spec.Version = *version
	versioned, err := json.Marshal(spec)
	if err != nil {
		log.Fatalf("cannot reserialize schema: %v", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "schema-embed.json"), versioned, 0o644); err != nil {
		log.Fatal(err)
	}

	raw, err = os.ReadFile(filepath.Join(src, "terraform-mapping.json"))
	if err != nil {
		log.Fatal(err)
	}
	var mapping any
	if err := json.Unmarshal(raw, &mapping); err != nil {
		log.Fatalf("cannot deserialize terraform mapping: %v", err)
	}
	compact, err := json.Marshal(mapping)
	if err != nil {
		log.Fatalf("cannot reserialize terraform mapping: %v", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "terraform-mapping-embed.json"), compact, 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("gen-embed: wrote schema-embed.json (version %s) and terraform-mapping-embed.json to %s", *version, *out)
}
