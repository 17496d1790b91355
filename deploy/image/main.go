// Command image builds the egbe-edge container image without a container
// daemon or a base image from a registry: a static egbe-edge binary on an
// empty filesystem, run as a non-root user, written as an OCI image layout
// (for `skopeo`, `crane` or `podman`) and, with --tar, as a docker-archive
// tarball (`docker load`, `podman load`).
//
//	go run ./deploy/image --out artifacts/image [--tar artifacts/egbe-edge.tar] [--tag ghcr.io/oshun/egbe-edge:latest]
//
// The image holds /egbe-edge, an empty /tmp and, when the build host has
// one, the CA bundle at /etc/ssl/certs/ca-certificates.crt (for rediss://
// and TLS to shards). There is no shell: the Kubernetes pre-stop hook calls
// the binary itself (`/egbe-edge drain`). Dockerfile beside this file
// builds the same image where a daemon exists.
//
// Builds are reproducible: every timestamp is SOURCE_DATE_EPOCH (0 when
// unset) and the binary is built with -trimpath.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DefaultTag is the reference deploy/kubernetes runs.
const DefaultTag = "ghcr.io/oshun/egbe-edge:latest"

// User is the image's numeric user and group: not root, and not a user any
// host is likely to map to a real account (the distroless "nonroot" id).
const User = "65532:65532"

// hostCABundle is where Debian-like build hosts keep their CA bundle.
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "write the OCI image layout to this directory (required)")
	tarPath := fs.String("tar", "", "also write a docker-archive tarball here")
	tag := fs.String("tag", DefaultTag, "the image reference recorded in the tarball and layout")
	bin := fs.String("bin", "", "use this egbe-edge binary instead of building one (must be static)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	if *bin == "" {
		dir, err := os.MkdirTemp("", "egbe-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*bin = filepath.Join(dir, "egbe-edge")
		if err := buildBinary(*bin, stderr); err != nil {
			return err
		}
	}
	img, err := Build(*bin, epoch)
	if err != nil {
		return err
	}
	if err := WriteLayout(*out, img, ref); err != nil {
		return err
	}
	if *tarPath != "" {
		if err := tarball.WriteToFile(*tarPath, ref, img); err != nil {
			return fmt.Errorf("docker archive: %w", err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "image: %s %s written to %s\n", ref, d, *out)
	return nil
}

// sourceDateEpoch is SOURCE_DATE_EPOCH, the reproducible-builds convention,
// or the Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// buildBinary builds a static egbe-edge (no cgo: the image has no libc).
func buildBinary(out string, stderr io.Writer) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/egbe-edge")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	return nil
}

// Build makes the image from a static binary.
func Build(bin string, created time.Time) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(exe, []byte("#!")) {
		return nil, fmt.Errorf("%s is a script, not the egbe-edge binary", bin)
	}
	ca, err := os.ReadFile(hostCABundle)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	fsTar, err := rootFS(exe, ca, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(fsTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	if arch := os.Getenv("GOARCH"); arch != "" {
		cf.Architecture = arch
	}
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{"/egbe-edge"},
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		ExposedPorts: map[string]struct{}{
			"8080/tcp": {}, "8443/tcp": {}, "8443/udp": {}, "8444/udp": {},
			"8888/tcp": {}, "9090/tcp": {},
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "egbe-edge",
			"org.opencontainers.image.source":  "https://github.com/oshun/egbe-edge",
			"org.opencontainers.image.created": created.Format(time.RFC3339),
		},
		StopSignal: "SIGTERM",
	}
	return mutate.ConfigFile(img, cf)
}

// rootFS is the image's one layer as an uncompressed tar.
func rootFS(exe, ca []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	// The sticky, world-writable /tmp any Go program may assume.
	if err := dir("tmp/", 0o1777); err != nil {
		return nil, err
	}
	if err := file("egbe-edge", 0o755, exe); err != nil {
		return nil, err
	}
	if ca != nil {
		for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/"} {
			if err := dir(d, 0o755); err != nil {
				return nil, err
			}
		}
		if err := file("etc/ssl/certs/ca-certificates.crt", 0o644, ca); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as an OCI image layout at dir, replacing what is
// there, with its reference as the org.opencontainers.image.ref.name
// annotation.
func WriteLayout(dir string, img v1.Image, ref name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.String(),
	}))
}
