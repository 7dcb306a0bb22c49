package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's user: not root, with the uid and gid distroless images use
// for theirs, so that a Kubernetes runAsNonRoot check and a volume's fsGroup
// work with numbers.
const (
	userName = "reconcile"
	uid      = 65532
)

// The paths of the image.
const (
	binaryPath   = "/usr/local/bin/reconcile"
	certsPath    = "/etc/ssl/certs/ca-certificates.crt"
	zoneinfoPath = "/usr/share/zoneinfo"
	homePath     = "/home/reconcile"
)

// Options says what to build.
type Options struct {
	// Root is the repository's root: the module that holds cmd/reconcile.
	Root string
	// Arch is the binary's and the image's GOARCH.
	Arch string
	// Source, when set, is the repository's URL for the source label.
	Source string
}

// Image is a built image.
type Image struct {
	// OCI is the image itself.
	OCI v1.Image
	// Digest is the manifest's digest: the same for the same commit.
	Digest v1.Hash
	// Version and Revision are what the binary says of itself (its
	// module version from the commit's tag or pseudo-version, and the
	// commit), and the image's labels.
	Version, Revision string
	// Uncommitted is true when the working tree had changes to tracked
	// files: they are not in the image, which is built from the commit.
	Uncommitted bool
}

// Build compiles cmd/reconcile and puts it in an image of one layer.
func Build(ctx context.Context, o Options) (*Image, error) {
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "reconcile-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "src")
	rev, uncommitted, err := checkout(ctx, root, src)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "reconcile")
	if err := compile(ctx, src, o.Arch, bin); err != nil {
		return nil, err
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("read the binary's build information: %w", err)
	}
	stamp := readStamp(info)
	if stamp.revision != rev || stamp.committed.IsZero() {
		return nil, fmt.Errorf("the binary records revision %s at %v, want %s: is git on PATH?", stamp.revision, stamp.committed, rev)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files, err := rootFS(binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := tarFiles(files, stamp.committed)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: stamp.committed}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: created, CreatedBy: "go -C deploy run ./image", Comment: "reconcile " + stamp.version}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created, cfg.OS, cfg.Architecture = created, "linux", o.Arch
	cfg.Config = v1.Config{
		User:       strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
		Entrypoint: []string{binaryPath},
		Cmd:        []string{"help"},
		WorkingDir: homePath,
		Env: []string{"PATH=/usr/local/bin", "HOME=" + homePath, "SSL_CERT_FILE=" + certsPath,
			"ZONEINFO=" + zoneinfoPath},
		Labels: labels(stamp, o.Source),
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	return &Image{OCI: img, Digest: digest, Version: stamp.version, Revision: stamp.revision, Uncommitted: uncommitted}, nil
}

// checkout clones the commit checked out at root into dir (sharing root's
// objects, so it costs a checkout), and returns the commit and whether
// root has changes the commit lacks. The image is built from the commit
// alone: the same commit gives the same image, whatever else lies in the
// working tree, and the go command stamps the binary with the commit (it
// does not in a linked worktree, whose .git is a file).
func checkout(ctx context.Context, root, dir string) (rev string, uncommitted bool, err error) {
	git := func(dir string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			return "", fmt.Errorf("git %s: %w %s", strings.Join(args, " "), err, stderr)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if rev, err = git(root, "rev-parse", "HEAD"); err != nil {
		return "", false, fmt.Errorf("the image is built from a commit of a git checkout: %w", err)
	}
	status, err := git(root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", false, err
	}
	if _, err := git(root, "clone", "--quiet", "--shared", "--no-checkout", root, dir); err != nil {
		return "", false, err
	}
	if _, err := git(dir, "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", rev); err != nil {
		return "", false, err
	}
	return rev, status != "", nil
}

// compile builds a static binary: no cgo, no paths of this machine, the
// VCS stamp on (a GOFLAGS=-buildvcs=false in the environment is
// overridden), no build id that would differ between machines.
func compile(ctx context.Context, root, arch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w -buildid=",
		"-o", out, "./cmd/reconcile")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build reconcile: %w\n%s", err, b)
	}
	return nil
}

// stamp is what the binary says of its build.
type stamp struct {
	version, revision string
	committed         time.Time
}

