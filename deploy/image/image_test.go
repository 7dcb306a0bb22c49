package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// built is the image, built once for the tests of this file.
var built struct {
	once sync.Once
	img  *Image
	err  error
}

func image(t *testing.T) *Image {
	t.Helper()
	built.once.Do(func() { built.img, built.err = Build(context.Background(), Options{Root: "../..", Arch: "amd64"}) })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.img
}

func TestTheSameCommitGivesTheSameDigest(t *testing.T) {
	first := image(t)
	again, err := Build(context.Background(), Options{Root: "../..", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != first.Digest {
		t.Fatalf("two builds of %s: %s and %s", first.Revision, first.Digest, again.Digest)
	}
	t.Logf("FIGURES image %s of %s (version %s)", first.Digest, first.Revision, first.Version)
}

func TestConfigNamesUserEntrypointAndVersion(t *testing.T) {
	img := image(t)
	cfg, err := img.OCI.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/usr/local/bin/reconcile" || cfg.OS != "linux" ||
		cfg.Architecture != "amd64" {
		t.Errorf("config: user %q, entrypoint %q, platform %s/%s", c.User, c.Entrypoint, cfg.OS, cfg.Architecture)
	}
	l := c.Labels
	if l["org.opencontainers.image.revision"] != strings.TrimSpace(string(head)) || l["org.opencontainers.image.revision"] != img.Revision ||
		l["org.opencontainers.image.version"] != img.Version || !strings.HasPrefix(img.Version, "v") ||
		l["org.opencontainers.image.created"] != cfg.Created.UTC().Format(time.RFC3339) {
		t.Errorf("labels %v, want revision %s and version %s", l, head, img.Version)
	}
}

// extract unpacks the image's file system into a new directory and
// returns it with the tar headers by path.
func extract(t *testing.T, img *Image) (string, map[string]*tar.Header) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // the image's user walks it under chroot
		t.Fatal(err)
	}
	rc := mutate.Extract(img.OCI)
	defer rc.Close()
	tr := tar.NewReader(rc)
	headers := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		headers["/"+strings.TrimSuffix(h.Name, "/")] = h
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm()|os.FileMode(h.Mode)&os.ModeSticky)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, os.FileMode(h.Mode))
			}
		default:
			t.Fatalf("unexpected entry %s of type %c", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Chmod(p, fileMode(h))
		}
		if err == nil && os.Geteuid() == 0 {
			err = os.Lchown(p, h.Uid, h.Gid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir, headers
}

func fileMode(h *tar.Header) os.FileMode {
	m := os.FileMode(h.Mode).Perm()
	if h.Mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func TestFilesAreThoseOfAStaticNonRootImage(t *testing.T) {
	img := image(t)
	dir, headers := extract(t, img)
	bin := filepath.Join(dir, "usr/local/bin/reconcile")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader: it is not static")
		}
	}
	f.Close()
	if h := headers["/usr/local/bin/reconcile"]; h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("binary mode %o owner %d, want 755 root", h.Mode, h.Uid)
	}
	if h := headers["/home/reconcile"]; h.Uid != 65532 || h.Typeflag != tar.TypeDir {
		t.Errorf("home directory owned by %d, want 65532", h.Uid)
	}
	if h := headers["/tmp"]; h.Mode != 0o1777 {
		t.Errorf("/tmp mode %o, want 1777", h.Mode)
	}
	var last time.Time
	for name, h := range headers {
		if last.IsZero() {
			last = h.ModTime
		}
		if !h.ModTime.Equal(last) {
			t.Fatalf("%s dated %v, another file %v: want every file at the commit's time", name, h.ModTime, last)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(dir, "etc/passwd"))
	if !strings.Contains(string(passwd), "reconcile:x:65532:65532:") {
		t.Errorf("/etc/passwd has no reconcile user:\n%s", passwd)
	}
	pemData, _ := os.ReadFile(filepath.Join(dir, "etc/ssl/certs/ca-certificates.crt"))
	var roots int
	for block, rest := pem.Decode(pemData); block != nil; block, rest = pem.Decode(rest) {
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", roots, err)
		}
		roots++
	}
	if roots < 100 {
		t.Errorf("%d CA certificates, want the whole NSS store (over 100)", roots)
	}
	tz, err := os.ReadFile(filepath.Join(dir, "usr/share/zoneinfo/Europe/Berlin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := time.LoadLocationFromTZData("Europe/Berlin", tz); err != nil {
		t.Errorf("Europe/Berlin: %v", err)
	}
}

