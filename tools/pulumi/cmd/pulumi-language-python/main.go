// Command pulumi-language-python is Trainyard's build of a Pulumi language host
// for Python programs.
//
// Upstream's host lives in its own module
// (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3), which
// our Go module proxy does not serve (see docs/tools.md). This host implements
// the same protocol on top of the pinned sdk/v3: the engine starts it with the
// engine address as the last argument, it prints its gRPC port, and for Run it
// starts `python -u pulumi-language-python-exec --monitor ... PROGRAM` (the
// exec script ships in sdk/v3 under python/cmd/ and must sit next to this
// binary) with the stack config in PULUMI_CONFIG, exactly as upstream does.
// Python and its virtualenv are resolved by sdk/v3's python/toolchain package
// from the project's runtime options (toolchain, virtualenv), like upstream.
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/logging"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"github.com/pulumi/pulumi/sdk/v3/python/toolchain"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	execSuffix = "-exec"
	// Exit code with which the exec script says it already showed the user an
	// actionable message (upstream's PYTHON_PROCESS_EXITED_AFTER_SHOWING_USER_ACTIONABLE_MESSAGE_CODE).
	bailExitCode = 32
)

func main() {
	var tracing, givenExecutor, root string
	flag.StringVar(&tracing, "tracing", "", "Emit tracing to a Zipkin-compatible tracing endpoint")
	flag.StringVar(&givenExecutor, "use-executor", "", "Use the given program as the executor")
	flag.StringVar(&root, "root", "", "Project root path (accepted for compatibility; unused)")
	flag.Parse()
	logging.InitLogging(false, 0, false)

	execPath := givenExecutor
	if execPath == "" {
		p, err := findExecutor()
		if err != nil {
			cmdutil.Exit(err)
		}
		execPath = p
	}
	logging.V(3).Infof("language host using executor %q", execPath)

	h := &host{exec: execPath, tracing: tracing}
	if args := flag.Args(); len(args) > 0 {
		h.engineAddress = args[len(args)-1]
	}

	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, h)
			return nil
		},
		Options: rpcutil.TracingServerInterceptorOptions(nil),
	})
	if err != nil {
		cmdutil.Exit(fmt.Errorf("could not start language host RPC server: %w", err))
	}
	fmt.Printf("%d\n", handle.Port)
	if err := <-handle.Done; err != nil {
		cmdutil.Exit(fmt.Errorf("language host RPC stopped serving: %w", err))
	}
}

// findExecutor looks for pulumi-language-python-exec next to this binary, then on PATH.
func findExecutor() (string, error) {
	name := "pulumi-language-python" + execSuffix
	if self, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(self); err == nil {
			self = resolved
		}
		cand := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(cand); err == nil && !st.IsDir() {
			return cand, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("could not find `%s` next to the language host or on $PATH: %w", name, err)
	}
	return p, nil
}

type host struct {
	pulumirpc.UnimplementedLanguageRuntimeServer

	exec    string
	tracing string

	mu            sync.Mutex
	engineAddress string
}

func (h *host) engine() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.engineAddress
}

func (h *host) Handshake(_ context.Context, req *pulumirpc.LanguageHandshakeRequest,
) (*pulumirpc.LanguageHandshakeResponse, error) {
	h.mu.Lock()
	h.engineAddress = req.GetEngineAddress()
	h.mu.Unlock()
	return &pulumirpc.LanguageHandshakeResponse{}, nil
}

func (h *host) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version.Version}, nil
}

// resolveToolchain maps the project's runtime options onto sdk/v3's toolchain.
func resolveToolchain(info *pulumirpc.ProgramInfo) (toolchain.Toolchain, error) {
	opts := toolchain.PythonOptions{
		Root:       info.GetRootDirectory(),
		ProgramDir: info.GetProgramDirectory(),
	}
	if opts.ProgramDir == "" {
		opts.ProgramDir = opts.Root
	}
	if o := info.GetOptions(); o != nil {
		m := o.AsMap()
		if v, ok := m["virtualenv"].(string); ok {
			opts.Virtualenv = v
		}
		switch m["toolchain"] {
		case "pip":
			opts.Toolchain = toolchain.Pip
		case "poetry":
			opts.Toolchain = toolchain.Poetry
		case "uv":
			opts.Toolchain = toolchain.Uv
		}
		switch m["typechecker"] {
		case "mypy":
			opts.Typechecker = toolchain.TypeCheckerMypy
		case "pyright":
			opts.Typechecker = toolchain.TypeCheckerPyright
		}
	}
	return toolchain.ResolveToolchain(opts)
}

