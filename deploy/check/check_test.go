package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/opencontainers/go-digest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository's root, two levels above this module.
var root = filepath.Join("..", "..")

// nodeBinary builds cmd/callsheet-node once for the checks that give it the flags a
// packaging file gives it.
var nodeBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "deploy-check-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "callsheet-node")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/callsheet-node")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/callsheet-node: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := nodeBinary(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// flagsParse runs callsheet-node with args and --version: the node parses
// every flag (an unknown flag or a stray argument exits 2) and prints its
// version instead of starting.
func flagsParse(t *testing.T, what string, args []string) {
	t.Helper()
	bin, err := nodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, append(slices.Clone(args), "--version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "callsheet-node ") {
		t.Errorf("%s: callsheet-node %s: %v\n%s", what, strings.Join(args, " "), err, out)
	}
}

// offlineResolver answers every base image with an empty linux/amd64
// config, so the lint needs no registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(ctx context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"},"config":{}}`)
	return ref, digest.FromBytes(cfg), cfg, nil
}

// TestDockerfile lints deploy/Dockerfile as `docker build --check` does
// (BuildKit's dockerfile2llb.DockerfileLint: parse, every stage and
// instruction, and every lint rule), wanting no error and no warning; then
// the final stage's ENTRYPOINT and CMD flags must parse.
func TestDockerfile(t *testing.T) {
	dt, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := llb.Local("dockerfile")
	def, err := src.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	smap := llb.NewSourceMap(&src, "deploy/Dockerfile", "Dockerfile", dt)
	smap.Definition = def
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{SourceMap: smap, MetaResolver: offlineResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error != nil {
		t.Fatalf("deploy/Dockerfile does not build: %s", res.Error.Message)
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		t.Errorf("deploy/Dockerfile:%d: %s: %s (%s)", line, w.RuleName, w.Detail, w.URL)
	}

	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A COPY --from naming no stage is taken for an image name by Docker;
	// here every one must name an earlier stage.
	var names []string
	for _, st := range stages {
		for _, c := range st.Commands {
			if cp, ok := c.(*instructions.CopyCommand); ok && cp.From != "" && !slices.Contains(names, cp.From) {
				t.Errorf("stage %q: COPY --from=%s names no earlier stage (%v)", st.Name, cp.From, names)
			}
		}
		names = append(names, st.Name)
	}
	final := stages[len(stages)-1]
	var entry, cmd []string
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.EntrypointCommand:
			entry = c.CmdLine
		case *instructions.CmdCommand:
			cmd = c.CmdLine
		}
	}
	i := slices.Index(entry, "/usr/local/bin/callsheet-node")
	if i < 0 {
		t.Fatalf("ENTRYPOINT %q does not run /usr/local/bin/callsheet-node", entry)
	}
	flagsParse(t, "Dockerfile ENTRYPOINT and CMD", append(entry[i+1:], cmd...))
}

// TestCompose loads deploy/compose/compose.yaml with compose-go, the loader
// `docker compose config` uses (the Compose Specification's schema, then
// interpolation and normalisation), and checks the fleet it describes.
func TestCompose(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "compose"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
		Environment: types.Mapping{},
	})
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	names := project.ServiceNames()
	slices.Sort(names)
	if !slices.Equal(names, []string{"n1", "n2", "n3"}) {
		t.Fatalf("services %v, want n1 n2 n3", names)
	}
	for _, name := range names {
		s := project.Services[name]
		flagsParse(t, "compose service "+name, s.Command)
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{"--name " + name, "--advertise http://" + name + ":7700", "nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222", "--nats-creds /run/secrets/fleet.nk", "--signing-key /run/secrets/fleet.key"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("service %s: command lacks %q", name, want)
			}
		}
		for _, opt := range []string{"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} {
			if !slices.Contains(s.SecurityOpt, opt) {
				t.Errorf("service %s: security_opt lacks %s (the sandbox needs it)", name, opt)
			}
		}
		if len(s.Volumes) != 1 || s.Volumes[0].Source != name+"-data" {
			t.Errorf("service %s: volumes %+v, want its own data volume", name, s.Volumes)
		}
		for _, sec := range s.Secrets {
			if _, ok := project.Secrets[sec.Source]; !ok {
				t.Errorf("service %s: secret %s is not defined", name, sec.Source)
			}
		}
	}
}

