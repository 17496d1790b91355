package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImageBuildsAndStarts builds the image as CI and operators do, reads
// it back from its OCI layout, unpacks its filesystem, and runs the edge
// from it: chrooted into the image's filesystem as the image's user when
// the test runs as root (CI does), so nothing outside the image (no shell,
// no libc) is used.
func TestImageBuildsAndStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the edge binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "egbe-edge")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "../../cmd/egbe-edge")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Reproducible: the same binary gives the same image digest.
	epoch := time.Unix(1700000000, 0).UTC()
	img, err := Build(bin, epoch)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Build(bin, epoch)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("two builds of one binary differ: %s vs %s", d1, d2)
	}

	ref, _ := name.NewTag(DefaultTag)
	lay := filepath.Join(dir, "layout")
	if err := WriteLayout(lay, img, ref); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != DefaultTag {
		t.Fatalf("layout index: %+v", im.Manifests)
	}
	read, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := read.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != User || strings.HasPrefix(cf.Config.User, "0") {
		t.Fatalf("image user %q, want %q (not root)", cf.Config.User, User)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/egbe-edge" {
		t.Fatalf("entrypoint %q", got)
	}

	root := filepath.Join(dir, "rootfs")
	if err := unpack(read, root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "sh")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the image has a shell (%v): it should hold only the binary", err)
	}

	ports := make([]string, 6)
	for i := range ports {
		ports[i] = "127.0.0.1:" + strconv.Itoa(freePort(t))
	}
	args := []string{"--http", ports[0], "--https", ports[1], "--ice-udp", ports[2],
		"--streamer-ws", ports[3], "--admin", ports[4], "--player-ws", ports[5], "--turn", "127.0.0.1:0", "--sfu-ws", "127.0.0.1:0"}
	edge := imageCommand(t, root, append([]string{"/egbe-edge"}, args...)...)
	var log lockedBuffer
	edge.Stdout, edge.Stderr = &log, &log
	if err := edge.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{}) // closed once the edge is reaped; waitErr set before
	go func() { waitErr = edge.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = edge.Process.Kill()
		<-exited
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resp, err := http.Get("http://" + ports[4] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("the edge exited before it was ready: %v\n%s", waitErr, log.String())
		case <-ctx.Done():
			t.Fatalf("the edge from the image never became ready\n%s", log.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	resp, err := http.Get("http://" + ports[0] + "/v6/realtime/negotiate")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("negotiate from the image's edge: %d", resp.StatusCode)
	}

	// The pre-stop hook is the binary itself; outside a container PID 1 is
	// not egbe-edge (here, chrooted without /proc, it cannot even be read),
	// and it must refuse to signal anything.
	pre := imageCommand(t, root, "/egbe-edge", "prestop", "--wait", "0s")
	out, err := pre.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "egbe-edge prestop:") {
		t.Fatalf("prestop outside a container: err %v, output %q", err, out)
	}
	if resp, err := http.Get("http://" + ports[4] + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the edge stopped being ready after a refused prestop: %v", err)
	} else {
		resp.Body.Close()
	}

	// SIGTERM drains and exits 0.
	if err := edge.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("edge exit after SIGTERM: %v\n%s", waitErr, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("edge did not stop after SIGTERM\n%s", log.String())
	}
}

// imageCommand runs argv (an absolute path inside the image) from the
// unpacked image: chrooted, as the image's user, when running as root.
func imageCommand(t *testing.T, root string, argv ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("not root: running %s from the unpacked image without chroot", argv[0])
		return exec.Command(filepath.Join(root, argv[0]), argv[1:]...)
	}
	uid, gid, _ := strings.Cut(User, ":")
	u, _ := strconv.ParseUint(uid, 10, 32)
	g, _ := strconv.ParseUint(gid, 10, 32)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{} // the image's environment only
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)},
	}
	return cmd
}

// unpack writes the image's flattened filesystem under root.
func unpack(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				return err
			}
			if err := os.Chmod(p, fileMode(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fileMode(h.Mode))
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected entry %s (type %c) in the image", h.Name, h.Typeflag)
		}
	}
}

// fileMode maps tar mode bits (incl. sticky) to an os.FileMode.
func fileMode(m int64) os.FileMode {
	mode := os.FileMode(m) & os.ModePerm
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// lockedBuffer collects a child's output; the test may read it while the
// child still writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	for range 16 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		ln.Close()
		if err == nil {
			pc.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}