func (h *host) runArgs(req *pulumirpc.RunRequest) []string {
	args := []string{"-u", h.exec}
	add := func(k, v string) {
		if v != "" {
			args = append(args, "--"+k, v)
		}
	}
	add("monitor", req.GetMonitorAddress())
	add("engine", h.engine())
	add("project", req.GetProject())
	add("root_directory", req.GetInfo().GetRootDirectory())
	add("stack", req.GetStack())
	add("pwd", req.GetPwd())
	add("dry_run", fmt.Sprintf("%v", req.GetDryRun()))
	add("parallel", fmt.Sprint(req.GetParallel()))
	add("tracing", h.tracing)
	add("organization", req.GetOrganization())
	program := req.GetInfo().GetEntryPoint()
	if program == "" {
		program = req.GetProgram() //nolint:staticcheck // older engines
	}
	if program == "" {
		program = "."
	}
	args = append(args, program)
	return append(args, req.GetArgs()...)
}

func (h *host) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, h.runArgs(req)...)
	if err != nil {
		return nil, err
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	if cfg := req.GetConfig(); cfg != nil {
		b, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("failed to serialize configuration: %w", err)
		}
		env = append(env, "PULUMI_CONFIG="+string(b))
	}
	if keys := req.GetConfigSecretKeys(); len(keys) > 0 {
		b, err := json.Marshal(keys)
		if err != nil {
			return nil, fmt.Errorf("failed to serialize configuration secret keys: %w", err)
		}
		env = append(env, "PULUMI_CONFIG_SECRET_KEYS="+string(b))
	}
	cmd.Env = env
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	logging.V(5).Infof("language host launching: %s %s", cmd.Path, strings.Join(cmd.Args[1:], " "))

	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			if exitErr.ExitCode() == bailExitCode {
				return &pulumirpc.RunResponse{Bail: true}, nil
			}
			return &pulumirpc.RunResponse{
				Error: fmt.Sprintf("Program exited with non-zero exit code: %d", exitErr.ExitCode()),
			}, nil
		}
		return &pulumirpc.RunResponse{
			Error: fmt.Sprintf("Problem executing program (could not run language executor): %v", err),
		}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

// pluginScript lists the pulumi-plugin.json files of the installed Python
// distributions: that is how a Python package says which resource plugin it
// needs (pulumi_kubernetes ships one with name "kubernetes" and its version).
const pluginScript = `
import json, importlib.metadata as md
out = []
for d in md.distributions():
    for f in (d.files or []):
        if f.name != "pulumi-plugin.json":
            continue
        try:
            data = json.loads(f.read_text())
        except Exception:
            continue
        if isinstance(data, dict):
            data.setdefault("_dist", d.metadata["Name"])
            out.append(data)
print(json.dumps(out))
`

type pulumiPluginJSON struct {
	Resource         bool   `json:"resource"`
	Name             string `json:"name"`
	Version          string `json:"version"`
	Server           string `json:"server"`
	Dist             string `json:"_dist"`
	Parameterization *struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Value   string `json:"value"`
	} `json:"parameterization"`
}