// readStamp reads the module version and the VCS settings.
func readStamp(info *buildinfo.BuildInfo) stamp {
	s := stamp{version: info.Main.Version, revision: "unknown"}
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.revision = kv.Value
		case "vcs.time":
			s.committed, _ = time.Parse(time.RFC3339, kv.Value)
		}
	}
	s.committed = s.committed.UTC()
	return s
}

// labels are the OCI annotations of the image's config.
func labels(s stamp, source string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "reconcile",
		"org.opencontainers.image.description": "Reconciles a day's payments against rate-limited payment providers, with PostgreSQL as its queue and ledger.",
		"org.opencontainers.image.version":     s.version,
		"org.opencontainers.image.revision":    s.revision,
		"org.opencontainers.image.created":     s.committed.Format(time.RFC3339),
	}
	if source != "" {
		l["org.opencontainers.image.source"] = source
	}
	return l
}

// file is one entry of the image's file system.
type file struct {
	path string
	mode int64
	dir  bool
	uid  int
	data []byte
}

// rootFS lists the image's files: the binary, the user's entries, the CA
// certificates and the time zones, with the directories above them.
func rootFS(binary []byte) ([]file, error) {
	certs := certificates()
	zones, err := zoneinfo()
	if err != nil {
		return nil, err
	}
	files := []file{
		{path: binaryPath, mode: 0o755, data: binary},
		{path: "/etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", userName, uid, uid, userName, homePath))},
		{path: "/etc/group", mode: 0o644, data: []byte("root:x:0:\n" + fmt.Sprintf("%s:x:%d:\n", userName, uid))},
		// Go's resolver reads it to look in /etc/hosts before DNS.
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: certsPath, mode: 0o644, data: certs},
		{path: homePath, mode: 0o755, dir: true, uid: uid},
		{path: "/tmp", mode: 0o1777, dir: true},
	}
	files = append(files, zones...)
	return withParents(files), nil
}

// certificates is the Mozilla NSS trust store as packaged by
// golang.org/x/crypto/x509roots/fallback (pinned in go.sum), in PEM. Roots
// whose trust NSS constrains (a distrust-after date) are left out: a PEM
// bundle cannot carry the constraint.
func certificates() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
		}
	}
	return b.Bytes()
}

// zoneinfo is the time-zone database of the Go toolchain that builds the
// binary ($GOROOT/lib/time/zoneinfo.zip), unpacked: the same data the
// binary would embed with time/tzdata, pinned by the toolchain's version.
func zoneinfo() ([]file, error) {
	root, err := goroot()
	if err != nil {
		return nil, err
	}
	zr, err := zip.OpenReader(filepath.Join(root, "lib", "time", "zoneinfo.zip"))
	if err != nil {
		return nil, fmt.Errorf("open the toolchain's time-zone database: %w", err)
	}
	defer zr.Close()
	var out []file
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, file{path: path.Join(zoneinfoPath, f.Name), mode: 0o644, data: data})
	}
	return out, nil
}

// goroot asks the go command, which knows the toolchain actually used
// (GOTOOLCHAIN may switch it), for its root.
func goroot() (string, error) {
	b, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// withParents adds the directories above every file, once each.
func withParents(files []file) []file {
	have := map[string]bool{}
	for _, f := range files {
		have[f.path] = true
	}
	for _, f := range slices.Clone(files) {
		for d := path.Dir(f.path); d != "/" && !have[d]; d = path.Dir(d) {
			have[d] = true
			files = append(files, file{path: d, mode: 0o755, dir: true})
		}
	}
	return files
}

// tarFiles writes the files as a tar stream in path order, each with the
// same modification time and owner root (the home directory the user), so
// that the same files always give the same bytes.
func tarFiles(files []file, mtime time.Time) ([]byte, error) {
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.path, b.path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, ModTime: mtime, Uid: f.uid, Gid: f.uid,
			Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.uid != 0 {
			h.Uname, h.Gname = userName, userName
		} else {
			h.Uname, h.Gname = "root", "root"
		}
		if f.dir {
			h.Typeflag, h.Name, h.Size = tar.TypeDir, h.Name+"/", 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteTarball writes the image as a tarball named tag (podman load -i,
// docker load -i).
func (img *Image) WriteTarball(file, tag string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("--tag %q: %w", tag, err)
	}
	if err := tarball.WriteToFile(file, ref, img.OCI); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// WriteLayout writes the image into an OCI image layout directory, created
// when missing.
func (img *Image) WriteLayout(dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if err := p.AppendImage(img.OCI); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	return nil
}
