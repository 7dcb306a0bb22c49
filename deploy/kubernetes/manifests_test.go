// Package kubernetes_test renders the manifests of this directory with
// kustomize's own Go API (what `kubectl kustomize` runs) and decodes every
// object strictly into the Kubernetes API's Go types: a misspelt or
// misplaced field fails, as `kubectl apply --validate=strict` would.
package kubernetes_test

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// render runs kustomize on this directory and returns its objects.
func render(t *testing.T) [][]byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize: %v", err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range bytes.Split(out, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// manifests are the rendered objects, decoded.
type manifests struct {
	cronJobs    []*batchv1.CronJob
	jobs        []*batchv1.Job
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	policies    []*networkingv1.NetworkPolicy
	configMaps  []*corev1.ConfigMap
	names       []string // kind/name of every object
}

// decode decodes every object strictly into its API type.
func decode(t *testing.T, docs [][]byte) manifests {
	t.Helper()
	var m manifests
	for _, d := range docs {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(d, &head); err != nil {
			t.Fatal(err)
		}
		var obj interface{ GetName() string }
		switch head.APIVersion + " " + head.Kind {
		case "batch/v1 CronJob":
			o := &batchv1.CronJob{}
			m.cronJobs, obj = append(m.cronJobs, o), o
		case "batch/v1 Job":
			o := &batchv1.Job{}
			m.jobs, obj = append(m.jobs, o), o
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			m.deployments, obj = append(m.deployments, o), o
		case "v1 Service":
			o := &corev1.Service{}
			m.services, obj = append(m.services, o), o
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			m.configMaps, obj = append(m.configMaps, o), o
		case "v1 Namespace":
			obj = &corev1.Namespace{}
		case "v1 ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "networking.k8s.io/v1 NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			m.policies, obj = append(m.policies, o), o
		default:
			t.Fatalf("an object of an API this test does not know: %s %s", head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(d, obj); err != nil {
			t.Errorf("%s: %v\n%s", head.Kind, err, d)
			continue
		}
		m.names = append(m.names, head.Kind+"/"+obj.GetName())
	}
	return m
}

func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	m := decode(t, render(t))
	want := []string{"ConfigMap/reconcile", "CronJob/reconcile-enqueue", "Deployment/reconcile-console",
		"Deployment/reconcile-consume", "Job/reconcile-migrate", "Namespace/reconcile", "NetworkPolicy/reconcile",
		"Service/reconcile-console", "ServiceAccount/reconcile"}
	slices.Sort(m.names)
	if !slices.Equal(m.names, want) {
		t.Errorf("objects %v, want %v", m.names, want)
	}
}

// TestAStrayFieldFails checks that the decoding is strict: a field the API
// does not have is refused.
func TestAStrayFieldFails(t *testing.T) {
	t.Parallel()
	var job batchv1.Job
	err := yaml.UnmarshalStrict([]byte("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  activeDeadline: 900\n"), &job)
	if err == nil || !strings.Contains(err.Error(), "activeDeadline") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

func TestTheEnqueueCronJob(t *testing.T) {
	t.Parallel()
	m := decode(t, render(t))
	if len(m.cronJobs) != 1 {
		t.Fatalf("%d CronJobs", len(m.cronJobs))
	}
	c := m.cronJobs[0].Spec
	if c.ConcurrencyPolicy != batchv1.ForbidConcurrent || c.StartingDeadlineSeconds == nil || *c.StartingDeadlineSeconds < 3600 ||
		c.TimeZone == nil || *c.TimeZone != "Europe/Berlin" || c.Schedule != "0 2 * * *" {
		t.Errorf("CronJob spec: policy %s, starting deadline %v, zone %v, schedule %q", c.ConcurrencyPolicy,
			c.StartingDeadlineSeconds, c.TimeZone, c.Schedule)
	}
	if d := c.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d != 900 {
		t.Errorf("activeDeadlineSeconds %v, want 900", d)
	}
	args := strings.Join(c.JobTemplate.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"enqueue", "--date=yesterday", "--tz=Europe/Berlin", "--trigger=cron", "{date}"} {
		if !strings.Contains(args, want) {
			t.Errorf("enqueue args %q lack %q", args, want)
		}
	}
}

func TestConsumersOutliveTheirGrace(t *testing.T) {
	t.Parallel()
	m := decode(t, render(t))
	d := deployment(t, m, "reconcile-consume")
	c := d.Spec.Template.Spec.Containers[0]
	grace := 10 * time.Second // consume's default
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--grace="); ok {
			var err error
			if grace, err = time.ParseDuration(v); err != nil {
				t.Fatal(err)
			}
		}
	}
	period := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if period == nil || time.Duration(*period)*time.Second <= grace+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v, want well above --grace %s", period, grace)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("consumer resources %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
}