func (h *host) requiredPackages(ctx context.Context, info *pulumirpc.ProgramInfo,
) ([]*pulumirpc.PackageDependency, error) {
	tc, err := resolveToolchain(info)
	if err != nil {
		return nil, err
	}
	cmd, err := tc.Command(ctx, "-c", pluginScript)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing installed Python packages: %w", err)
	}
	var plugins []pulumiPluginJSON
	if err := json.Unmarshal(out, &plugins); err != nil {
		return nil, fmt.Errorf("parsing installed Python packages: %w", err)
	}
	seen := map[string]bool{}
	var deps []*pulumirpc.PackageDependency
	for _, p := range plugins {
		if !p.Resource || p.Name == "" {
			continue
		}
		dep := &pulumirpc.PackageDependency{
			Kind:    "resource",
			Name:    p.Name,
			Version: p.Version,
			Server:  p.Server,
		}
		if p.Version != "" && !strings.HasPrefix(p.Version, "v") {
			dep.Version = "v" + p.Version
		}
		if pp := p.Parameterization; pp != nil {
			val, err := base64.StdEncoding.DecodeString(pp.Value)
			if err != nil {
				return nil, fmt.Errorf("package %s: bad parameterization value: %w", p.Dist, err)
			}
			dep.Parameterization = &pulumirpc.PackageParameterization{
				Name: pp.Name, Version: pp.Version, Value: val,
			}
		}
		key := dep.Name + "@" + dep.Version
		if dep.Parameterization != nil {
			key += "/" + dep.Parameterization.Name + "@" + dep.Parameterization.Version
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		deps = append(deps, dep)
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].Name < deps[j].Name })
	return deps, nil
}

func (h *host) GetRequiredPackages(ctx context.Context, req *pulumirpc.GetRequiredPackagesRequest,
) (*pulumirpc.GetRequiredPackagesResponse, error) {
	deps, err := h.requiredPackages(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	return &pulumirpc.GetRequiredPackagesResponse{Packages: deps}, nil
}

//nolint:staticcheck // deprecated RPC kept for older engines
func (h *host) GetRequiredPlugins(ctx context.Context, req *pulumirpc.GetRequiredPluginsRequest,
) (*pulumirpc.GetRequiredPluginsResponse, error) {
	deps, err := h.requiredPackages(ctx, req.GetInfo())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetRequiredPluginsResponse{}
	for _, d := range deps {
		if d.Parameterization != nil {
			continue
		}
		resp.Plugins = append(resp.Plugins, &pulumirpc.PluginDependency{
			Name: d.Name, Kind: d.Kind, Version: d.Version, Server: d.Server,
		})
	}
	return resp, nil
}

type streamWriter struct {
	mu     *sync.Mutex
	send   func(*pulumirpc.InstallDependenciesResponse) error
	stderr bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := append([]byte(nil), p...)
	resp := &pulumirpc.InstallDependenciesResponse{Stdout: b}
	if w.stderr {
		resp = &pulumirpc.InstallDependenciesResponse{Stderr: b}
	}
	if err := w.send(resp); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h *host) InstallDependencies(req *pulumirpc.InstallDependenciesRequest,
	server pulumirpc.LanguageRuntime_InstallDependenciesServer,
) error {
	info := req.GetInfo()
	tc, err := resolveToolchain(info)
	if err != nil {
		return err
	}
	dir := info.GetProgramDirectory()
	if dir == "" {
		dir = req.GetDirectory() //nolint:staticcheck // older engines
	}
	var mu sync.Mutex
	var stdout, stderr io.Writer = streamWriter{&mu, server.Send, false}, streamWriter{&mu, server.Send, true}
	return tc.InstallDependencies(server.Context(), dir, req.GetUseLanguageVersionTools(),
		true /*showOutput*/, stdout, stderr)
}

func (h *host) About(ctx context.Context, req *pulumirpc.AboutRequest) (*pulumirpc.AboutResponse, error) {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return nil, err
	}
	info, err := tc.About(ctx)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.AboutResponse{
		Executable: info.PythonExecutable,
		Version:    info.PythonVersion.String(),
		Metadata:   map[string]string{"toolchain": info.ToolchainVersion.String()},
	}, nil
}

func (h *host) GetProgramDependencies(ctx context.Context, req *pulumirpc.GetProgramDependenciesRequest,
) (*pulumirpc.GetProgramDependenciesResponse, error) {
	tc, err := resolveToolchain(req.GetInfo())
	if err != nil {
		return nil, err
	}
	pkgs, err := tc.ListPackages(ctx, req.GetTransitiveDependencies())
	if err != nil {
		return nil, err
	}
	resp := &pulumirpc.GetProgramDependenciesResponse{}
	for _, p := range pkgs {
		resp.Dependencies = append(resp.Dependencies, &pulumirpc.DependencyInfo{Name: p.Name, Version: p.Version})
	}
	return resp, nil
}