// manifest decodes every document of deploy/kubernetes/callsheet.yaml into
// the Kubernetes API's own Go types (k8s.io/api), refusing unknown fields
// and any kind it does not expect.
func manifest(t *testing.T) (*appsv1.StatefulSet, []*corev1.Service) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "kubernetes", "callsheet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sts *appsv1.StatefulSet
	var services []*corev1.Service
	for i, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		switch meta.APIVersion + " " + meta.Kind {
		case " ":
			continue // comments only
		case "apps/v1 StatefulSet":
			if sts != nil {
				t.Fatalf("document %d: a second StatefulSet", i)
			}
			sts = &appsv1.StatefulSet{}
			err = yaml.UnmarshalStrict([]byte(doc), sts)
		case "v1 Service":
			svc := &corev1.Service{}
			services = append(services, svc)
			err = yaml.UnmarshalStrict([]byte(doc), svc)
		default:
			t.Fatalf("document %d: unexpected %q %q", i, meta.APIVersion, meta.Kind)
		}
		if err != nil {
			t.Fatalf("document %d (%s): %v", i, meta.Kind, err)
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet")
	}
	return sts, services
}

// TestKubernetes checks that the StatefulSet, its probes, its routes and
// its secrets fit together, and that the node parses its args.
func TestKubernetes(t *testing.T) {
	sts, _ := manifest(t)
	checkStatefulSet(t, sts)
}

func checkStatefulSet(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", spec.Replicas)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: a node is ready only with a majority of its peers, so pods must start in parallel", spec.PodManagementPolicy)
	}
	if len(spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Template.Spec.Containers))
	}
	c := spec.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	var routes []string
	for i := range int(*spec.Replicas) {
		routes = append(routes, fmt.Sprintf("nats-route://%s-%d.%s:6222", sts.Name, i, spec.ServiceName))
	}
	if !strings.Contains(args, "--routes="+strings.Join(routes, ",")) {
		t.Errorf("args %q: want --routes naming every pod through the headless service %s", args, spec.ServiceName)
	}
	expanded := make([]string, len(c.Args))
	for i, a := range c.Args {
		expanded[i] = strings.ReplaceAll(a, "$(POD_NAME)", sts.Name+"-0")
	}
	flagsParse(t, "StatefulSet args", expanded)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, probe := range []struct {
		name string
		p    *corev1.Probe
		path string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path || ports[probe.p.HTTPGet.Port.String()] != 9090 {
			t.Errorf("%s probe %+v: want GET %s on the metrics port (9090, --metrics-listen)", probe.name, probe.p, probe.path)
		}
	}
	if !strings.Contains(args, "--metrics-listen=0.0.0.0:9090") {
		t.Errorf("args %q lack --metrics-listen=0.0.0.0:9090", args)
	}
	secrets := map[string]bool{}
	for _, v := range spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = true
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
				t.Errorf("secret volume %s: defaultMode %v: the node refuses credentials others may read", v.Name, v.Secret.DefaultMode)
			}
		}
	}
	if !secrets["callsheet-fleet"] || !secrets["callsheet-config"] {
		t.Errorf("secret volumes %v, want callsheet-fleet (NATS credentials, signing key) and callsheet-config", secrets)
	}
}

// TestKubernetesServices: the StatefulSet's serviceName is a headless
// Service that publishes pods before they are ready (a node is ready only
// once its routes have formed the cluster).
func TestKubernetesServices(t *testing.T) {
	sts, services := manifest(t)
	var headless *corev1.Service
	for _, s := range services {
		if s.Name == sts.Spec.ServiceName {
			headless = s
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("serviceName %q: want a headless Service (clusterIP: None) of that name", sts.Spec.ServiceName)
	}
	if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("the headless Service must publish not-ready addresses: peers resolve each other before any is ready")
	}
	for _, s := range services {
		for k, v := range s.Spec.Selector {
			if sts.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, which the pods do not carry", s.Name, k, v)
			}
		}
	}
}

// TestSystemdUnit runs `systemd-analyze verify` on the unit (with its
// ExecStart pointed at a built callsheet-node, which verify requires to
// exist) and gives the node the unit's flags.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join("..", "systemd", "callsheet-node.service"))
	if err != nil {
		t.Fatal(err)
	}
	var execStart []string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			execStart = strings.Fields(v)
		}
	}
	if len(execStart) == 0 || execStart[0] != "/usr/local/bin/callsheet-node" {
		t.Fatalf("ExecStart %q: want /usr/local/bin/callsheet-node", execStart)
	}
	flagsParse(t, "systemd ExecStart", execStart[1:])
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd); the unit's flags were checked")
	}
	bin, err := nodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "callsheet-node.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/callsheet-node"), []byte(bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze verify: no complaints")
}