func TestTheConsoleIsProbedAndServed(t *testing.T) {
	t.Parallel()
	m := decode(t, render(t))
	c := deployment(t, m, "reconcile-console").Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("console probes: readiness %+v, liveness %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if len(m.services) != 1 || m.services[0].Spec.Selector["app.kubernetes.io/component"] != "console" {
		t.Errorf("services %+v, want one selecting the console", m.services)
	}
	if len(m.policies) != 1 || len(m.policies[0].Spec.PolicyTypes) != 2 {
		t.Errorf("network policies %+v, want one for ingress and egress", m.policies)
	}
}

// TestSecretsComeFromSecrets checks every container of every workload: its
// credentials come from a Secret, and it runs as the image's non-root user
// with nothing to escalate.
func TestSecretsComeFromSecrets(t *testing.T) {
	t.Parallel()
	m := decode(t, render(t))
	var pods []corev1.PodSpec
	for _, d := range m.deployments {
		pods = append(pods, d.Spec.Template.Spec)
	}
	for _, j := range m.jobs {
		pods = append(pods, j.Spec.Template.Spec)
	}
	for _, c := range m.cronJobs {
		pods = append(pods, c.Spec.JobTemplate.Spec.Template.Spec)
	}
	for _, p := range pods {
		if sc := p.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
			t.Errorf("a pod does not run as the image's user 65532: %+v", sc)
		}
		if p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
			t.Error("a pod mounts a service account token it never uses")
		}
		for _, c := range p.Containers {
			if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container %s may escalate or write its root file system", c.Name)
			}
			if c.Image != "registry.example.com/reconcile:latest" {
				t.Errorf("container %s runs image %q, want the kustomization's", c.Name, c.Image)
			}
			for _, e := range c.Env {
				sensitive := strings.Contains(e.Name, "DATABASE_URL") || strings.Contains(e.Name, "TOKEN") ||
					strings.Contains(e.Name, "SECRET") || strings.Contains(e.Name, "PASSWORD") || e.Name == "RECONCILE_NOTIFY_URL"
				if sensitive && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("container %s takes %s from outside a Secret", c.Name, e.Name)
				}
			}
		}
	}
	for _, cm := range m.configMaps {
		for k := range cm.Data {
			if strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") || strings.Contains(k, "DATABASE") {
				t.Errorf("ConfigMap %s holds %s", cm.Name, k)
			}
		}
	}
}

// TestKubectlRendersTheSame renders with kubectl too where it is
// installed (kubectl kustomize embeds its own kustomize version).
func TestKubectlRendersTheSame(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl is not installed: the manifests were rendered with kustomize's Go API only")
		return
	}
	out, err := exec.Command("kubectl", "kustomize", ".").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	got := decode(t, bytes.Split(out, []byte("\n---\n"))).names
	want := decode(t, render(t)).names
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kubectl kustomize gives %v, kustomize's Go API %v", got, want)
	}
}

func deployment(t *testing.T, m manifests, name string) *appsv1.Deployment {
	t.Helper()
	for _, d := range m.deployments {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}