// TestTheImageRunsVersionAndMigrateStatus runs the image's own binary on
// the image's own files: under podman where this machine lets podman run a
// container, and always chrooted into the extracted layer as the image's
// user (or, without root, from the extracted layer), against the test's
// PostgreSQL.
func TestTheImageRunsVersionAndMigrateStatus(t *testing.T) {
	img := image(t)
	podmanChecked := runUnderPodman(t, img)
	dir, _ := extract(t, img)
	cfg, err := img.OCI.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	dbURL := tcpDatabaseURL(t)
	source := filepath.Join(dir, "tmp", "payments-2026-10-24.csv")
	if err := os.WriteFile(source, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"tx_1,acct_1,1250,EUR,succeeded,2026-10-24T23:30:00+02:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	chroot := os.Geteuid() == 0
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, "usr/local/bin/reconcile"), args...)
		env := append([]string{}, cfg.Config.Env...)
		if chroot {
			cmd.Path = "/usr/local/bin/reconcile"
			cmd.Dir = "/home/reconcile"
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		} else {
			// Without root, the extracted files stand in for the image's
			// paths.
			for i, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				if k == "SSL_CERT_FILE" || k == "ZONEINFO" || k == "HOME" {
					env[i] = k + "=" + filepath.Join(dir, v)
				}
			}
			args = replaceAll(args, "/tmp/", filepath.Join(dir, "tmp")+"/")
			cmd.Args = append([]string{cmd.Path}, args...)
		}
		cmd.Env = append(env, "DATABASE_URL="+dbURL)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("run %v: %v", args, err)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	out, code := run("version")
	if code != 0 || !strings.Contains(out, "revision "+img.Revision[:12]) || !strings.Contains(out, img.Version) {
		t.Fatalf("reconcile version: exit %d\n%s\nwant revision %s and version %s", code, out, img.Revision[:12], img.Version)
	}
	out, code = run("migrate", "--status")
	if code != 1 || !strings.Contains(out, "run `reconcile migrate`") {
		t.Fatalf("migrate --status on an empty database: exit %d\n%s", code, out)
	}
	if out, code = run("migrate"); code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, out)
	}
	out, code = run("migrate", "--status")
	if code != 0 || !strings.Contains(out, "the version this reconcile needs") {
		t.Fatalf("migrate --status: exit %d\n%s", code, out)
	}
	// --tz reads the image's time zones: 23:30 in Berlin is the 24th.
	if out, code = run("enqueue", "--date", "2026-10-24", "--tz", "Europe/Berlin", "--source", "/tmp/payments-2026-10-24.csv"); code != 0 {
		t.Fatalf("enqueue --tz Europe/Berlin: exit %d\n%s", code, out)
	}
	if out, code = run("enqueue", "--date", "2026-10-25", "--tz", "Europe/Nowhere", "--source", "/tmp/payments-2026-10-24.csv"); code != 2 ||
		!strings.Contains(out, "Europe/Nowhere") {
		t.Fatalf("enqueue --tz Europe/Nowhere: exit %d\n%s", code, out)
	}
	how := "extracted layer (no root: not chrooted)"
	if chroot {
		how = "extracted layer, chrooted, as uid 65532"
	}
	t.Logf("checked from the %s; under podman: %v", how, podmanChecked)
}

func replaceAll(args []string, old, repl string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, old, repl)
	}
	return out
}

// runUnderPodman loads the image into podman and runs `reconcile version`
// in a container. It reports false, with the reason logged, when podman is
// missing or cannot start a container on this machine (a sandbox that
// forbids setrlimit, for one); a container that starts and fails fails the
// test.
func runUnderPodman(t *testing.T, img *Image) bool {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		t.Log("podman: not installed")
		return false
	}
	tarPath := filepath.Join(t.TempDir(), "image.tar")
	tag := "localhost/reconcile-test:" + img.Digest.Hex[:12]
	if err := img.WriteTarball(tarPath, tag); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("podman", "load", "-q", "-i", tarPath).CombinedOutput(); err != nil {
		t.Logf("podman load: %v\n%s", err, out)
		return false
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", tag).Run() })
	out, err := exec.Command("podman", "run", "--rm", "--network", "host", tag, "version").CombinedOutput()
	if err != nil && strings.Contains(string(out), "OCI") {
		t.Logf("podman cannot run a container here: %s", bytes.TrimSpace(out))
		return false
	}
	if err != nil || !strings.Contains(string(out), "revision "+img.Revision[:12]) {
		t.Fatalf("podman run %s version: %v\n%s", tag, err, out)
	}
	user, err := exec.Command("podman", "image", "inspect", "--format", "{{.Config.User}}", tag).Output()
	if err != nil || strings.TrimSpace(string(user)) != "65532:65532" {
		t.Fatalf("podman sees user %q (%v)", user, err)
	}
	return true
}

// tcpDatabaseURL gives a fresh, empty database of the test's PostgreSQL
// over TCP on the loopback, which a chrooted process reaches where it
// cannot see the server's Unix socket: a forwarder in the test relays
// each connection to the socket.
func tcpDatabaseURL(t *testing.T) string {
	t.Helper()
	conn := pgtest.EmptyConnString(t)
	var socketDir, user, dbname string
	for _, kv := range strings.Fields(conn) {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, "'")
		switch k {
		case "host":
			socketDir = v
		case "user":
			user = v
		case "dbname":
			dbname = v
		}
	}
	if !strings.HasPrefix(socketDir, "/") {
		return conn // a server on TCP already
	}
	socket := filepath.Join(socketDir, ".s.PGSQL.5432")
	for _, kv := range strings.Fields(conn) {
		if k, v, _ := strings.Cut(kv, "="); k == "port" {
			socket = filepath.Join(socketDir, ".s.PGSQL."+v)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relay(c, socket)
		}
	}()
	return "postgres://" + user + "@" + ln.Addr().String() + "/" + dbname + "?sslmode=disable"
}

func relay(c net.Conn, socket string) {
	defer c.Close()
	s, err := net.Dial("unix", socket)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}
