// Command image builds reconcile's OCI image without a container engine:
// a static binary, a non-root user, CA certificates and time-zone data, on
// no base image at all. The same commit gives the same image digest: every
// input is pinned (the Go toolchain, the module graph, the CA bundle of
// golang.org/x/crypto/x509roots/fallback, the toolchain's own zoneinfo), and
// every file's time is the commit's time.
//
// From the repository's root:
//
//	go -C deploy run ./image                       # bin/reconcile-image.tar, loadable by podman or docker load
//	go -C deploy run ./image --oci bin/reconcile-oci  # also an OCI image layout directory
//
// It prints the image's digest, version and revision.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	root := fs.String("root", "..", "the repository's root (the module of cmd/reconcile)")
	out := fs.String("out", "../bin/reconcile-image.tar", "write the image as a tarball (podman load -i, docker load -i); empty: none")
	oci := fs.String("oci", "", "also write an OCI image layout directory (skopeo, crane, containerd)")
	tag := fs.String("tag", "reconcile:latest", "the name the tarball gives the image")
	arch := fs.String("arch", "amd64", "GOARCH of the binary and the image")
	source := fs.String("source", "", "the org.opencontainers.image.source label: the repository's URL; empty: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	img, err := Build(ctx, Options{Root: *root, Arch: *arch, Source: *source})
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := img.WriteTarball(*out, *tag); err != nil {
			return err
		}
		fmt.Println("wrote", *out)
	}
	if *oci != "" {
		if err := img.WriteLayout(*oci); err != nil {
			return err
		}
		fmt.Println("wrote", *oci)
	}
	if img.Uncommitted {
		fmt.Fprintln(os.Stderr, "image: the working tree has uncommitted changes; the image is built from the commit", img.Revision)
	}
	fmt.Printf("digest %s\nversion %s\nrevision %s\n", img.Digest, img.Version, img.Revision)
	return nil
}
